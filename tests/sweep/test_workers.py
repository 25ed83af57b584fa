"""`agentcollapse sweep` / `make sweep`: the worker command, the thread split and bad input."""

from __future__ import annotations

import pytest

from agentcollapse.errors import UserError
from agentcollapse.sweep.workers import default_sweep_dir, run_workers, worker_command


def test_each_worker_runs_the_sweep_file_on_the_shared_dir_with_its_share_of_threads():
    cmd = worker_command("grid", ["env=sokoban", "seed=0,1"], "multirun/sokoban/grid-x", threads=1)
    assert cmd[3:10] == ["train", "-m", "--config-dir", "sweeps", "--config-name", "grid", "hydra.sweep.dir=multirun/sokoban/grid-x"]
    assert cmd[10:] == ["trainer.num_threads=1", "env=sokoban", "seed=0,1"]
    assert default_sweep_dir("grid", ["env=sokoban"]).startswith("multirun/sokoban/grid-")


def test_unknown_sweep_and_bad_jobs_are_one_line_errors(tmp_path):
    (tmp_path / "grid.yaml").write_text("defaults: [config]\n")
    with pytest.raises(UserError, match="no sweep 'gird' in .*; sweeps: grid"):
        run_workers("gird", [], config_dir=str(tmp_path))
    with pytest.raises(UserError, match="JOBS=0 must be >= 1"):
        run_workers("grid", [], jobs=0, config_dir=str(tmp_path))


def test_an_explicit_thread_count_wins(tmp_path, monkeypatch):
    import subprocess

    (tmp_path / "grid.yaml").write_text("defaults: [config]\n")
    seen = {}

    class FakeProc:
        def __init__(self, cmd, env, **kwargs):
            seen.update(cmd=cmd, env=env)

        def wait(self):
            return 0

        def poll(self):
            return 0

    monkeypatch.setattr(subprocess, "Popen", FakeProc)
    assert run_workers("grid", ["trainer.num_threads=3"], jobs=1, sweep_dir=str(tmp_path / "s"), config_dir=str(tmp_path), cores=8) == 0
    assert seen["env"]["OMP_NUM_THREADS"] == "3" and seen["env"]["AGENTCOLLAPSE_SWEEP_WORKER"] == "w1"
    assert run_workers("grid", [], jobs=1, sweep_dir=str(tmp_path / "s"), config_dir=str(tmp_path), cores=8) == 0
    assert seen["env"]["OMP_NUM_THREADS"] == "8" and "trainer.num_threads=8" in seen["cmd"]
