"""The study behind a sweep, without training: grid points run once, outcomes come from run records,
trials.csv is the table, and a resume skips what is done and runs again what was interrupted."""

from __future__ import annotations

import csv

import pytest

from agentcollapse.errors import UserError
from agentcollapse.records import RunRecorder
from agentcollapse.sweep.outcome import Outcome
from agentcollapse.sweep.settings import SweepSettings
from agentcollapse.sweep.space import parse_space
from agentcollapse.sweep.study import SweepStudy


def _record(run_dir, status, rows=((0, 0.6), (5, 0.7), (10, 0.65)), reason=""):
    rec = RunRecorder(run_dir)
    for step, value in rows:
        rec.log(step, {"val/success_rate": value})
    rec.write_summary(status, reason=reason)


def _study(tmp_path, **settings):
    space = parse_space({"algorithm.kl_coef": "0.0,0.01", "seed": "0,1"}, ["env=frozenlake"])
    return SweepStudy(SweepSettings(**settings), tmp_path / "sweep", space, worker="t").open()


def _table(study):
    return list(csv.DictReader((study.sweep_dir / "trials.csv").open()))


def test_a_trial_is_ranked_by_its_final_success_and_the_peak_stays_a_choice(tmp_path):
    _record(tmp_path / "r", "finished", rows=((0, 0.9), (5, 0.5), (10, 0.7), (15, 0.8), (20, 0.6)))
    import json

    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["peak"]["val/success_rate"] == 0.9
    assert summary["peak_after_update"]["val/success_rate"] == 0.8
    final = Outcome.from_run(tmp_path / "r", SweepSettings())  # the mean of the last three evaluations
    assert final.value == pytest.approx(0.7) and final.extra["final"] == pytest.approx(0.7)
    peak = Outcome.from_run(tmp_path / "r", SweepSettings(summary_key="peak_after_update"))  # step 0 left out
    assert peak.value == 0.8 and peak.extra["final"] == pytest.approx(0.7)
    assert Outcome.from_run(tmp_path / "r", SweepSettings(summary_key="peak")).value == 0.9
    missing = Outcome.from_run(tmp_path / "r", SweepSettings(objective="val/success_rate_t1"))
    assert missing.status == "failed" and "finished without final val/success_rate_t1" in missing.reason


def test_grid_runs_every_point_once_and_records_crashes(tmp_path):
    study = _study(tmp_path)
    assert (study.sweep_dir / "study.db").exists() and study.report.total() == 4
    seen = []
    while (got := study.ask()) is not None:
        trial, params = got
        seen.append(tuple(params.values()))
        run_dir = study.trial_dir(trial.number)
        if trial.number == 1:
            _record(run_dir, "failed", rows=((0, 0.6),), reason="RuntimeError: boom")
        elif trial.number == 2:
            pass  # a config error: no record at all
        else:
            _record(run_dir, "finished")
        study.tell(trial, Outcome.from_run(run_dir, study.settings, error="UserError: bad value" if trial.number == 2 else ""))
    study.report.write_csv()
    assert sorted(seen) == sorted([("0.0", "0"), ("0.0", "1"), ("0.01", "0"), ("0.01", "1")])
    rows = _table(study)
    assert [r["status"] for r in rows] == ["finished", "failed", "failed", "finished"]
    assert rows[1]["reason"] == "RuntimeError: boom" and rows[2]["reason"] == "UserError: bad value"
    assert float(rows[0]["value"]) == pytest.approx((0.7 + 0.65) / 2) and rows[0]["algorithm.kl_coef"] and rows[0]["run_dir"].endswith("/0")
    assert "done: 2 finished, 2 failed" in study.report.end_line()
    assert "4/4 done" in study.report.progress_line(trial, Outcome("finished", 0.7))


