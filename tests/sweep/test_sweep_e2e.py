"""Sweeps end to end with the tiny model: JOBS=2 workers on a PostgreSQL study, and trials launched
by hydra/launcher=submitit_local (parallel processes) that the collapse pruner stops from inside."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentcollapse.sweep.workers import available_cores
from tests.cli.test_sweep import TINY_MODEL, sweep_cmd

# starts processes of its own on both cores: make test runs it after the 2-worker pass, alone
pytestmark = [pytest.mark.alone, pytest.mark.xdist_group("processes")]

ROOT = Path(__file__).resolve().parents[2]


def _env():
    return {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}


def _rows(sweep_dir):
    return list(csv.DictReader((Path(sweep_dir) / "trials.csv").open()))


@pytest.mark.slow
def test_two_workers_share_a_postgresql_study(cache_dir, tmp_path, postgres_url):
    sweep_dir = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "agentcollapse.cli.main", "sweep", "--name", "smoke", "--jobs", "2", "--dir", str(sweep_dir)]
    cmd += [*TINY_MODEL, f"cache_dir={cache_dir}", f"hydra.sweeper.storage={postgres_url}", "algorithm.kl_coef=0.0,0.01,0.02"]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    threads = max(1, available_cores() // 2)
    assert f"2 worker(s) x {threads} thread(s)" in proc.stderr
    assert "[w1] [sweep w1]" in proc.stderr and "[w2] [sweep w2]" in proc.stderr
    rows = _rows(sweep_dir)
    assert sorted(r["algorithm.kl_coef"] for r in rows) == ["0.0", "0.01", "0.02"]  # each point once
    assert all(r["status"] == "finished" for r in rows) and not (sweep_dir / "study.db").exists()
    for r in rows:
        assert yaml.safe_load((Path(r["run_dir"]) / "config.yaml").read_text())["trainer"]["num_threads"] == threads


@pytest.mark.slow
def test_submitit_local_runs_a_batch_in_parallel_and_the_pruner_stops_trials(cache_dir, tmp_path):
    sweep_dir = tmp_path / "sweep"
    prune_at_once = [  # a "collapse" every trial shows: the plumbing, not the rule (tests/sweep/test_pruning.py)
        "hydra.sweeper.pruner.name=collapse",
        "hydra.sweeper.pruner.metric=rollout/response_length",
        "hydra.sweeper.pruner.threshold=1e9",
        "hydra.sweeper.pruner.patience=1",
        "hydra.sweeper.pruner.median=false",
    ]
    cmd = sweep_cmd(
        sweep_dir, cache_dir, "hydra/launcher=submitit_local", "hydra.sweeper.batch_size=2", "trainer.max_steps=3", *prune_at_once
    )
    proc = subprocess.run(cmd, cwd=ROOT, env={**_env(), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (sweep_dir / ".submitit").is_dir()  # the trials ran as submitit jobs
    rows = _rows(sweep_dir)
    assert [r["status"] for r in rows] == ["pruned", "pruned"]
    assert all(r["pruned_at"] == "1" and r["reason"].startswith("pruned by the sweep at iteration 1: collapse:") for r in rows)


@pytest.mark.slow
def test_a_database_password_from_the_environment_is_in_no_file_and_no_output(cache_dir, tmp_path, postgres_password_url):
    import optuna
    import psycopg

    password = postgres_password_url.split(":")[2].split("@")[0]
    without = postgres_password_url.replace(f":{password}@", "@")
    with pytest.raises(psycopg.OperationalError, match="password"):  # the server asks this role for its password
        psycopg.connect(without.replace("+psycopg", ""), connect_timeout=10).close()
    sweep_dir = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "agentcollapse.cli.main", "sweep", "--name", "smoke", "--dir", str(sweep_dir)]
    # one trial that reports to the study from inside (the pruner is on): it, too, must reach the database
    cmd += [*TINY_MODEL, f"cache_dir={cache_dir}", "trainer.num_threads=1", "algorithm.kl_coef=0.0", "hydra.sweeper.pruner.name=median"]
    env = {k: v for k, v in _env().items() if not k.startswith("PG")}
    proc = subprocess.run(
        cmd, cwd=ROOT, env={**env, "OMP_NUM_THREADS": "1", "AGENTCOLLAPSE_STORAGE": postgres_password_url}, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert password not in proc.stdout + proc.stderr
    assert f"({postgres_password_url.replace(password, '***')})" in proc.stderr  # the start line names the storage, hidden
    files = [p for p in sweep_dir.rglob("*") if p.is_file()]
    assert len(files) > 10 and not [p for p in files if password.encode() in p.read_bytes()]
    assert [r["status"] for r in _rows(sweep_dir)] == ["finished"] and not (sweep_dir / "study.db").exists()
    assert f"sweep.storage='{without}'" in (sweep_dir / "0" / ".hydra" / "overrides.yaml").read_text()
    trial = optuna.load_study(study_name="sweep", storage=postgres_password_url).trials[0]
    assert trial.intermediate_values  # the trial's reporter reached the study with the environment's password


def test_make_sweep_prints_no_password_from_args(tmp_path, postgres_password_url):
    """``make sweep ARGS="hydra.sweeper.storage=<URL with its password>"``: the sweep refuses the URL, and make
    prints the command line with the password masked as the sweep masks it, not as typed."""
    import psycopg

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    if subprocess.run(["make", "-q", ".venv/.installed"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("the venv stamp is stale: `make sweep` would reinstall the environment first")
    password = postgres_password_url.split(":")[2].split("@")[0]
    masked = postgres_password_url.replace(f":{password}@", ":***@")
    sweep_dir = tmp_path / "sweep"
    args = f"hydra.sweeper.storage={postgres_password_url} algorithm.kl_coef=0.0"
    cmd = ["make", "sweep", "SWEEP=smoke", "JOBS=1", f"DIR={sweep_dir}", f"ARGS={args}"]
    proc = subprocess.run(cmd, cwd=ROOT, env={**_env(), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert password not in proc.stdout + proc.stderr
    assert f"agentcollapse sweep --name smoke --jobs 1 --dir {sweep_dir} " in proc.stdout  # the command line, shown
    assert f" hydra.sweeper.storage={masked} algorithm.kl_coef=0.0" in proc.stdout
    assert f"error: hydra.sweeper.storage={masked} holds a password" in proc.stderr and "Traceback" not in proc.stderr
    assert not sweep_dir.exists()
    with psycopg.connect(postgres_password_url.replace("+psycopg", ""), connect_timeout=10) as conn:  # nothing written there
        assert conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'").fetchone() == (0,)
