"""Sweep throughput on this machine: trials per hour with N workers x 1 thread against 1 worker x N threads.

    python -m benchmarks.bench_sweep [--trials 4] [--steps 10] [--order split,threaded] [overrides ...]

Runs the same small sweep (``sweeps/grid.yaml`` cut to ``--trials`` trials of ``--steps`` iterations,
FrozenLake) twice through ``agentcollapse sweep``, once per layout, each in a fresh sweep directory,
and times each end to end (Python start, warm-start load and every evaluation included: what a user
waits for). ``split`` is ``--jobs <cores>`` (one thread each, the default), ``threaded`` is ``--jobs 1``
with every core's thread in its one worker. The step-0 evaluation is shared within each sweep in both
layouts. Writes ``benchmarks/results/sweep.json`` (with the commit and command, as every benchmark's result)
and ``sweep.md``. Not a test.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import ROOT, Benchmark, Results, run, subprocess_env, timed


def sweep_overrides(trials: int, steps: int) -> list[str]:
    """``trials`` grid points: both filter arms x the two entropy settings x seeds 0.. (one KL)."""
    cells = 4
    seeds = ",".join(str(s) for s in range(max(1, -(-trials // cells))))
    return [
        "env=frozenlake",
        "algorithm.kl_coef=0.0",
        "algorithm.entropy_coef=0.0,0.03",
        "filter=none,rv_top_p",
        f"seed={seeds}",
        f"trainer.max_steps={steps}",
        f"trainer.val_every={max(1, steps // 2)}",
        "logger=csv",
    ]


def timed_sweep(jobs: int, overrides: list[str], sweep_dir: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "agentcollapse.cli.main", "sweep", "--name", "grid", "--jobs", str(jobs), "--dir", str(sweep_dir)]
    wall, proc = timed(subprocess.run, [*cmd, *overrides], env=subprocess_env(ROOT / "src"), capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"sweep --jobs {jobs} failed:\n{proc.stderr[-3000:]}")
    import pandas as pd

    trials = pd.read_csv(sweep_dir / "trials.csv")
    finished = int((trials["status"] == "finished").sum())
    return {"jobs": jobs, "wall_s": wall, "trials": finished, "trials_per_hour": finished / wall * 3600}


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--trials", type=int, default=4, help="trials per sweep (a multiple of 4: filter x entropy x seeds)")
    ap.add_argument("--steps", type=int, default=10, help="RL iterations per trial")
    ap.add_argument("--order", default="split,threaded", help="which layout runs first")


def main(args: argparse.Namespace, save: Results) -> None:
    cores = os.cpu_count() or 1
    layouts = {"split": cores, "threaded": 1}
    overrides = [*sweep_overrides(args.trials, args.steps), *args.overrides]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.order.split(","):
            results[name] = timed_sweep(layouts[name], overrides, Path(tmp) / name)
            r = results[name]
            print(f"{name} ({r['jobs']} worker(s)): {r['trials']} trials in {r['wall_s']:.0f} s, {r['trials_per_hour']:.1f}/h", flush=True)
    save.json({"overrides": overrides, "cores": cores, "results": results})
    split, threaded = results.get("split"), results.get("threaded")
    lines = [
        f"# Sweep throughput on {cores} cores ({args.trials} trials of {args.steps} iterations, order {args.order})",
        "",
        "| layout | workers x threads | wall (s) | trials per hour |",
        "|---|---|---|---|",
        *[
            f"| {name} | {r['jobs']} x {max(1, cores // r['jobs'])} | {r['wall_s']:.0f} | {r['trials_per_hour']:.1f} |"
            for name, r in results.items()
        ],
    ]
    if split and threaded:
        lines += ["", f"split / threaded throughput: {split['trials_per_hour'] / threaded['trials_per_hour']:.2f}"]
    save.markdown(lines, echo=True)


BENCHMARK = Benchmark("sweep", __doc__, main, flags, overrides="extra Hydra overrides for every trial")

if __name__ == "__main__":
    run(BENCHMARK)
