"""The paper's ablation tables from finished runs, each cell a mean and Student-t 95% interval over the
runs (seeds) that share the row's settings, with the paper's numbers beside ours (docs/method.md section 8).

* :func:`quartile_table`: train on one RV quartile (``filter=quartile``, ``filter.value=[lo, hi]``):
  success, MI proxies and entropy per quartile Q1 (highest RV) .. Q4.
* :func:`main_table`: no filter vs each filter arm per env and algorithm: peak success and time per
  step, laid out as the paper's main table.
* :func:`filter_metric_table`: what ranks the groups (reward std/variance vs entropy vs length vs the
  trajectory-level filter): peak and final success, final MI.
* :func:`slip_table`: the filter's advantage over no filter at each FrozenLake slip.

Each returns an empty frame (with its columns) when the runs hold no such arm; the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from agentcollapse.analysis.paper import (
    HEADLINE_MI,
    PAPER_FILTER_METRIC,
    PAPER_MAIN,
    PAPER_QUARTILE,
    PAPER_SLIP,
    PAPER_TIME_CUT,
    SUCCESS,
)
from agentcollapse.analysis.runs import RunSet
from agentcollapse.analysis.stats import mean_ci, welch_diff_ci

__all__ = ["filter_metric_table", "group_means", "main_table", "quartile_table", "slip_table"]

PEAK = f"peak/{SUCCESS}"
FINAL = f"final/{SUCCESS}"
STEP_TIME = "mean/perf/step_time_s"


def group_means(runs: pd.DataFrame, by: Sequence[str], values: dict[str, str]) -> pd.DataFrame:
    """Per group of ``by``: ``n`` runs and, per ``label: column`` of ``values``, its mean and interval
    (``label``, ``label_ci_low``, ``label_ci_high``). Missing columns give NaN."""
    rows = []
    if runs.empty:
        return pd.DataFrame(columns=[*by, "n", *[f"{lab}{suf}" for lab in values for suf in ("", "_ci_low", "_ci_high")]])
    for key, part in runs.groupby(list(by), sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        row["n"] = len(part)
        for label, col in values.items():
            m, lo, hi, _ = mean_ci(pd.to_numeric(part[col], errors="coerce") if col in part else [])
            row[label], row[f"{label}_ci_low"], row[f"{label}_ci_high"] = m, lo, hi
        rows.append(row)
    return pd.DataFrame(rows)


def quartile_table(runset: RunSet, stat: str = "mean") -> pd.DataFrame:
    """Success, MI proxies and entropy per RV quartile; the paper's Q1 and Q4 beside ours."""
    runs = runset.runs
    runs = runs[runs["quartile"].astype(str).str.startswith("Q")] if "quartile" in runs else runs.iloc[0:0]
    values = {
        "success": PEAK,
        "mi_zscore_ema": f"{stat}/{HEADLINE_MI}",
        "mi_estimate": f"{stat}/collapse_trajectory_sample/mi_estimate",
        "retrieval_accuracy": f"{stat}/collapse_first_turn_sample/retrieval_accuracy",
        "conditional_entropy": f"{stat}/collapse_trajectory_sample/conditional_entropy_est",
        "actor_entropy": f"{stat}/actor/entropy",
    }
    table = group_means(runs, ["env", "algorithm", "quartile"], values)
    for what in ("success", "mi", "entropy"):
        table[f"paper_{what}"] = [PAPER_QUARTILE.get(q, {}).get(what, math.nan) for q in table["quartile"]]
    return table


def main_table(runset: RunSet) -> pd.DataFrame:
    """Per env, algorithm and filter arm: peak success and time per step (means over seeds), the gain
    and the time cut against the same env and algorithm without a filter, and the paper's PPO numbers."""
    runs = runset.runs
    table = group_means(runs, ["env", "algorithm", "filter"], {"peak_success": PEAK, "step_time_s": STEP_TIME})
    if table.empty:
        return table.assign(gain=[], gain_ci_low=[], gain_ci_high=[], time_cut=[], paper_no_filter=[], paper_filter=[], paper_time_cut=[])
    gains, lows, highs, cuts = [], [], [], []
    for row in table.itertuples(index=False):
        same = runs[(runs["env"] == row.env) & (runs["algorithm"] == row.algorithm)]
        base = same[same["filter"] == "none"]
        arm = same[same["filter"] == row.filter]
        if row.filter == "none" or base.empty:
            gains.append(math.nan), lows.append(math.nan), highs.append(math.nan), cuts.append(math.nan)
            continue
        d, lo, hi = welch_diff_ci(pd.to_numeric(arm.get(PEAK), errors="coerce"), pd.to_numeric(base.get(PEAK), errors="coerce"))
        gains.append(d), lows.append(lo), highs.append(hi)
        t_base = pd.to_numeric(base.get(STEP_TIME, pd.Series(dtype=float)), errors="coerce").mean()
        cuts.append(1 - row.step_time_s / t_base if t_base and math.isfinite(t_base) else math.nan)
    table["gain"], table["gain_ci_low"], table["gain_ci_high"], table["time_cut"] = gains, lows, highs, cuts
    table["paper_no_filter"] = [PAPER_MAIN.get(e, (math.nan, math.nan))[0] for e in table["env"]]
    table["paper_filter"] = [PAPER_MAIN.get(e, (math.nan, math.nan))[1] for e in table["env"]]
    table["paper_time_cut"] = PAPER_TIME_CUT
    return table


