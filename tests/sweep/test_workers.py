"""`agentcollapse sweep` / `make sweep`: the worker command, the thread split and bad input."""

from __future__ import annotations

from pathlib import Path

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
        pid = -1  # no such process: the launcher's nice hand-over finds no /proc entry and skips

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


def test_each_worker_gets_its_own_gpu_and_vllm_runs_sharing_one_are_named(tmp_path, monkeypatch, capsys):
    # one worker per GPU (issue 39: make sweep's JOBS=2 put two 3B runs, each with a vLLM engine, on one card)
    import io
    import subprocess

    from agentcollapse.sweep import workers

    (tmp_path / "grid.yaml").write_text("defaults: [config]\n")
    envs = []

    class FakeProc:
        pid = -1  # no such process: the launcher's nice hand-over finds no /proc entry and skips

        def __init__(self, cmd, env, **kwargs):
            envs.append(env)
            self.stdout = io.StringIO("")

        def wait(self):
            return 0

        def poll(self):
            return 0

    monkeypatch.setattr(subprocess, "Popen", FakeProc)
    monkeypatch.setattr(workers, "_build_base_model", lambda overrides: None)
    monkeypatch.setattr(workers, "visible_gpus", lambda: ["2", "5"])
    assert run_workers("grid", [], jobs=2, sweep_dir=str(tmp_path / "s"), config_dir=str(tmp_path), cores=8) == 0
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["2", "5"]

    sweeps = str(Path(__file__).resolve().parents[2] / "sweeps")
    line = workers.gpu_sharing_warning("paper_scale_filter_vs_none", ["env=sokoban", "seed=0,1"], jobs=2, gpus=["0"], config_dir=sweeps)
    assert line and "\n" not in line and "JOBS=2 workers on 1 visible GPU" in line and "vLLM engine" in line and "use JOBS=1" in line
    assert workers.gpu_sharing_warning("paper_scale_filter_vs_none", [], jobs=1, gpus=["0"], config_dir=sweeps) is None
    assert workers.gpu_sharing_warning("paper_scale_filter_vs_none", [], jobs=2, gpus=["0", "1"], config_dir=sweeps) is None
    assert workers.gpu_sharing_warning("grid", [], jobs=2, gpus=["0"], config_dir=sweeps) is None  # the hf engine reserves nothing


def test_a_worker_in_its_own_session_keeps_the_sweeps_nice_against_other_sessions():
    """`nice -n 19 make sweep` must lower the trials against a terminal's work: a worker's new session gets
    a scheduler group of its own, which starts at nice 0 unless the launcher passes its nice on. Where the
    process is in no autogroup (the file reads empty: autogroup off, or a container's cgroup, as in CI) the
    call must be harmless: it returns and the child keeps the launcher's nice. Where the new session does get a
    group (here, and in CI even though CI's own process reads empty), that group must be raised to the launcher's nice."""
    import subprocess
    import sys

    launcher = (
        "import os, subprocess, sys\n"
        "from agentcollapse.sweep.workers import keep_nice_in_new_session\n"
        "group = lambda pid: (open(f'/proc/{pid}/autogroup').read().split() or ['-'])[-1]\n"
        "os.nice(7)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], start_new_session=True)\n"
        "try:\n"
        "    before = group(child.pid)\n"
        "    keep_nice_in_new_session(child.pid)\n"
        "    print(before, group(child.pid), group('self'), os.getpriority(os.PRIO_PROCESS, child.pid))\n"
        "finally:\n"
        "    child.kill()\n"
    )
    our_group_nice = (Path("/proc/self/autogroup").read_text().split() or ["-"])[-1]
    out = subprocess.run([sys.executable, "-c", launcher], capture_output=True, text=True, check=True).stdout.split()
    before, after, ours, child_nice = out
    assert child_nice == "7"  # the process's own nice is inherited either way
    assert ours == our_group_nice  # the launcher's own group (the test's session) is left alone
    # CI's container reads empty for its own group yet gives the new session an autogroup, so branch on the child's
    if before == "-":  # the new session has no autogroup: nothing to raise, and the write changed nothing
        assert after == "-"
    else:
        assert (before, after) == ("0", "7")  # the new session's group, raised to the launcher's nice
