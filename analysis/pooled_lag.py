"""Does MI fall before success, over every published sweep? Pools the per-run ``lag.csv`` tables that
``make tables`` wrote (one row per run), so the answer is recomputed from committed files alone.

    .venv/bin/python analysis/pooled_lag.py docs/results/<sweep>/lag.csv ... [--out docs/results/lag-pooled]

A thin command over :func:`agentcollapse.analysis.pooled_lag`. Writes ``<out>/lag_pooled.csv`` and
``.md``: one row per sweep (named by its folder) and one for all of them, with the counts, lag and sign test of ``agentcollapse.analysis.lag.lag_summary`` and the
warning's recall, precision and Fisher test of ``warning_quality`` (for all of them, also the
Cochran-Mantel-Haenszel test with each sweep a stratum: the honest pooled p).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentcollapse.analysis import pooled_lag
from agentcollapse.analysis.lag import POOLED_COLUMNS
from agentcollapse.analysis.markdown import md_table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tables", nargs="+", type=Path, help="lag.csv files written by make tables (one per sweep)")
    ap.add_argument("--out", type=Path, default=Path("docs/results/lag-pooled"), help="output directory")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.tables if not p.is_file()]
    if missing:
        print(f"pooled_lag: no such lag table: {', '.join(missing)}; write them with make tables SWEEP=<dir>", file=sys.stderr)
        return 2
    frame = pooled_lag(args.tables)
    args.out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out / "lag_pooled.csv", index=False)
    text = md_table(frame[POOLED_COLUMNS], digits=2)
    (args.out / "lag_pooled.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
