"""Several workers on one study: every grid point runs exactly once, whether the workers share the
sweep directory's study.db or a PostgreSQL server (the way to share a study across machines)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

# starts processes of its own on both cores: make test runs it after the 2-worker pass, alone
pytestmark = [pytest.mark.alone, pytest.mark.xdist_group("processes")]

ROOT = Path(__file__).resolve().parents[2]


def _serve(storage: str, sweep_dir: Path, workers: int = 3) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.sweep.fake_worker", storage, str(sweep_dir), f"w{i}"],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(workers)
    ]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
    from tests.sweep.fake_worker import main

    main(storage, str(sweep_dir), "check")  # nothing left: rewrites trials.csv once every worker is done
    return list(csv.DictReader((sweep_dir / "trials.csv").open()))


def _check(rows: list[dict]) -> None:
    points = [(r["algorithm.kl_coef"], r["seed"]) for r in rows if r["status"] == "finished"]
    assert len(points) == 12 and len(set(points)) == 12, rows  # each of the 3 x 4 grid points once
    assert all(r["status"] == "finished" for r in rows)
    assert len({r["worker"] for r in rows}) >= 2  # the work was really shared
    assert all(float(r["value"]) == float(r["seed"]) for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_workers_share_one_study(backend, tmp_path, request):
    storage = "-" if backend == "sqlite" else request.getfixturevalue("postgres_url")
    _check(_serve(storage, tmp_path / "sweep"))
    if backend == "sqlite":
        assert (tmp_path / "sweep" / "study.db").exists()
