"""Every table of a sweep as CSV + Markdown (``make tables SWEEP=<dir>``): the Spearman table, the
quartile / filter-vs-no-filter / filter-metric / slip ablations and the MI-before-success lag.

    .venv/bin/python analysis/tables.py --runs <sweep dir> [--out <dir>]

A thin command over :func:`agentcollapse.analysis.write_tables`. Writes to ``<out>`` (default
``<first --runs>/analysis``) and prints the Spearman table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentcollapse.analysis import load_runs, write_tables
from agentcollapse.analysis.commands import add_run_arguments, parse_targets, run_main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(ap)
    ap.add_argument("--out", default=None, help="output directory (default: <first --runs>/analysis)")
    args = ap.parse_args(argv)
    runset = load_runs(args.runs, last_k=args.last_k, at_step=args.at_step)
    out = Path(args.out or Path(args.runs[0]) / "analysis")
    paths = write_tables(runset, out, parse_targets(args.target), stat=args.stat, n_boot=args.n_boot, seed=args.seed)
    print(paths["spearman.md"].read_text())
    print(f"wrote {len(paths)} files to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
