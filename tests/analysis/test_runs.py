import math
import warnings

import pandas as pd
import pytest

from agentcollapse.analysis import SkippedRunsWarning, find_run_dirs, load_runs
from tests.analysis.conftest import MI, write_run


def _load(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRunsWarning)
        return load_runs(path, **kw)


def test_one_row_per_finished_run_with_config_columns_and_summaries(tmp_path):
    write_run(tmp_path, "a", success=[0.2, 0.6, 0.4, 0.5], mi=[1.0, 2.0, 3.0, 4.0], **{"algorithm.kl_coef": 0.05, "seed": 3})
    runset = load_runs(tmp_path, last_k=2, at_step=2)
    assert len(runset) == 1 and runset.skipped.empty
    run = runset.runs.iloc[0]
    assert run["run_id"] == "a" and run["algorithm.kl_coef"] == 0.05 and run["seed"] == 3 and run["env"] == "frozenlake"
    assert run["final/val/success_rate"] == pytest.approx((0.4 + 0.5) / 2)  # mean of the last k=2
    assert run["peak/val/success_rate"] == pytest.approx(0.6)  # the warm start's 0.9 at step 0 is left out
    assert run["mean/val/success_rate"] == pytest.approx(0.425)
    assert run["at/val/success_rate"] == pytest.approx(0.6)
    assert run["evals/val/success_rate"] == 4
    assert run["final/" + MI] == pytest.approx(3.5)
    h = runset.history
    assert set(h.columns) == {"run_id", "step", "metric", "value"}
    assert h[(h["metric"] == "val/success_rate")]["value"].tolist() == pytest.approx([0.9, 0.2, 0.6, 0.4, 0.5])


def test_unfinished_failed_interrupted_and_half_written_runs_are_skipped_and_named_once(sweep):
    (sweep / "13").mkdir()
    (sweep / "13" / "config.yaml").write_text("seed: 0\n")  # died before its first record
    write_run(sweep, "14", success=[0.5])
    (sweep / "14" / "metrics.csv").unlink()  # a finished summary without its metrics
    with pytest.warns(SkippedRunsWarning) as caught:
        runset = load_runs(sweep)
    assert len(caught) == 1
    message = str(caught[0].message)
    for name in ("9", "10", "11", "12", "13", "14"):
        assert str(sweep / name) in message
    assert "failed" in message and "interrupted" in message and "running" in message and "half-written" in message
    assert sorted(runset.runs["run_id"], key=int) == [str(i) for i in range(9)]
    assert set(runset.skipped["run_dir"]) == {str(sweep / n) for n in ("9", "10", "11", "12", "13", "14")}


def test_hydra_and_checkpoint_folders_are_not_runs(tmp_path):
    run = write_run(tmp_path, "0", success=[0.5])
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (run / "checkpoints").mkdir()
    assert find_run_dirs(tmp_path) == [run]
    assert find_run_dirs(run) == [run]


def test_several_sweeps_and_run_dirs_load_together(tmp_path):
    write_run(tmp_path / "s1", "0", success=[0.5])
    write_run(tmp_path / "s2", "0", success=[0.6])
    runset = _load([tmp_path / "s1", tmp_path / "s2", tmp_path / "s2" / "0"])  # the last is a duplicate
    assert sorted(runset.runs["run_id"]) == ["s1/0", "s2/0"]


def test_trials_of_two_sweeps_given_one_by_one_keep_distinct_names(tmp_path):
    for sweep in ("s1", "s2"):
        for trial in ("0", "1"):
            write_run(tmp_path / sweep, trial, success=[0.5])
    write_run(tmp_path / "elsewhere" / "s1", "0", success=[0.7])  # a second sweep named s1
    dirs = [tmp_path / s / t for s in ("s1", "s2") for t in ("0", "1")] + [tmp_path / "elsewhere" / "s1" / "0"]
    runset = _load(dirs)
    assert len(runset) == 5 and runset.runs["run_id"].is_unique
    assert {"s1/0", "s1/1", "s2/0", "s2/1"} < set(runset.runs["run_id"])
    assert str(tmp_path / "elsewhere" / "s1" / "0") in set(runset.runs["run_id"])


def test_undefined_mi_has_a_chance_column(sweep):
    runset = _load(sweep)
    babble = runset.runs.loc["8"]
    assert math.isnan(babble["mean/" + MI])
    assert babble["mean/" + MI + "@chance"] == 0.0
    # retrieval accuracy at chance is 1 / min(trajectory_samples, P * G) = 1/32
    assert babble["mean/collapse_trajectory_sample/retrieval_accuracy@chance"] == pytest.approx(1 / 32)
    ok = runset.runs.loc["3"]
    assert ok["mean/" + MI + "@chance"] == pytest.approx(ok["mean/" + MI])


