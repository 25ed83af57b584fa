"""``agentcollapse train trainer=ddp trainer.devices=2`` as a user runs it, on CPU (gloo): one run
record, the single-process run's numbers, and no hang when a rank has nothing to train.

Each 2-process run costs ~50 s on a busy 2-core machine, mostly the two ranks starting up.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from tests.cli.test_train_cli import agentcollapse, cli_env, metrics, summary
from tests.conftest import TINY_OVERRIDES

# starts processes of its own on both cores: make test runs it after the 2-worker pass, alone
pytestmark = [pytest.mark.alone, pytest.mark.xdist_group("processes")]

# The smoke trainer's settings spelled out: trainer=ddp replaces the trainer group they came from.
OVERRIDES = [
    *TINY_OVERRIDES,
    "trainer.max_steps=2",
    "trainer.val_every=2",
    "trainer.val_episodes=4",
    "trainer.val_temperatures=[0.5]",
    "trainer.checkpoint_every=1",
    "trainer.progress_bar=false",
    "trainer.num_threads=1",
    "diagnostics.compute_freq=1",
    "seed=3",
]
DDP = ["trainer=ddp", "trainer.devices=2"]
RECORD = {".hydra", "checkpoints", "config.yaml", "metrics.csv", "summary.json", "train.log"}


def train(run_dir: Path, cache_dir: str, *extra: str, timeout: float = 240) -> str:
    """Run to the end (a hang fails at ``timeout``); stdout + stderr."""
    cmd = [*agentcollapse(), "train", *OVERRIDES, f"cache_dir={cache_dir}", f"run_dir={run_dir}", *extra]
    proc = subprocess.run(cmd, cwd=run_dir.parent, env=cli_env(), capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


def assert_one_record(run_dir: Path, out: str) -> None:
    s = summary(run_dir)
    assert s["status"] == "finished" and s["iteration"] == 2, s
    assert {p.name for p in run_dir.iterdir()} == RECORD  # no second rank's files
    assert sorted(p.name for p in run_dir.parent.iterdir() if p.name != "run") == [], "files outside the run dir"
    assert "rank 0/2 rolls out groups 0..1" in out and "rank 1/2 rolls out groups 2..2" in out  # both ranks ran
    assert metrics(run_dir)["step"].tolist() == [0, 1, 2]


@pytest.mark.slow
def test_two_processes_reproduce_the_single_process_run(tmp_path, cache_dir):
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    train(tmp_path / "one" / "run", cache_dir)
    out = train(tmp_path / "two" / "run", cache_dir, *DDP)
    assert_one_record(tmp_path / "two" / "run", out)
    one, two = metrics(tmp_path / "one" / "run"), metrics(tmp_path / "two" / "run")
    assert list(one.columns) == list(two.columns)
    # Step 1 is exact: the same global rollout (maps and tokens), so the same group statistics, filter
    # choice, MI proxy, held-out evaluation and first update. Later steps follow weights whose
    # gradients were summed in another order (last-bit differences), so they are not compared.
    first = [c for c in one.columns if c.startswith(("rollout/", "filter/", "collapse", "actor/"))]
    assert any(c.startswith("rollout/") for c in first) and "actor/entropy" in first
    pd.testing.assert_frame_equal(one.loc[one.step <= 1, first], two.loc[two.step <= 1, first], check_exact=True)


@pytest.mark.slow
def test_a_rank_with_nothing_to_train_does_not_hang(tmp_path, cache_dir):
    # One kept group, all in one micro-batch, which goes to rank 0: rank 1 has no sequence to train
    # on, yet must join every collective of the update.
    run_dir = tmp_path / "run"
    out = train(
        run_dir,
        cache_dir,
        *DDP,
        "filter=length",
        "filter.strategy=top_k_abs",
        "filter.value=1",
        "algorithm.micro_batch_size=64",
        timeout=240,
    )
    assert_one_record(run_dir, out)
    df = pd.read_csv(run_dir / "metrics.csv")
    trained = df[df.step >= 1]
    assert (trained["filter/kept_count"] == 1).all()
    assert (trained["actor/num_sequences"] > 0).all() and trained["actor/grad_norm"].notna().all()
