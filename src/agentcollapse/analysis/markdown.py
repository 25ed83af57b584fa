"""Frames as GitHub Markdown tables (pandas' ``to_markdown`` needs tabulate, which we do not ship)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

__all__ = ["fmt", "fmt_ci", "md_table"]


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value.is_integer() and abs(value) < 1e6 and digits == 0:
            return str(int(value))
        return f"{value:.{digits}f}" if abs(value) >= 10 ** (-digits) or value == 0 else f"{value:.1e}"
    return str(value).replace("|", "\\|")


def fmt_ci(mean: float, low: float, high: float, digits: int = 3) -> str:
    """``0.812 [0.700, 0.901]``, or the mean alone when the interval is undefined."""
    if not math.isfinite(mean):
        return "-"
    if not (math.isfinite(low) and math.isfinite(high)):
        return fmt(mean, digits)
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def md_table(df: pd.DataFrame, digits: int = 3) -> str:
    if df.empty:
        return "_(no rows)_\n"
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(fmt(v, digits) for v in row) + " |")
    return "\n".join(lines) + "\n"