def test_trials_csv_adds_axes_and_names_trials_without_a_run(sweep):
    rows = [
        {"trial": str(i), "status": "finished", "value": "0.5", "algorithm.kl_coef": "0.0", "run_dir": str(sweep / str(i))}
        for i in range(9)
    ]
    rows.append(
        {"trial": "15", "status": "failed", "value": "", "algorithm.kl_coef": "0.05", "run_dir": str(sweep / "15"), "reason": "bad config"}
    )
    pd.DataFrame(rows).to_csv(sweep / "trials.csv", index=False)
    runset = _load(sweep)
    assert runset.runs.loc["3", "sweep/algorithm.kl_coef"] == "0.0" and runset.runs.loc["3", "trial"] == "3"
    missing = runset.skipped[runset.skipped["run_dir"] == str(sweep / "15")]
    assert len(missing) == 1 and "failed" in missing["status"].iloc[0] and missing["reason"].iloc[0] == "bad config"


def test_study_db_alone_gives_trial_numbers_and_axes(tmp_path):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    root = tmp_path / "a sweep"
    root.mkdir()
    study = optuna.create_study(storage=f"sqlite:///{root / 'study.db'}", study_name="sweep", direction="maximize")
    for number in range(2):
        trial = study.ask()
        trial.suggest_categorical("algorithm.kl_coef", ["0.0", "0.05"])
        trial.set_user_attr("run_dir", str(root / str(number)))
        if number == 0:
            write_run(root, "0", success=[0.5])
            study.tell(trial, 0.5)
        else:
            trial.set_user_attr("status", "failed")
            trial.set_user_attr("reason", "crashed")
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
    before = (root / "study.db").read_bytes()
    runset = _load(root)
    assert list(runset.runs["trial"]) == ["0"] and runset.runs.iloc[0]["trial_status"] == "finished"
    assert runset.runs.iloc[0]["sweep/algorithm.kl_coef"] in ("0.0", "0.05")
    assert runset.skipped["reason"].tolist() == ["crashed"] and runset.skipped["status"].tolist() == ["trial 1 failed"]
    assert (root / "study.db").read_bytes() == before  # read through Optuna, read-only

    (root / "study.db").write_bytes(b"not a database")
    assert len(_load(root)) == 1 and (root / "study.db").read_bytes() == b"not a database"


def test_a_failed_trial_with_no_status_is_interrupted_in_the_study_db_as_in_trials_csv(tmp_path):
    # Its worker died before recording anything: no run of it is known, so resume runs it again and
    # both readers of the study (this table and the sweep's trials.csv, records.trial_status) say so.
    import optuna

    from agentcollapse.records import trial_status

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="sweep")
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    with pytest.warns(SkippedRunsWarning):
        runset = load_runs(tmp_path)
    assert runset.skipped["status"].tolist() == ["trial 0 interrupted"]
    assert trial_status(study.trials[0]) == "interrupted"


def test_a_record_left_running_by_a_killed_worker_is_reported_as_its_trial_ended(tmp_path):
    # The worker was killed mid-trial: its summary still says "running", trials.csv says interrupted.
    write_run(tmp_path, "0", success=[0.5])
    write_run(tmp_path, "1", success=[0.5], status="running", reason="")
    (tmp_path / "trials.csv").write_text(
        f"trial,status,value,seed,run_dir,reason\n0,finished,0.5,0,{tmp_path / '0'},\n1,interrupted,,1,{tmp_path / '1'},\n"
    )
    with pytest.warns(SkippedRunsWarning, match="interrupted"):
        runset = load_runs(tmp_path)
    assert runset.skipped.set_index("run_dir").loc[str(tmp_path / "1"), "status"] == "interrupted"


def test_every_registered_sampler_has_chance_columns(tmp_path):
    from agentcollapse.diagnostics import sampler_prefixes

    extra = {}
    for pre in sampler_prefixes():  # the nocopy samplers too
        extra[f"{pre}/valid_thinking_rate"] = [0.0, 0.9]
        extra[f"{pre}/mi_estimate"] = [math.nan, 0.4]
    write_run(tmp_path, "0", success=[0.5, 0.6], extra=extra)
    run = _load(tmp_path).runs.iloc[0]
    assert len(sampler_prefixes()) == 4
    for pre in sampler_prefixes():
        assert run[f"mean/{pre}/mi_estimate"] == pytest.approx(0.4)
        assert run[f"mean/{pre}/mi_estimate@chance"] == pytest.approx(0.2)  # the undefined step at chance (0)
