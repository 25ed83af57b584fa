"""Did mutual information predict success better than entropy? The Spearman table over finished runs.

    .venv/bin/python analysis/correlations.py --runs multirun/frozenlake/grid-<time> --out <dir>

Writes ``<out>/spearman.csv`` (diagnostic, target, rho, p_value, n, ci_low, ci_high, then the group,
the undefined-MI-at-chance columns, the paper's value and the can-it-speak columns) and
``<out>/spearman.md``, and prints the Markdown. ``--runs`` takes sweep directories or run directories
(searched recursively); unfinished, failed and unreadable runs are skipped and named.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentcollapse.analysis import load_runs, spearman_markdown, spearman_table


def parse_targets(values: list[str] | None) -> list[str] | None:
    """``peak/val/success_rate`` stays as it is; a bare metric name means its peak and its final; none
    given: None (the analysis' defaults: success at T = 0.5, and at T = 1 where logged)."""
    if not values:
        return None
    out = []
    for v in values:
        out += [v] if v.split("/", 1)[0] in ("peak", "final", "mean", "at") else [f"peak/{v}", f"final/{v}"]
    return out


def run_main(main) -> None:
    """Exit with ``main()``'s code; bad input (a target no run has, ...) is one line on stderr, code 2."""
    try:
        sys.exit(main())
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


def add_common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--runs", nargs="+", required=True, help="sweep directories or run directories")
    ap.add_argument(
        "--target",
        nargs="+",
        default=None,
        help="run-frame columns or metrics (default: peak and final val/success_rate, and val/success_rate_t1 where logged)",
    )
    ap.add_argument("--stat", default="mean", choices=["mean", "final", "peak", "at"], help="summary of each diagnostic (default: mean)")
    ap.add_argument("--last-k", type=int, default=3, help="final = mean of the last k logged values (default: 3)")
    ap.add_argument("--at-step", type=int, default=None, help="the step of the 'at' summary")
    ap.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default: 2000)")
    ap.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(ap)
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
