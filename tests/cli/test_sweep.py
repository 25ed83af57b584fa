"""The main job end to end: `agentcollapse train -m` with the sweep grid, real wandb in offline mode."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import TINY_OVERRIDES


@pytest.mark.slow
def test_sweep_grid_writes_one_finished_record_per_trial(cache_dir, tmp_path):
    sweep_dir = tmp_path / "sweep"
    overrides = [o for o in TINY_OVERRIDES if not o.startswith(("trainer=", "logger="))]
    cmd = [
        sys.executable,
        "-m",
        "agentcollapse.cli.main",
        "train",
        "-m",
        "--config-dir",
        "sweeps",
        "--config-name",
        "grid",
        "env=frozenlake",
        *overrides,
        f"cache_dir={cache_dir}",
        "trainer.max_steps=1",
        "trainer.val_episodes=2",
        "rollout.num_prompts=2",
        "rollout.group_size=2",
        "algorithm.entropy_coef=0.0",
        "filter.value=0.9",  # pin two axes: 2 trials
        f"hydra.sweep.dir={sweep_dir}",
    ]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summaries = sorted(sweep_dir.glob("*/summary.json"))
    assert len(summaries) == 2
    for path in summaries:
        summary = json.loads(path.read_text())
        assert summary["status"] == "finished", summary["reason"]
        assert (path.parent / "metrics.csv").exists() and (path.parent / "config.yaml").exists()
        assert list(path.parent.glob("wandb/offline-run-*")), "wandb offline run missing"
    kl = {yaml.safe_load((p.parent / "config.yaml").read_text())["algorithm"]["kl_coef"] for p in summaries}
    assert kl == {0.0, 0.01}  # the grid really varied kl_coef across trials
