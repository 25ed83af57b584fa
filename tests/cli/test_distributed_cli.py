"""``agentcollapse train trainer=ddp|fsdp trainer.devices=2`` as a user runs it, on CPU (gloo): one run
record, the single-process run's numbers, no hang when a rank has nothing to train, and FSDP's sharded
checkpoint resumed exactly, by FSDP or (exported to one file) by one process.

Each 2-process run costs ~30 s on a busy 2-core machine, mostly the two ranks starting up.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest

from tests.cli.test_train_cli import RUN_OVERRIDES, agentcollapse, cli_env, metrics, start_and_wait, summary

# starts processes of its own on both cores: make test runs it after the 2-worker pass, alone
pytestmark = [pytest.mark.alone, pytest.mark.xdist_group("processes"), pytest.mark.slow]

# Four iterations (RUN_OVERRIDES), a checkpoint after each, and the MI proxy at every step; trainer=ddp|fsdp
# replaces the smoke trainer preset, so what it set beyond RUN_OVERRIDES is spelled out. Micro-batches of 4
# of the 12 sequences: 3 of them, so one rank runs two and the other one and a padding micro-batch.
OVERRIDES = [
    *RUN_OVERRIDES,
    "trainer.val_temperatures=[0.5]",
    "trainer.progress_bar=false",
    "diagnostics.compute_freq=1",
    "algorithm.micro_batch_size=4",
]
TWO = {"ddp": ["trainer=ddp", "trainer.devices=2"], "fsdp": ["trainer=fsdp", "trainer.devices=2"]}
RECORD = {".hydra", "checkpoints", "config.yaml", "metrics.csv", "summary.json", "train.log"}


def train(run_dir: Path, cache_dir: str, *extra: str, timeout: float = 240) -> str:
    """Run to the end (a hang fails at ``timeout``); stdout + stderr."""
    return train_together((run_dir, extra), cache_dir=cache_dir, timeout=timeout)[0]


def train_together(*runs: tuple[Path, Sequence[str]], cache_dir: str, timeout: float = 240) -> list[str]:
    """Several runs at once (run dir, extra overrides), each to its end; their stdout + stderr, in order.
    A one-process run (one thread) beside a 2-rank one: the ranks spend much of their time starting up
    and waiting on each other, so the three share the 2 cores at less than the sum of their times."""
    procs = []
    for run_dir, extra in runs:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        cmd = [*agentcollapse(), "train", *OVERRIDES, f"cache_dir={cache_dir}", f"run_dir={run_dir}", *extra]
        procs.append(subprocess.Popen(cmd, cwd=run_dir.parent, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, out[-4000:]
        outs.append(out)
    return outs


def two_ranks(strategy: str) -> list[str]:
    return TWO[strategy]


def assert_one_record(run_dir: Path, out: str, steps: int = 4) -> None:
    s = summary(run_dir)
    assert s["status"] == "finished" and s["iteration"] == steps, s
    assert {p.name for p in run_dir.iterdir()} == RECORD  # no second rank's files
    assert sorted(p.name for p in run_dir.parent.iterdir() if p.name != run_dir.name) == [], "files outside the run dir"
    assert "rank 0/2 rolls out groups 0..1" in out and "rank 1/2 rolls out groups 2..2" in out  # both ranks ran
    assert metrics(run_dir)["step"].tolist() == list(range(steps + 1))


def assert_step1_equal(one: pd.DataFrame, many: pd.DataFrame) -> None:
    """Step 1 is the same global rollout (maps and tokens), so the same group statistics, filter choice,
    held-out evaluation and first update; the gradient is summed in another order, so its norm agrees to
    float rounding. The MI proxy's contexts are dealt across the ranks (diagnostics.proxy_split), so its pairs
    share forward batches with other pairs than in one process: equal to float rounding (rel 1e-4). Later
    steps follow weights that differ in the last bits: not compared."""
    assert list(one.columns) == list(many.columns)
    first = [c for c in one.columns if c.startswith(("rollout/", "filter/", "collapse", "actor/", "val/")) and c != "actor/grad_norm"]
    assert any(c.startswith("rollout/") for c in first) and "actor/entropy" in first and "actor/pg_loss" in first
    exact = [c for c in first if not c.startswith("collapse_")]
    proxy = [c for c in first if c.startswith("collapse_")]
    assert any(c.endswith("/mi_estimate") for c in proxy)
    pd.testing.assert_frame_equal(one.loc[one.step <= 1, exact], many.loc[many.step <= 1, exact], check_exact=True)
    pd.testing.assert_frame_equal(one.loc[one.step <= 1, proxy], many.loc[many.step <= 1, proxy], check_exact=False, rtol=1e-4, atol=1e-5)
    ones, manys = one.loc[one.step == 1, "actor/grad_norm"].item(), many.loc[many.step == 1, "actor/grad_norm"].item()
    assert ones > 0 and abs(manys - ones) <= 1e-5 * ones, (ones, manys)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache_dir) -> dict[str, Path]:
    """One single-process run and one uninterrupted FSDP run of the same config and seed."""
    base = tmp_path_factory.mktemp("runs")
    out = {"one": base / "one" / "run", "fsdp": base / "fsdp" / "run"}
    _, fsdp = train_together((out["one"], []), (out["fsdp"], two_ranks("fsdp")), cache_dir=cache_dir)
    assert_one_record(out["fsdp"], fsdp)
    return out


def test_fsdp_reproduces_the_single_process_run(runs):
    assert_step1_equal(metrics(runs["one"]), metrics(runs["fsdp"]))
    assert (runs["fsdp"] / "checkpoints" / "last.ckpt").is_dir()  # sharded: a directory of per-rank files
    assert (runs["one"] / "checkpoints" / "last.ckpt").is_file()


def test_ddp_with_a_rank_that_has_nothing_to_train_reproduces_the_single_process_run(tmp_path, cache_dir):
    # One kept group, all in one micro-batch, which goes to rank 0: rank 1 has no sequence to train on,
    # yet must run as many forwards and backwards (a zero-weight padding micro-batch) as rank 0. (The
    # FSDP runs above pad too: 3 micro-batches on 2 ranks.)
    one_group = ["filter=length", "filter.strategy=top_k_abs", "filter.value=1", "algorithm.micro_batch_size=64"]
    one, ddp = tmp_path / "one" / "run", tmp_path / "ddp" / "run"
    _, out = train_together((one, one_group), (ddp, [*two_ranks("ddp"), *one_group]), cache_dir=cache_dir)
    assert_one_record(ddp, out)
    df = metrics(ddp)
    trained = df[df.step >= 1]
    assert (trained["filter/kept_count"] == 1).all() and (trained["actor/num_sequences"] > 0).all()
    assert_step1_equal(metrics(one), df)


# The update's statistics (issue 46) are those of all its tokens, whatever the micro-batching or strategy:
# PPO (a critic, a KL, advantages that vary from iteration 2 on), 2 epochs x 2 mini-batches of 6, and a
# filter that keeps 3 of the 4 groups (ranked by length: the tiny test policy's returns never vary), so
# micro-batches differ in size and ranks run uneven shares of them. No proxy, evaluation or checkpoints.
STATISTICS = [
    "rollout.num_prompts=4",
    "seed=5",
    "trainer.max_steps=2",
    "trainer.val_every=0",
    "trainer.checkpoint_every=0",
    "~callbacks.collapse_diagnostics",
    "algorithm=ppo",
    "algorithm.ppo_epochs=2",
    "algorithm.mini_batch_size=6",
    "filter=rv_top_p",
    "filter.metric=length",
    "filter.value=0.6",
    "filter.include_zero=true",
]


def test_update_statistics_are_the_same_for_any_micro_batch_size_and_strategy(tmp_path, cache_dir):
    setups = {
        "one process, 8 a micro-batch": ["algorithm.micro_batch_size=8"],
        "one process, 2": ["algorithm.micro_batch_size=2"],
        "one process, 1": ["algorithm.micro_batch_size=1"],
        "ddp, 2": [*two_ranks("ddp"), "algorithm.micro_batch_size=2"],
        "fsdp, 4": [*two_ranks("fsdp"), "algorithm.micro_batch_size=4"],
    }
    dirs = {name: tmp_path / str(k) / "run" for k, name in enumerate(setups)}
    names = list(setups)  # two one-process runs at once, then the third beside the DDP ranks, then FSDP's
    for batch in (names[:2], names[2:4], names[4:]):
        train_together(*((dirs[name], [*STATISTICS, *setups[name]]) for name in batch), cache_dir=cache_dir)
    runs = {name: metrics(dirs[name]).set_index("step") for name in setups}
    reference = runs["one process, 8 a micro-batch"]
    stats = [c for c in reference.columns if c.startswith(("actor/", "critic/"))]
    assert {"actor/pg_loss", "actor/entropy", "actor/kl", "actor/approx_kl", "critic/value_loss"} <= set(stats)
    assert (reference["filter/kept_count"] == 3).all() and (reference["actor/optimizer_steps"] == 4).all()
    assert (reference["actor/pg_loss"].loc[2] != 0) and (reference["actor/kl"] > 0).all()
    for name, df in runs.items():
        assert list(df.columns) == list(reference.columns), name
        pd.testing.assert_frame_equal(
            df[["filter/kept_count", "actor/num_sequences"]], reference[["filter/kept_count", "actor/num_sequences"]]
        )
        for step in (1, 2):
            for col in stats:
                got, want = df.loc[step, col], reference.loc[step, col]
                # Iteration 2 trains from weights that the gradient, summed in another order, left different in the
                # last bits, which Adam's normalisation spreads wherever a gradient is near 0. Its pg_loss (whitened
                # advantages, ratio 1 at the first step: -mean(A * (ratio - 1)), ~7e-4) is a small difference of
                # those weights' log-probs: ~3e-5 apart between setups (the old mean of micro-batch means: 0.0084).
                atol = 1e-4 if (step, col) == (2, "actor/pg_loss") else 1e-7
                assert got == pytest.approx(want, rel=1e-5, abs=atol), (name, step, col, got, want)


def test_fsdp_resumes_its_sharded_checkpoint_exactly_and_one_process_resumes_the_export(tmp_path, cache_dir, runs, capsys):
    reference = metrics(runs["fsdp"])
    split = tmp_path / "split" / "run"
    split.parent.mkdir()
    proc = start_and_wait(split, cache_dir, 1, *OVERRIDES[len(RUN_OVERRIDES) :], *two_ranks("fsdp"))
    proc.send_signal(signal.SIGTERM)  # both ranks stop; the run is recorded as interrupted
    proc.wait(timeout=120)
    assert summary(split)["status"] == "interrupted", summary(split)
    assert (split / "checkpoints" / "last.ckpt").is_dir()
    exported = tmp_path / "exported" / "run"
    shutil.copytree(split, exported)

    train(split, cache_dir, *two_ranks("fsdp"), "resume=true")
    assert summary(split)["status"] == "finished"
    pd.testing.assert_frame_equal(metrics(split), reference, check_exact=True)

    # One process cannot read the shards: it says so, and the export makes them one file it resumes
    # (both through the entry point's main, in this process: no run starts here).
    from agentcollapse.cli.main import main

    with pytest.raises(SystemExit) as refused:
        main(["train", *OVERRIDES, f"cache_dir={cache_dir}", f"run_dir={exported}", "resume=true"])
    assert refused.value.code == 2 and "agentcollapse export-checkpoint" in capsys.readouterr().err
    main(["export-checkpoint", str(exported)])
    assert (exported / "checkpoints" / "last.ckpt").is_file() and "wrote" in capsys.readouterr().out
    train(exported, cache_dir, "resume=true")
    # The one-process continuation lands on the FSDP run's numbers: the same tokens, filter choices and
    # evaluations; the gradient sums its micro-batches in another order (3 on one rank against 2 + 1), so
    # every metric computed from the weights' values (gradient norm, KL, policy entropy: 6.99185085 against
    # 6.99185069 in one suite run) may differ in the last bits. Every column agrees to rtol 1e-5: a
    # different token, filter choice or evaluation would move a metric far more than that.
    got = metrics(exported)
    pd.testing.assert_frame_equal(got, reference, check_exact=False, rtol=1e-5)