def test_resume_skips_finished_trials_and_reruns_interrupted_ones(tmp_path):
    study = _study(tmp_path)
    trial, _ = study.ask()
    _record(study.trial_dir(trial.number), "finished")
    study.tell(trial, Outcome.from_run(study.trial_dir(trial.number), study.settings))
    trial, params = study.ask()
    _record(study.trial_dir(trial.number), "interrupted", reason="interrupted by SIGINT")
    study.tell(trial, Outcome.from_run(study.trial_dir(trial.number), study.settings))
    study.ask()  # a worker that vanished mid-trial: RUNNING forever, no heartbeat

    again = _study(tmp_path, heartbeat_s=1)
    assert again.resumed
    assert "resumed: 1 done" in again.report.start_line() and "1 to run again" in again.report.start_line()
    numbers = []
    while (got := again.ask()) is not None:
        t, p = got
        numbers.append((t.number, p))
        _record(again.trial_dir(t.number), "finished")
        again.tell(t, Outcome.from_run(again.trial_dir(t.number), again.settings))
    assert [n for n, _ in numbers] == [3, 4]  # the last grid point, then the interrupted one again
    assert numbers[1][1] == params
    counts = again.report.counts()
    assert counts["finished"] == 3 and counts["interrupted"] == 1 and counts["running"] == 1  # the lost one is not stale yet


def test_a_different_sweep_in_the_same_directory_is_refused(tmp_path):
    _study(tmp_path)
    space = parse_space({"seed": "0,1,2"}, [])
    with pytest.raises(UserError, match="holds a sweep over"):
        SweepStudy(SweepSettings(), tmp_path / "sweep", space).open()
    with pytest.raises(UserError, match="hydra.sweeper.summary_key=final .*resume it with hydra.sweeper.summary_key=final"):
        _study(tmp_path, summary_key="peak_after_update")  # ranked otherwise than it was


def test_samplers_count_n_trials(tmp_path):
    space = parse_space({"algorithm.kl_coef": "interval(0,0.1)", "filter": "none,rv_top_p"}, [])
    study = SweepStudy(SweepSettings(sampler="tpe", n_trials=3), tmp_path / "s", space).open()
    asked = 0
    while (got := study.ask()) is not None:
        trial, params = got
        assert 0 <= float(params["algorithm.kl_coef"]) <= 0.1 and params["filter"] in ("none", "rv_top_p")
        _record(study.trial_dir(trial.number), "finished")
        study.tell(trial, Outcome.from_run(study.trial_dir(trial.number), study.settings))
        asked += 1
    assert asked == 3
    with pytest.raises(UserError, match="needs hydra.sweeper.n_trials"):
        SweepSettings(sampler="random").validate()


def test_a_trial_whose_worker_vanished_runs_again_once_its_heartbeat_is_stale(tmp_path):
    import time

    study = _study(tmp_path, heartbeat_s=1)
    trial, params = study.ask()  # ... and the worker is killed: no outcome, no more heartbeats
    time.sleep(5)  # > 3 heartbeats (SQLite keeps whole seconds)
    again = _study(tmp_path, heartbeat_s=1)
    assert "1 to run again" in again.report.start_line()
    from agentcollapse.records import trial_reason, worker_vanished

    (lost,) = [t for t in again.study.get_trials(deepcopy=False) if worker_vanished(t)]  # the analysis tables' reason too
    assert lost.number == trial.number and "worker vanished" in trial_reason(lost)
    asked = []
    while (got := again.ask()) is not None:
        asked.append(got[1])
        again.tell(got[0], Outcome("finished", 0.5))
    assert len(asked) == 4 and asked[-1] == params  # the 3 untouched grid points, then the lost one
    again.report.write_csv()
    table = _table(again)
    assert [r["status"] for r in table].count("interrupted") == 1 and [r["status"] for r in table].count("finished") == 4
    row = next(r for r in table if r["status"] == "interrupted")
    # Optuna dates its end to the resume that found it, so a duration would count the downtime: none is shown
    assert row["duration_s"] == "" and "worker vanished" in row["reason"]
    assert all(r["duration_s"] != "" for r in table if r["status"] == "finished")


