"""A real pretrained model through the CLI as a user runs it: `agentcollapse train model=smollm2-135m`,
warm-started (a short one here), diagnostics every step and a filter on, then an exact resume."""

from __future__ import annotations

import signal
import subprocess

import pandas as pd
import pytest

from tests.cli.test_train_cli import RUN_OVERRIDES, cli_env, metrics, run, start_and_wait, summary, train_cmd

# starts processes of its own on both cores: make test runs it after the 2-worker pass, alone
pytestmark = [pytest.mark.alone, pytest.mark.xdist_group("processes")]

SMOLLM2_OVERRIDES = [
    "model=smollm2-135m",
    "model.warm_start.episodes=4",
    "model.warm_start.steps=1",
    "rollout.num_prompts=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=16",
    "env.kwargs.max_turns=2",
    # A 2-step warm start rarely writes the format, so rewards seldom vary and the RV filter would skip
    # every update (an all-zero RV batch has no task gradient); the entropy filter always keeps a group.
    "filter=entropy",
    "diagnostics.compute_freq=1",
    "trainer.val_every=0",
    "trainer.checkpoint_every=1",
    "seed=1",
]


@pytest.mark.slow
def test_smollm2_trains_two_iterations_and_resumes_exactly(tmp_path, cache_dir):
    from agentcollapse.config.compose import compose
    from agentcollapse.models.policy import resolve_model_dir

    # Build the warm start once here: the two runs below start together (one thread each on the two
    # cores) and would otherwise both build it.
    cfg = compose([*RUN_OVERRIDES, *SMOLLM2_OVERRIDES, f"cache_dir={cache_dir}"])
    resolve_model_dir(cfg.model, cfg.env, cfg.cache_dir)
    whole, split = tmp_path / "whole" / "run", tmp_path / "split" / "run"
    whole.parent.mkdir()
    split.parent.mkdir()
    with (whole.parent / "output.txt").open("w") as out:  # a file: a pipe nobody reads could fill up and stall it
        uninterrupted = subprocess.Popen(
            train_cmd(whole, cache_dir, *SMOLLM2_OVERRIDES, "trainer.max_steps=2"), cwd=whole.parent, env=cli_env(), stdout=out, stderr=out
        )
    # the other run is interrupted during iteration 2 (SIGTERM after iteration 1's checkpoint), then resumed
    proc = start_and_wait(split, cache_dir, 1, *SMOLLM2_OVERRIDES, "trainer.max_steps=2")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    assert summary(split)["status"] == "interrupted", summary(split)
    uninterrupted.wait(timeout=600)
    assert uninterrupted.returncode == 0, (whole.parent / "output.txt").read_text()[-3000:]
    s = summary(whole)
    assert s["status"] == "finished" and s["iteration"] == 2, s
    reference = metrics(whole)
    assert reference["step"].tolist() == [1, 2]
    # one training sequence per kept trajectory: contexts keep the sampled tokens (no re-tokenising)
    assert (reference["actor/num_sequences"] == reference["filter/kept_count"] * 2).all()
    assert (reference["actor/optimizer_steps"] == 1).all()
    for key in ("collapse/valid_thinking_rate", "rollout/format_valid_rate", "rollout/zero_variance_group_frac"):
        assert key in reference.columns, key

    run(split, cache_dir, *SMOLLM2_OVERRIDES, "trainer.max_steps=2", "resume=true")
    assert summary(split)["status"] == "finished"
    pd.testing.assert_frame_equal(metrics(split), reference, check_exact=True)
