"""A real pretrained model through the CLI as a user runs it: `agentcollapse train model=smollm2-135m`,
warm-started (a short one here), diagnostics every step and a filter on, interrupted and resumed.

That the resumed run equals an uninterrupted one is tested on the tiny policy (tests/cli/test_train_cli.py)
and under FSDP (tests/cli/test_distributed_cli.py): the checkpoint code is the same for every model, and an
uninterrupted SmolLM2 reference beside it doubled this test's ~100 s."""

from __future__ import annotations

import signal

import pandas as pd
import pytest

from tests.cli.test_train_cli import metrics, run, start_and_wait, summary

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
def test_smollm2_trains_two_iterations_and_resumes(tmp_path, cache_dir):
    split = tmp_path / "split" / "run"
    split.parent.mkdir()
    # interrupted during iteration 2 (SIGTERM after iteration 1's checkpoint), then resumed
    proc = start_and_wait(split, cache_dir, 1, *SMOLLM2_OVERRIDES, "trainer.max_steps=2", "trainer.num_threads=2", timeout=600)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    assert summary(split)["status"] == "interrupted", summary(split)
    first = metrics(split)
    assert first["step"].tolist() == [1]

    run(split, cache_dir, *SMOLLM2_OVERRIDES, "trainer.max_steps=2", "trainer.num_threads=2", "resume=true", timeout=600)
    s = summary(split)
    assert s["status"] == "finished" and s["iteration"] == 2, s
    df = metrics(split)
    assert df["step"].tolist() == [1, 2]
    pd.testing.assert_frame_equal(df.iloc[:1], first, check_exact=True)  # the record up to the checkpoint is kept as it was
    # one training sequence per kept trajectory: contexts keep the sampled tokens (no re-tokenising)
    assert (df["actor/num_sequences"] == df["filter/kept_count"] * 2).all()
    assert (df["actor/optimizer_steps"] == 1).all()
    for key in ("collapse/valid_thinking_rate", "rollout/format_valid_rate", "rollout/zero_variance_group_frac"):
        assert key in df.columns and df[key].notna().all(), key