def test_an_interrupted_trial_with_a_checkpoint_is_continued_in_its_own_directory(tmp_path):
    study = _study(tmp_path)
    first, params = study.ask()
    run_dir = study.trial_dir(first.number)
    _record(run_dir, "interrupted", reason="interrupted by SIGTERM")
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"")  # only its presence is read here
    study.tell(first, Outcome.from_run(run_dir, study.settings))
    second, _ = study.ask()
    _record(study.trial_dir(second.number), "interrupted")  # stopped before its first checkpoint
    study.tell(second, Outcome.from_run(study.trial_dir(second.number), study.settings))

    again = _study(tmp_path)
    asked = []
    while (got := again.ask()) is not None:
        asked.append(got)
        again.tell(got[0], Outcome("finished", 0.5, run_dir=str(again.run_dir(got[0]))))
    retries = {t.user_attrs["retry_of"]: t for t, _ in asked if "retry_of" in t.user_attrs}
    assert again.run_subdir(retries[first.number]) == str(first.number) and asked[-2][1] == params
    assert again.run_subdir(retries[second.number]) == str(retries[second.number].number)  # starts afresh
    again.report.write_csv()
    rows = {r["trial"]: r for r in _table(again)}
    assert rows[str(retries[first.number].number)]["run_dir"] == str(run_dir)


def test_a_failed_trial_with_no_status_runs_again_on_resume_and_is_called_interrupted(tmp_path):
    from optuna.trial import TrialState

    study = _study(tmp_path)
    lost = study.study.ask()  # popped and its axes suggested, then its worker died before recording a status
    params = {axis.key: axis.suggest(lost) for axis in study.space.axes}
    study.study.tell(lost, state=TrialState.FAIL)
    study.report.write_csv()
    assert [r["status"] for r in _table(study)] == ["interrupted", "waiting", "waiting", "waiting"]
    again = _study(tmp_path)
    assert "1 to run again" in again.report.start_line()
    asked = []
    while (got := again.ask()) is not None:
        asked.append(got[1])
        again.tell(got[0], Outcome("finished", 0.5))
    assert len(asked) == 4 and asked[-1] == params  # the 3 other grid points, then the lost one


def test_retry_failed_runs_the_failed_trials_again_on_resume_and_leaves_pruned_ones(tmp_path):
    study = _study(tmp_path)
    outcomes = ["failed", "pruned", "finished", "failed"]
    failed_params = []
    while (got := study.ask()) is not None:
        trial, params = got
        kind = outcomes[trial.number]
        run_dir = study.trial_dir(trial.number)
        if kind == "pruned":
            study.tell(trial, Outcome("pruned", 0.4, reason="pruned at step 5"))
            continue
        _record(run_dir, kind, reason="MissingConfigException: a config the sweep's code did not know" if kind == "failed" else "")
        study.tell(trial, Outcome.from_run(run_dir, study.settings))
        if kind == "failed":
            failed_params.append(params)
    assert _study(tmp_path).ask() is None  # a plain resume skips failed trials
    again = _study(tmp_path, retry_failed=True)
    assert "2 to run again" in again.report.start_line()
    asked = []
    while (got := again.ask()) is not None:
        asked.append(got[1])
        _record(again.trial_dir(got[0].number), "finished")
        again.tell(got[0], Outcome.from_run(again.trial_dir(got[0].number), again.settings))
    assert sorted(map(tuple, (p.values() for p in asked))) == sorted(map(tuple, (p.values() for p in failed_params)))
    counts = again.report.counts()
    assert counts["finished"] == 3 and counts["pruned"] == 1 and counts["failed"] == 2  # the failed ones stay in the record
    assert _study(tmp_path, retry_failed=True).ask() is None  # each failed trial is retried once per failure
