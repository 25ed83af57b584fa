"""What the scripts in the repository's top-level ``analysis/`` share: their common arguments, how a
``--target`` is read, and one way to exit on bad input. Each script is a thin command over a function
of this package; this module holds their glue so no script imports another."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

__all__ = ["add_run_arguments", "parse_targets", "run_main"]


def parse_targets(values: list[str] | None) -> list[str] | None:
    """``peak/val/success_rate`` stays as it is; a bare metric name means its peak and its final; none
    given: None (the analysis' defaults: success at T = 0.5, and at T = 1 where logged)."""
    if not values:
        return None
    out = []
    for v in values:
        out += [v] if v.split("/", 1)[0] in ("peak", "final", "mean", "at") else [f"peak/{v}", f"final/{v}"]
    return out


def run_main(main: Callable[[], int]) -> None:
    """Exit with ``main()``'s code; bad input (a target no run has, ...) is one line on stderr, code 2."""
    try:
        sys.exit(main())
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


def add_run_arguments(ap: argparse.ArgumentParser) -> None:
    """The arguments of every command over finished runs: which runs, which targets, how each run's
    diagnostic is summarised, and the bootstrap."""
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