def _metric_arm(runs: pd.DataFrame) -> pd.Series:
    name = runs.get("filter.name", pd.Series("none", index=runs.index)).astype(str)
    metric = runs.get("filter.metric", pd.Series("", index=runs.index)).astype(str)
    strategy = runs.get("filter.strategy", pd.Series("", index=runs.index)).astype(str)
    arm = metric.where(~name.isin(["none", "trajectory"]), name)
    return arm.where(strategy != "within_group", "within_group " + metric)


def filter_metric_table(runset: RunSet, stat: str = "final") -> pd.DataFrame:
    """Per env, algorithm and filter score (``none``, ``reward_std``, ``entropy``, ``length``,
    ``trajectory``...; quartile runs left out): peak and final success and final MI."""
    runs = runset.runs
    if "quartile" in runs:
        runs = runs[~runs["quartile"].astype(str).str.startswith("Q")]
    runs = runs.assign(filter_metric=_metric_arm(runs)) if len(runs) else runs.assign(filter_metric=[])
    values = {
        "peak_success": PEAK,
        "final_success": FINAL,
        "mi_zscore_ema": f"{stat}/{HEADLINE_MI}",
        "retrieval_accuracy": f"{stat}/collapse_first_turn_sample/retrieval_accuracy",
        "conditional_entropy": f"{stat}/collapse_trajectory_sample/conditional_entropy_est",
    }
    table = group_means(runs, ["env", "algorithm", "filter_metric"], values)
    table["paper"] = [PAPER_FILTER_METRIC.get(str(m).split()[-1] if m else "", "") for m in table["filter_metric"]]
    return table


def slip_table(runset: RunSet) -> pd.DataFrame:
    """Per env, algorithm, slip and filter arm: peak success of the arm and of no filter, and the
    advantage (arm - none) with a Welch interval over seeds; the same for final success
    (``final_*``), which spreads where the peak does not (docs/results.md 2d)."""
    runs = runset.runs
    cols = ["env", "algorithm", "slip", "filter", "n", "peak_success", "no_filter_success", "advantage", "advantage_ci_low"]
    cols += ["advantage_ci_high", "final_success", "no_filter_final", "final_advantage", "final_advantage_ci_low"]
    cols += ["final_advantage_ci_high", "paper"]
    if runs.empty or "slip" not in runs or pd.to_numeric(runs["slip"], errors="coerce").nunique() < 2:
        return pd.DataFrame(columns=cols)

    def column(frame: pd.DataFrame, name: str) -> pd.Series:
        return pd.to_numeric(frame[name], errors="coerce") if name in frame else pd.Series(dtype=float)

    rows = []
    for (env, algo, slip), part in runs.groupby(["env", "algorithm", "slip"], sort=True):
        base = part[part["filter"] == "none"]
        for arm, arm_runs in part.groupby("filter", sort=True):
            if arm == "none":
                continue
            row = {"env": env, "algorithm": algo, "slip": slip, "filter": arm, "n": len(arm_runs)}
            for metric, mine, theirs, gain in (
                (PEAK, "peak_success", "no_filter_success", "advantage"),
                (FINAL, "final_success", "no_filter_final", "final_advantage"),
            ):
                vals, ref = column(arm_runs, metric), column(base, metric)
                d, lo, hi = welch_diff_ci(vals, ref)
                row |= {mine: float(vals.mean()), theirs: float(ref.mean()) if len(ref) else math.nan}
                row |= {gain: d, f"{gain}_ci_low": lo, f"{gain}_ci_high": hi}
            rows.append(row | {"paper": PAPER_SLIP})
    return pd.DataFrame(rows, columns=cols)
