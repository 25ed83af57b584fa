"""Commit each finished run of a pre-registered sweep as it finishes, blind to its outcome.

A pre-registered experiment (docs/results.md sections 10 and 13) commits every run's ``metrics.csv``,
``config.yaml`` and ``summary.json`` as ``docs/results/<plan>/<filter>-seed<k>-<file>`` when the run
finishes, and reads no outcome before its plan says so. This watches a sweep's ``trials.csv`` and does
that, printing only which run it committed:

    nohup .venv/bin/python -m scripts.commit_finished_runs <sweep dir> docs/results/smollm2-ppo-sokoban --label "stage 1" &

It checks every ``--every`` seconds while a process names the sweep directory on its command line (the
sweep), then once more, and stops; ``--once`` checks once. Only the named files are committed (``git commit
-- <files>``), so work in progress in the checkout stays out of the commit.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from agentcollapse.analysis.prereg import RUN_FILES


def uncommitted_runs(sweep_dir: Path, out_dir: Path) -> list[tuple[Path, str]]:
    """(run directory, ``<filter>-seed<k>``) of each finished trial of the sweep not yet in ``out_dir``."""
    table = sweep_dir / "trials.csv"
    if not table.is_file():
        return []
    runs = []
    with table.open() as f:
        for row in csv.DictReader(f):
            if row["status"] != "finished":
                continue
            run_dir = Path(row["run_dir"])
            missing = [name for name in RUN_FILES if not (run_dir / name).is_file()]
            if missing:
                raise FileNotFoundError(f"trial {row['trial']} finished without {', '.join(missing)} in {run_dir}")
            # The run's own config names its arm: a sweep that fixes the filter (``ARGS="filter=..."``) has no
            # filter column in trials.csv, only one that searches over it does.
            config = yaml.safe_load((run_dir / "config.yaml").read_text())
            name = f"{config['filter']['name']}-seed{config['seed']}"
            if not all((out_dir / f"{name}-{file}").is_file() for file in RUN_FILES):
                runs.append((run_dir, name))
    return runs


def copy_run(run_dir: Path, out_dir: Path, name: str) -> list[Path]:
    """The run's files, copied into ``out_dir`` under the committed names."""
    out_dir.mkdir(parents=True, exist_ok=True)
    copied = []
    for file in RUN_FILES:
        shutil.copy(run_dir / file, out_dir / f"{name}-{file}")
        copied.append(out_dir / f"{name}-{file}")
    return copied


def commit(files: list[Path], message: str) -> None:
    paths = [str(f) for f in files]
    subprocess.run(["git", "add", "--", *paths], check=True)
    subprocess.run(["git", "commit", "-q", "-m", message, "--", *paths], check=True)


def sweep_running(sweep_dir: Path) -> bool:
    """Whether a process names the sweep directory (as given, or absolute) after ``--dir``."""
    spellings = {str(sweep_dir), str(sweep_dir.resolve())}
    return any(subprocess.run(["pgrep", "-f", "--", f"--dir {d}"], capture_output=True).returncode == 0 for d in spellings)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep_dir", type=Path, help="the sweep's directory (its trials.csv)")
    ap.add_argument("out_dir", type=Path, help="where the plan commits its runs, e.g. docs/results/smollm2-ppo-sokoban")
    ap.add_argument("--label", default="", help="the stage, for the commit message (e.g. 'stage 1', 'stage 2, pair 3')")
    ap.add_argument("--every", type=float, default=120.0, help="seconds between checks while the sweep runs")
    ap.add_argument("--once", action="store_true", help="check once and stop")
    args = ap.parse_args()
    plan = args.out_dir.name
    while True:
        running = sweep_running(args.sweep_dir)
        for run_dir, name in uncommitted_runs(args.sweep_dir, args.out_dir):
            files = copy_run(run_dir, args.out_dir, name)
            stage = f", {args.label}" if args.label else ""
            when = "found finished by a later check" if args.once else "committed as it finished"
            commit(files, f"{plan}{stage}: the run {name} {when} ({run_dir})")
            print(time.strftime("%Y-%m-%d %H:%M:%S"), "committed", name, flush=True)
        if args.once or not running:
            return
        time.sleep(args.every)


if __name__ == "__main__":
    main()
