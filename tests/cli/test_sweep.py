"""The main job end to end: `agentcollapse train -m` with our Optuna sweeper (study.db, trials.csv, a
crashed trial recorded, resume), real wandb in offline mode; and multirun + DDP/FSDP refused up front."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from agentcollapse.analysis.runs import metric_summaries
from tests.conftest import TINY_OVERRIDES

ROOT = Path(__file__).resolve().parents[2]
TINY_MODEL = [o for o in TINY_OVERRIDES if o.startswith("model.")]


def _env():
    return {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}


def sweep_cmd(sweep_dir, cache_dir, *extra, name="smoke"):
    return [
        sys.executable,
        "-m",
        "agentcollapse.cli.main",
        "train",
        "-m",
        "--config-dir",
        "sweeps",
        "--config-name",
        name,
        *TINY_MODEL,
        f"cache_dir={cache_dir}",
        "trainer.num_threads=1",
        f"hydra.sweep.dir={sweep_dir}",
        *extra,
    ]


def trials(sweep_dir):
    return list(csv.DictReader((Path(sweep_dir) / "trials.csv").open()))


@pytest.mark.slow
def test_sweep_records_every_trial_a_crash_included_and_resumes(cache_dir, tmp_path):
    sweep_dir = tmp_path / "sweep"
    # kl_coef=-1 fails validation inside its trial: recorded as failed, and the sweep goes on
    cmd = sweep_cmd(sweep_dir, cache_dir, "algorithm.kl_coef=0.01,-1.0,0.0", "logger=wandb", "logger.wandb.enabled=true")
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (sweep_dir / "study.db").exists() and (sweep_dir / "multirun.yaml").exists()
    rows = trials(sweep_dir)
    assert [(r["trial"], r["algorithm.kl_coef"], r["status"]) for r in rows] == [
        ("0", "0.01", "finished"),
        ("1", "-1.0", "failed"),
        ("2", "0.0", "finished"),
    ]
    assert "algorithm.kl_coef=-1.0 must be a finite number >= 0" in rows[1]["reason"]
    assert "trial 1 failed" in proc.stderr and "3/3 done (2 finished, 1 failed, 0 pruned)" in proc.stderr
    for row in (rows[0], rows[2]):
        run_dir = Path(row["run_dir"])
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "finished" and row["value"] != ""
        assert float(row["value"]) == metric_summaries(run_dir, "val/success_rate")["final"]  # the tables' final success
        assert list(run_dir.glob("wandb/offline-run-*")), "wandb offline run missing"
        assert yaml.safe_load((run_dir / "config.yaml").read_text())["algorithm"]["kl_coef"] == float(row["algorithm.kl_coef"])

    # Trials 0 and 2 differ only in what trains: trial 2 reads trial 0's step-0 evaluation back.
    first, third = (pd.read_csv(Path(row["run_dir"]) / "metrics.csv").iloc[0] for row in (rows[0], rows[2]))
    assert (first["step"], first["perf/val_shared"], third["step"], third["perf/val_shared"]) == (0, 0.0, 0, 1.0)
    assert first["val/success_rate"] == third["val/success_rate"] and third["perf/val_time_s"] == 0.0
    assert len(list((sweep_dir / "shared_eval").glob("*.json"))) == 1

    again = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed: 3 done, 0 to run again" in again.stderr and "Launching" not in again.stderr
    assert len(trials(sweep_dir)) == 3


def test_multirun_with_ddp_or_fsdp_is_refused_before_anything_runs(tmp_path, capsys):
    from agentcollapse.cli.main import main

    # on the command line: refused before Hydra starts (in this process; a subprocess costs ~12 s of imports)
    for override in ("trainer=ddp", "trainer.strategy=fsdp"):
        with pytest.raises(SystemExit) as exit_:
            main(sweep_cmd(tmp_path / "s", tmp_path / "c", override)[3:])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and "every rank would run the whole sweep" in err and "Traceback" not in err, err
        assert not (tmp_path / "s").exists()
    # only in the composed trial config: the sweeper refuses it, through the real process
    proc = subprocess.run(
        sweep_cmd(tmp_path / "s", tmp_path / "c", "trainer.devices=2"), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "every rank would run the whole sweep" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "s").exists()


def test_a_storage_password_on_the_command_line_is_refused_before_anything_is_written(tmp_path):
    url = "postgresql+psycopg://sweeper:pw-on-the-line@127.0.0.1:1/study"
    proc = subprocess.run(
        sweep_cmd(tmp_path / "s", tmp_path / "c", f"hydra.sweeper.storage={url}"), cwd=ROOT, env=_env(), capture_output=True, text=True
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "holds a password" in proc.stderr and "PGPASSWORD or ~/.pgpass" in proc.stderr and "AGENTCOLLAPSE_STORAGE" in proc.stderr
    assert "pw-on-the-line" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_an_interrupted_sweep_resumes_and_runs_the_interrupted_trial_again(cache_dir, tmp_path):
    import signal
    import time

    sweep_dir = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "agentcollapse.cli.main", "sweep", "--name", "smoke", "--dir", str(sweep_dir)]
    # 12 iterations: trial 0 trains for seconds after its first checkpoint, time for the signal to land in it
    cmd += [*TINY_MODEL, f"cache_dir={cache_dir}", "trainer.num_threads=1", "trainer.max_steps=12", "trainer.val_every=6"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    deadline = time.time() + 300
    while not (sweep_dir / "0" / "checkpoints" / "last.ckpt").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)  # trial 0 is training, and has written its first checkpoint
    running = proc.poll() is None
    proc.send_signal(signal.SIGINT)  # what Ctrl+C does: `agentcollapse sweep` passes it on to its worker
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, f"still running when signalled: {running}\n{err[-3000:]}"
    assert [(r["trial"], r["status"]) for r in trials(sweep_dir)] == [("0", "interrupted"), ("1", "waiting")]
    assert json.loads((sweep_dir / "0" / "summary.json").read_text())["status"] == "interrupted"
    assert "resume with the same command" in err

    changed = subprocess.run([*cmd, "trainer.max_steps=5"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert changed.returncode == 2 and "was run with other overrides" in changed.stderr, changed.stderr[-2000:]

    again = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed: 0 done, 1 to run again" in again.stderr
    rows = trials(sweep_dir)
    assert [(r["trial"], r["status"], r["retry_of"]) for r in rows] == [
        ("0", "interrupted", ""),
        ("1", "finished", ""),
        ("2", "finished", "0"),
    ]
    assert rows[2]["algorithm.kl_coef"] == rows[0]["algorithm.kl_coef"]
    # the retry continued trial 0's run from its checkpoint, in its directory, rather than starting over
    assert f"trial 2 starts: algorithm.kl_coef={rows[0]['algorithm.kl_coef']}, continuing" in again.stderr
    assert Path(rows[2]["run_dir"]) == sweep_dir / "0" and not (sweep_dir / "2").exists()
    steps = pd.read_csv(sweep_dir / "0" / "metrics.csv")["step"].tolist()
    assert steps == sorted(set(steps)) and steps[-1] == 12, steps  # no iteration twice, none missing at the end
    assert json.loads((sweep_dir / "0" / "summary.json").read_text())["status"] == "finished"
