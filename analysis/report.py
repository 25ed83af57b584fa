"""A sweep's report (``make report SWEEP=<dir>``): every table, the plots and ``<dir>/report.md``.

    .venv/bin/python analysis/report.py --runs <sweep dir> [--out <dir>] [--report <file>]

A thin command over :func:`agentcollapse.analysis.write_report`. Tables and plots go to ``<out>``
(default ``<first --runs>/analysis``), the report to ``<first --runs>/report.md`` unless ``--report``
says otherwise.
"""

from __future__ import annotations

import argparse

from agentcollapse.analysis import write_report
from agentcollapse.analysis.commands import add_run_arguments, parse_targets, run_main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(ap)
    ap.add_argument("--out", default=None, help="tables and plots (default: <first --runs>/analysis)")
    ap.add_argument("--report", default=None, help="the report file (default: <first --runs>/report.md)")
    args = ap.parse_args(argv)
    path = write_report(
        args.runs,
        args.out,
        args.report,
        targets=parse_targets(args.target),
        stat=args.stat,
        n_boot=args.n_boot,
        seed=args.seed,
        last_k=args.last_k,
    )
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    run_main(main)
