"""``agentcollapse sweep [--name grid] [--jobs N] [--dir DIR] [overrides]``: a sweep file from sweeps/
with N worker processes on one study (``make sweep``). The work is ``agentcollapse.sweep.workers``."""

from __future__ import annotations

import argparse
import sys

from agentcollapse.sweep.workers import run_workers


def sweep(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="agentcollapse sweep", description=__doc__)
    parser.add_argument("--name", default="grid", help="sweep file sweeps/<name>.yaml (default: grid)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes; each run gets cores // jobs threads")
    parser.add_argument("--dir", default=None, help="sweep directory; an existing one resumes (default: multirun/<env>/<name>-<time>)")
    parser.add_argument("--config-dir", default="sweeps", help="where sweep files live (default: sweeps)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every trial (env=sokoban trainer.max_steps=20 ...)")
    args = parser.parse_intermixed_args(argv)  # flags may follow overrides
    sys.exit(run_workers(args.name, args.overrides, jobs=args.jobs, sweep_dir=args.dir, config_dir=args.config_dir))
