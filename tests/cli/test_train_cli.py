"""End-to-end reliability of ``agentcollapse train``: determinism, exact resume after SIGKILL or SIGTERM,
and a truthful summary.json on every way out.

Metric comparisons ignore the ``perf/*`` columns: they are wall-clock timings (step, rollout, update,
validation time, tokens per second) and differ between any two runs. Every other column must match
exactly, float for float.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from agentcollapse.config.compose import compose
from agentcollapse.models.policy import resolve_model_dir
from agentcollapse.run import allocator, cpu
from tests.conftest import TINY_OVERRIDES

# Four iterations, a checkpoint after each, validation at 0, 2 and 4, the MI proxy at 1, 2 and 4 (so a
# resumed run must restore the diagnostics' EMA and sampler state too).
RUN_OVERRIDES = [
    *TINY_OVERRIDES,
    "trainer.max_steps=4",
    "trainer.checkpoint_every=1",
    "trainer.val_every=2",
    "trainer.val_episodes=4",
    "trainer.num_threads=1",
    "diagnostics.compute_freq=2",
    "seed=3",
]


def agentcollapse() -> list[str]:
    script = Path(sys.executable).with_name("agentcollapse")
    return [str(script)] if script.exists() else [sys.executable, "-m", "agentcollapse.cli.main"]


def train_cmd(run_dir: Path, cache_dir: str, *extra: str) -> list[str]:
    return [*agentcollapse(), "train", *RUN_OVERRIDES, f"cache_dir={cache_dir}", f"run_dir={run_dir}", *extra]


def cli_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}


def run(run_dir: Path, cache_dir: str, *extra: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        train_cmd(run_dir, cache_dir, *extra),
        cwd=run_dir.parent,
        env={**cli_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def metrics(run_dir: Path) -> pd.DataFrame:
    """metrics.csv without the wall-clock perf/* columns."""
    df = pd.read_csv(run_dir / "metrics.csv")
    return df[[c for c in df.columns if not c.startswith("perf/")]].reset_index(drop=True)


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def steps_logged(run_dir: Path) -> int:
    try:
        lines = (run_dir / "metrics.csv").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum(1 for line in lines[1:] if line and not line.startswith("0,"))  # training steps, not the step-0 validation


def start_and_wait(run_dir: Path, cache_dir: str, min_steps: int, *extra: str, timeout: float = 240) -> subprocess.Popen:
    """Start a run and return once it has logged ``min_steps`` training steps and written a checkpoint.

    Its stdout and stderr go to files next to the run dir (a pipe nobody reads could fill up and stall it).
    """
    out = (run_dir.parent / "stdout.txt").open("w")
    err = (run_dir.parent / "stderr.txt").open("w")
    proc = subprocess.Popen(train_cmd(run_dir, cache_dir, *extra), cwd=run_dir.parent, env=cli_env(), stdout=out, stderr=err)
    out.close()
    err.close()
    deadline = time.monotonic() + timeout
    while not ((run_dir / "checkpoints" / "last.ckpt").exists() and steps_logged(run_dir) >= min_steps):
        if proc.poll() is not None:
            pytest.fail(f"the run ended (rc={proc.returncode}) before it could be interrupted:\n{output(run_dir)[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail("the run logged no steps in time")
        time.sleep(0.05)
    return proc


def output(run_dir: Path) -> str:
    return (run_dir.parent / "stdout.txt").read_text() + (run_dir.parent / "stderr.txt").read_text()


def shared_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.getbasetemp() / "shared-step0"


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache_dir) -> pd.DataFrame:
    """One uninterrupted run: the numbers every other run of the same config and seed must reproduce.
    It also stores its step-0 evaluation in a shared directory, which a later test reads back."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    run(run_dir, cache_dir, f"trainer.shared_eval_dir={shared_dir(tmp_path_factory)}")
    s = summary(run_dir)
    assert s["status"] == "finished" and s["iteration"] == 4, s
    # the record names the weights the run started from: the cached tiny model's, as its build recorded them
    cfg = compose([*RUN_OVERRIDES, f"cache_dir={cache_dir}"])
    built = json.loads((resolve_model_dir(cfg.model, cfg.env, cache_dir) / "meta.json").read_text())["weights_sha256"]
    assert s["policy_weights_sha256"] == built
    # the command started again under tcmalloc where the machine has it (.ci/run installs it)
    assert s["allocator"] == ("tcmalloc" if allocator.tcmalloc_library() else "system")
    assert s["cpu"] == cpu.cpu_summary(cpu.cpu_flags()) and s["cpu"] != "unknown"  # and the CPU whose kernels it ran
    assert (run_dir / ".hydra").is_dir()  # Hydra's own files go into the run dir ...
    assert not (run_dir.parent / "runs").exists()  # ... not into a stray runs/<env>/<algo>/<time> dir
    df = metrics(run_dir)
    assert df["step"].tolist() == [0, 1, 2, 3, 4]
    return df


@pytest.mark.slow
def test_a_shared_step0_evaluation_is_read_back_and_changes_nothing_after_it(tmp_path, tmp_path_factory, cache_dir, reference):
    shared = shared_dir(tmp_path_factory)
    assert len(list(shared.glob("*.json"))) == 1  # the reference run computed and stored it
    run_dir = tmp_path / "run"
    run(run_dir, cache_dir, f"trainer.shared_eval_dir={shared}", env={allocator.OPT_OUT: "system"})
    assert pd.read_csv(run_dir / "metrics.csv").loc[0, "perf/val_shared"] == 1.0
    # Skipping the evaluation leaves every later number as it was: it draws from no global generator.
    # Nor does the allocator change one: this run kept the system's (the reference ran under tcmalloc).
    assert summary(run_dir)["allocator"] == "system"
    pd.testing.assert_frame_equal(metrics(run_dir), reference, check_exact=True)


@pytest.mark.slow
def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path, cache_dir, reference, capsys):
    run_dir = tmp_path / "run"
    proc = start_and_wait(run_dir, cache_dir, min_steps=2)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    # Determinism: a second process with the same config and seed logged the same numbers so far.
    before = metrics(run_dir)
    pd.testing.assert_frame_equal(before, reference.iloc[: len(before)], check_exact=True)
    assert summary(run_dir)["status"] == "running"  # SIGKILL cannot be caught; resume still works

    # The same config without resume=true must not touch the killed run (the entry point in this process:
    # it stops before any run starts).
    from agentcollapse.cli.main import main

    with pytest.raises(SystemExit) as refused:
        main(train_cmd(run_dir, cache_dir)[len(agentcollapse()) :])
    assert refused.value.code == 2 and "already holds a run" in capsys.readouterr().err

    run(run_dir, cache_dir, "resume=true")
    s = summary(run_dir)
    assert s["status"] == "finished" and s["iteration"] == 4, s
    pd.testing.assert_frame_equal(metrics(run_dir), reference, check_exact=True)


@pytest.mark.slow
def test_sigterm_is_recorded_as_interrupted_and_resumes_exactly(tmp_path, cache_dir, reference):
    run_dir = tmp_path / "run"
    proc = start_and_wait(run_dir, cache_dir, min_steps=1)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    err = (tmp_path / "stderr.txt").read_text()
    assert proc.returncode == 128 + signal.SIGTERM, output(run_dir)[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert "interrupted by SIGTERM" in err
    s = summary(run_dir)
    assert s["status"] == "interrupted", s
    assert "interrupted by SIGTERM" in s["reason"] and f"resume=true run_dir={run_dir}" in s["reason"], s["reason"]

    run(run_dir, cache_dir, "resume=true")
    assert summary(run_dir)["status"] == "finished"
    pd.testing.assert_frame_equal(metrics(run_dir), reference, check_exact=True)


# -- in-process: every way out of run.train leaves a truthful summary -------------------------------


def test_a_failing_run_records_failed_with_the_reason(make_cfg, monkeypatch, tmp_path):
    from agentcollapse import run

    def broken(*args, **kwargs):
        raise RuntimeError("boom in build")

    monkeypatch.setattr(run.trainer, "build_trainer", broken)
    cfg = make_cfg("trainer.num_threads=1")
    with pytest.raises(RuntimeError, match="boom in build"):
        run.train(cfg)
    s = summary(Path(cfg.run_dir))
    assert s["status"] == "failed" and s["reason"] == "RuntimeError: boom in build"
    assert "boom in build" in s["traceback"]


def test_a_signal_during_the_run_records_interrupted(make_cfg, monkeypatch):
    from agentcollapse import run

    def killed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises Interrupted before this returns
        raise AssertionError("SIGTERM was not turned into Interrupted")

    monkeypatch.setattr(run.trainer, "build_trainer", killed)
    cfg = make_cfg("trainer.num_threads=1")
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(run.Interrupted) as info:
        run.train(cfg)
    assert info.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is previous  # handlers restored
    s = summary(Path(cfg.run_dir))
    assert s["status"] == "interrupted"
    assert "interrupted by SIGTERM" in s["reason"] and "no checkpoint was written yet" in s["reason"]


def test_a_signal_whose_exception_is_swallowed_still_stops_the_run_at_the_iteration_end(make_cfg, monkeypatch):
    """Raised inside a finalizer (``__del__``, a weakref callback) an exception is swallowed: the signal
    is noted too, so a Ctrl+C is never lost and the sweep it belongs to stops."""
    import lightning as L
    from agentcollapse import run

    build = run.trainer.build_trainer
    swallowed = []

    class SwallowsASignal(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, *args):
            if pl_module.iteration == 2:
                try:
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(5)  # the handler raises before this returns
                except BaseException as exc:  # what a finalizer does with it
                    swallowed.append(exc)

    def with_the_callback(*args, **kwargs):
        module, trainer = build(*args, **kwargs)
        trainer.callbacks.append(SwallowsASignal())
        return module, trainer

    monkeypatch.setattr(run.trainer, "build_trainer", with_the_callback)
    cfg = make_cfg("trainer.num_threads=1", "trainer.max_steps=6", "trainer.val_every=0", "trainer.checkpoint_every=1")
    with pytest.raises(run.Interrupted) as info:
        run.train(cfg)
    assert [type(exc) for exc in swallowed] == [run.Interrupted] and info.value.signum == signal.SIGINT
    s = summary(Path(cfg.run_dir))
    assert s["status"] == "interrupted" and s["iteration"] == 3, s  # the iteration after the signal was its last
    assert "interrupted by SIGINT after 3 iteration(s)" in s["reason"] and "resume from iteration 3" in s["reason"], s["reason"]
