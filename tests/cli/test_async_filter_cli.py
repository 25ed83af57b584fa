"""The RV filter under a staleness bound, through the CLI: one process on one thread with the tiny
policy's own vLLM engine, so it runs in the 2-worker pass beside the other engine tests (the async runs
that interrupt and resume, and SmolLM2's, are in tests/cli/test_smollm2_cli.py)."""

from __future__ import annotations

import subprocess

import pytest

from tests.cli.test_smollm2_cli import TINY_ENGINE
from tests.cli.test_train_cli import cli_env, metrics, train_cmd

pytestmark = pytest.mark.xdist_group("vllm")  # with tests/rollout/test_vllm_engine.py: one engine at a time


@pytest.mark.slow
def test_the_filter_under_a_staleness_bound_refills_each_update_with_kept_groups(tmp_path, cache_dir):
    """The tiny policy on its own vLLM engine, rollout.max_staleness=1 and a filter scored on arrival: the
    producer filters each arriving batch whole and draws more until P groups are kept, so every update
    trains on P kept groups (or on what 1 + max_resample_rounds batches kept); the hooks measure each
    iteration's first batch, which a synchronous run would have filtered. The test model's 8-step warm start
    never writes the format, so its rewards never vary and the RV filter would keep nothing (its exact
    selections: tests/lightning/test_filtering_in_module.py); the length filter (top_p 0.5 of the mean
    response lengths) drives the same path with groups that differ."""
    run_dir = tmp_path / "refill" / "run"
    run_dir.parent.mkdir(parents=True)
    args = [
        *TINY_ENGINE,
        "rollout.max_staleness=1",
        "filter=length",
        "filter.value=0.5",  # about half the score mass: some groups dropped, so updates need a second batch
        "rollout.num_prompts=4",
        "trainer.max_steps=3",
        "trainer.val_every=0",
        "trainer.num_threads=1",
    ]
    with (run_dir.parent / "stderr.txt").open("w") as err:
        proc = subprocess.Popen(
            train_cmd(run_dir, cache_dir, *args), cwd=run_dir.parent, env=cli_env(), stdout=subprocess.DEVNULL, stderr=err
        )
    assert proc.wait(timeout=600) == 0, (run_dir.parent / "stderr.txt").read_text()[-3000:]
    df = metrics(run_dir)
    assert df["step"].tolist() == [1, 2, 3] and (df["rollout/staleness_max"] <= 1).all()
    full = df["filter/refill_batches"] < 1 + 3  # algorithm.max_resample_rounds=3
    assert (df.loc[full, "filter/refill_kept_groups"] == 4).all(), df[["filter/refill_batches", "filter/refill_kept_groups"]]
    trained = df["actor/num_sequences"].fillna(0)
    assert (trained == df["filter/refill_kept_groups"] * 4).all()  # one sequence per trajectory of each kept group
    assert (df["filter/kept_count"] < 4).all()  # the first batch's own decision, as a synchronous run logs it
    assert (df["filter/refill_batches"] >= 2).all()  # so each update drew more
    assert "scores groups as they arrive" in (run_dir / "train.log").read_text()
