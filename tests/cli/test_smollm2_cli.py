"""A real pretrained model through the CLI as a user runs it: `agentcollapse train model=smollm2-135m
rollout.engine=vllm`, warm-started (a short one here), diagnostics every step and a filter on, twice with
one seed: the same metrics.csv.

Exact resume is tested on the tiny policy (tests/cli/test_train_cli.py) and under FSDP
(tests/cli/test_distributed_cli.py): the checkpoint code is the same for every model and engine. (This
test interrupted and resumed one of its SmolLM2 runs, equal to the other, when the engine was built; that
cost 3 minutes of the suite against 1.5.)"""

from __future__ import annotations

import subprocess

import pandas as pd
import pytest

from tests.cli.test_train_cli import cli_env, metrics, summary, train_cmd

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


@pytest.mark.slow
def test_smollm2_with_vllm_repeats_its_run_exactly(tmp_path, cache_dir):
    common = (*SMOLLM2_OVERRIDES, "trainer.max_steps=2", "trainer.num_threads=1")
    runs = [tmp_path / name / "run" for name in ("a", "b")]
    # Both at once, one thread each: their start-ups (imports, loading, the engine) overlap.
    procs = []
    for run_dir in runs:
        run_dir.parent.mkdir()
        with (run_dir.parent / "stderr.txt").open("w") as err:
            procs.append(
                subprocess.Popen(
                    train_cmd(run_dir, cache_dir, *common), cwd=run_dir.parent, env=cli_env(), stdout=subprocess.DEVNULL, stderr=err
                )
            )
    for run_dir, proc in zip(runs, procs):
        assert proc.wait(timeout=600) == 0, (run_dir.parent / "stderr.txt").read_text()[-3000:]
        assert summary(run_dir)["status"] == "finished" and summary(run_dir)["iteration"] == 2, summary(run_dir)
    df = metrics(runs[0])
    assert df["step"].tolist() == [1, 2]
    pd.testing.assert_frame_equal(df, metrics(runs[1]), check_exact=True)  # same seed, same run
    # the engine's log-probs stay by the trainer's: bf16 engine vs fp32 trainer, weights synced each step
    assert (df["rollout/engine_logp_abs_diff"] < 0.1).all(), df["rollout/engine_logp_abs_diff"].tolist()
    # one training sequence per kept trajectory: contexts keep the sampled tokens (no re-tokenising)
    assert (df["actor/num_sequences"] == df["filter/kept_count"] * 2).all()
    assert (df["actor/optimizer_steps"] == 1).all()
    for key in ("collapse/valid_thinking_rate", "rollout/format_valid_rate", "rollout/zero_variance_group_frac"):
        assert key in df.columns and df[key].notna().all(), key
