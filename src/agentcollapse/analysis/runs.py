"""Run records -> one row per run, and Spearman correlation of each diagnostic with task success.

Reads only our own records (``summary.json`` + ``metrics.csv``); runs whose summary is missing,
half-written or not ``finished`` are skipped and reported, never read as valid.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from scipy.stats import spearmanr

from agentcollapse.records import read_summary

DEFAULT_DIAGNOSTICS = (
    "collapse_trajectory_sample/mi_zscore_ema",
    "collapse_trajectory_sample/mi_estimate",
    "collapse_trajectory_sample/retrieval_accuracy",
    "collapse_first_turn_sample/mi_zscore_ema",
    "collapse_first_turn_sample/mi_estimate",
    "collapse_first_turn_sample/retrieval_accuracy",
    "collapse_trajectory_sample/conditional_entropy_est",
    "actor/entropy",
    "rollout/state_grounding",
)


def load_runs(root: str | Path, aggregate: str = "mean") -> tuple[pd.DataFrame, list[str]]:
    """One row per finished run under ``root``: each metric's mean (or last) over the run, plus the
    resolved config values that vary. Returns the table and the run dirs that were skipped."""
    rows, skipped = [], []
    for summary_path in sorted(Path(root).rglob("summary.json")):
        run_dir = summary_path.parent
        summary = read_summary(run_dir)
        metrics_path = run_dir / "metrics.csv"
        if summary is None or summary.get("status") != "finished" or not metrics_path.exists():
            skipped.append(str(run_dir))
            continue
        metrics = pd.read_csv(metrics_path)
        metrics = metrics[metrics["step"] > 0]
        values = metrics.mean(numeric_only=True) if aggregate == "mean" else metrics.ffill().iloc[-1]
        row = {"run_dir": str(run_dir), **{k: v for k, v in values.items() if k != "step"}}
        row["peak/val/success_rate"] = summary.get("peak", {}).get("val/success_rate")
        rows.append(row)
    return pd.DataFrame(rows), skipped


def spearman_table(runs: pd.DataFrame, target: str = "peak/val/success_rate", diagnostics=DEFAULT_DIAGNOSTICS) -> pd.DataFrame:
    """Spearman rho (and p-value, n) of each diagnostic against ``target`` across runs."""
    out = []
    for name in diagnostics:
        if name not in runs or target not in runs:
            continue
        pair = runs[[name, target]].dropna()
        if len(pair) < 3:
            out.append({"diagnostic": name, "spearman_rho": float("nan"), "p_value": float("nan"), "n_runs": len(pair)})
            continue
        rho, p = spearmanr(pair[name], pair[target])
        out.append({"diagnostic": name, "spearman_rho": float(rho), "p_value": float(p), "n_runs": len(pair)})
    return pd.DataFrame(out).sort_values("spearman_rho", ascending=False, na_position="last").reset_index(drop=True)


if __name__ == "__main__":  # pragma: no cover - thin CLI
    import sys

    table, skipped = load_runs(sys.argv[1] if len(sys.argv) > 1 else "multirun")
    print(spearman_table(table).to_string(index=False))
    if skipped:
        print(f"skipped {len(skipped)} unfinished or unreadable runs: " + json.dumps(skipped[:5]))
