"""Every environment goes through the whole pipeline: warm start, rollouts, diagnostics, update, record."""

from pathlib import Path

import pytest

from agentcollapse.run import train as run_training


@pytest.mark.slow
@pytest.mark.parametrize("env", ["frozenlake", "sokoban", "countdown", "math"])
def test_one_iteration_on_every_env(make_cfg, env):
    cfg = make_cfg(f"env={env}", "trainer.max_steps=1", "trainer.val_every=1", "trainer.val_episodes=4")
    summary = run_training(cfg)
    assert summary["status"] == "finished", summary.get("reason")
    assert summary["last_step"] == 1
    for key in ("rollout/success_rate", "val/success_rate", "perf/step_time_s", "collapse/valid_thinking_rate"):
        assert key in summary["final"], key
    config = (Path(cfg.run_dir) / "config.yaml").read_text()
    assert f"name: {env}" in config
