"""Did mutual information predict success better than entropy? The Spearman table over finished runs.

    .venv/bin/python analysis/correlations.py --runs multirun/frozenlake/grid-<time> --out <dir>

A thin command over :func:`agentcollapse.analysis.spearman_table` (and ``spearman_markdown``; its
arguments: ``agentcollapse.analysis.commands``). Writes ``<out>/spearman.csv`` (diagnostic, target, rho,
p_value, n, ci_low, ci_high, then the group, the undefined-MI-at-chance columns, the paper's value and the
can-it-speak columns) and ``<out>/spearman.md``, and prints the Markdown. ``--runs`` takes sweep
directories or run directories (searched recursively); unfinished, failed and unreadable runs are
skipped and named.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentcollapse.analysis import load_runs, spearman_markdown, spearman_table
from agentcollapse.analysis.commands import add_run_arguments, parse_targets, run_main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(ap)
    ap.add_argument("--out", default=None, help="output directory (default: <first --runs>/analysis)")
    args = ap.parse_args(argv)
    runset = load_runs(args.runs, last_k=args.last_k, at_step=args.at_step)
    out = Path(args.out or Path(args.runs[0]) / "analysis")
    out.mkdir(parents=True, exist_ok=True)
    table = spearman_table(runset, parse_targets(args.target), stat=args.stat, n_boot=args.n_boot, seed=args.seed)
    table.to_csv(out / "spearman.csv", index=False)
    text = spearman_markdown(table, runset)
    (out / "spearman.md").write_text(text)
    print(text)
    print(f"wrote {out / 'spearman.csv'} and {out / 'spearman.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    run_main(main)
