"""Does MI fall before success? The paper's early-warning claim made a number.

**Onset of a decline** (:func:`onset`), for one run's logged series ``x(t)``:

* ``M(t)`` is the running peak, the largest value logged at or before ``t`` (the step-0 evaluation of
  the warm start counts: falling below it is a decline);
* the drop threshold is ``delta = max(frac * (max x - min x), min_drop)``: a fraction (default 1/4) of
  the run's own range, and never less than ``min_drop``, the series' noise floor -- for held-out
  success, twice the binomial standard error at the run's mean success and ``trainer.val_episodes``;
  for the MI proxy 0 (it has no such count);
* the onset is the first logged step ``t`` after the first point such that **every** value from ``t``
  to the end of the run is at most ``M(t) - delta``: the series has fallen by delta below its peak so
  far and never comes back. A run that recovers, or a flat one, has no onset.

The MI series is the headline proxy with undefined steps at chance (``...@chance``, see
``agentcollapse.analysis.runs``), so a policy whose reasoning stops being valid counts as MI falling.
The success series is ``val/success_rate`` (every ``trainer.val_episodes``-episode evaluation).

**Lag** = onset(success) - onset(MI), in RL iterations: positive when MI fell first. Each run falls in
one of ``both`` (lag defined), ``mi_only`` (MI fell, success did not, by the run's end), ``success_only``
(success fell with no MI warning) and ``neither``. The resolution is that of the two series: MI is
measured every ``diagnostics.compute_freq`` steps and success every ``trainer.val_every``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from agentcollapse.analysis.paper import HEADLINE_MI, SUCCESS
from agentcollapse.analysis.runs import RunSet
from agentcollapse.analysis.stats import binomial_se, mantel_haenszel_p

__all__ = ["POOLED_COLUMNS", "lag_summary", "lag_table", "onset", "pooled_lag", "warning_quality"]

POOLED_COLUMNS = ["sweep", "runs", "both", "mi_only", "success_only", "neither", "mi_first", "same_step", "success_first"]
POOLED_COLUMNS += ["median_lag", "sign_test_p", "recall", "precision", "success_decline_without_mi", "fisher_p", "cmh_p"]
"""The columns of :func:`pooled_lag`'s table as ``analysis/pooled_lag.py`` prints it."""


def onset(steps, values, *, frac: float = 0.25, min_drop: float = 0.0) -> float:
    """The first step of a sustained decline (module docstring), NaN when there is none."""
    t = np.asarray(steps, float)
    x = np.asarray(values, float)
    ok = np.isfinite(t) & np.isfinite(x)
    t, x = t[ok], x[ok]
    order = np.argsort(t, kind="stable")
    t, x = t[order], x[order]
    if len(x) < 2:
        return math.nan
    delta = max(frac * float(x.max() - x.min()), float(min_drop))
    if not delta > 0:
        return math.nan
    peak = np.maximum.accumulate(x)
    later_max = np.maximum.accumulate(x[::-1])[::-1]  # largest value from i to the end
    for i in range(1, len(x)):
        if later_max[i] <= peak[i] - delta:
            return float(t[i])
    return math.nan


def _series(history: pd.DataFrame, run_id: str, metric: str) -> pd.DataFrame:
    h = history[(history["run_id"] == run_id) & (history["metric"] == metric)]
    return h.sort_values("step")


def lag_table(runset: RunSet, mi: str = HEADLINE_MI, success: str = SUCCESS, *, frac: float = 0.25, chance: bool = True) -> pd.DataFrame:
    """Per run: the onsets of the MI proxy's and of success's decline, the lag and its category."""
    rows = []
    for run_id, run in runset.runs.iterrows():
        s = _series(runset.history, run_id, success)
        episodes = pd.to_numeric(pd.Series([run.get("trainer.val_episodes", math.nan)]), errors="coerce").iloc[0]
        floor = 2 * binomial_se(float(s["value"].mean()), float(episodes)) if len(s) and math.isfinite(episodes) else 0.0
        s_on = onset(s["step"], s["value"], frac=frac, min_drop=floor if math.isfinite(floor) else 0.0)
        m = _series(runset.history, run_id, mi + "@chance" if chance else mi)
        if chance and m.empty:  # a run without proxy steps: the plain series (also empty then)
            m = _series(runset.history, run_id, mi)
        m_on = onset(m["step"], m["value"], frac=frac)
        if math.isfinite(m_on) and math.isfinite(s_on):
            category = "both"
        elif math.isfinite(m_on):
            category = "mi_only"
        elif math.isfinite(s_on):
            category = "success_only"
        else:
            category = "neither"
        rows.append(
            {
                "run_id": run_id,
                "mi_onset": m_on,
                "success_onset": s_on,
                "lag": s_on - m_on if category == "both" else math.nan,
                "category": category,
                "last_step": run.get("last_step", math.nan),
                "mi_points": len(m),
                "success_points": len(s),
            }
        )
    return pd.DataFrame(
        rows, columns=["run_id", "mi_onset", "success_onset", "lag", "category", "last_step", "mi_points", "success_points"]
    )


def lag_summary(table: pd.DataFrame) -> dict[str, float | int]:
    """Across runs: how many fell how, the median lag (IQR) of the runs where both fell, the share where
    MI fell first, and a two-sided sign test of 'MI falls first' against a coin flip (ties left out)."""
    counts = table["category"].value_counts() if len(table) else pd.Series(dtype=int)
    lag = table["lag"].dropna() if len(table) else pd.Series(dtype=float)
    lead, trail = int((lag > 0).sum()), int((lag < 0).sum())
    p = float(sps.binomtest(lead, lead + trail, 0.5).pvalue) if lead + trail else math.nan
    return {
        "runs": int(len(table)),
        "both": int(counts.get("both", 0)),
        "mi_only": int(counts.get("mi_only", 0)),
        "success_only": int(counts.get("success_only", 0)),
        "neither": int(counts.get("neither", 0)),
        "median_lag": float(lag.median()) if len(lag) else math.nan,
        "lag_q25": float(lag.quantile(0.25)) if len(lag) else math.nan,
        "lag_q75": float(lag.quantile(0.75)) if len(lag) else math.nan,
        "mi_first": lead,
        "same_step": int((lag == 0).sum()),
        "success_first": trail,
        "share_mi_first": lead / len(lag) if len(lag) else math.nan,
        "sign_test_p": p,
    }


def _counts(table: pd.DataFrame) -> tuple[int, int, int, int]:
    n = table["category"].value_counts() if len(table) else pd.Series(dtype=int)
    return tuple(int(n.get(k, 0)) for k in ("both", "mi_only", "success_only", "neither"))  # type: ignore[return-value]


def _2x2(counts: tuple[int, int, int, int]) -> list[list[int]]:
    both, mi_only, success_only, neither = counts
    return [[both, mi_only], [success_only, neither]]


def warning_quality(table: pd.DataFrame, strata: str | None = None) -> dict[str, float]:
    """The MI decline read as a warning of a success decline, over the runs of a :func:`lag_table`:
    ``recall`` (of the runs whose success declined, the share whose MI declined too), ``precision`` (of
    the runs whose MI declined, the share whose success declined), the base rate of a success decline
    without one, and Fisher's one-sided exact test that an MI decline makes a success decline likelier.
    With ``strata`` (a column, e.g. the sweep of runs pooled from several), ``cmh_p`` is the same
    question asked within each stratum and pooled (Cochran-Mantel-Haenszel), so that sweeps where both
    declines are common cannot make an association on their own. Timing is left to :func:`lag_summary`."""
    both, mi_only, success_only, neither = _counts(table)

    def share(k: int, total: int) -> float:
        return k / total if total else math.nan

    return {
        "recall": share(both, both + success_only),
        "precision": share(both, both + mi_only),
        "success_decline_without_mi": share(success_only, success_only + neither),
        "fisher_p": float(sps.fisher_exact(_2x2((both, mi_only, success_only, neither)), alternative="greater").pvalue),
        "cmh_p": mantel_haenszel_p([_2x2(_counts(part)) for _, part in table.groupby(strata)]) if strata else math.nan,
    }


def pooled_lag(paths: list[Path]) -> pd.DataFrame:
    """Per-run lag tables (``lag.csv``, one per sweep, as ``make tables`` writes them) pooled: one row per
    sweep (named by its folder) with :func:`lag_summary` and :func:`warning_quality`, and one for all of
    them, whose warning quality takes each sweep as a stratum (the Cochran-Mantel-Haenszel p)."""
    tables = {path.parent.name: pd.read_csv(path).assign(sweep=path.parent.name) for path in paths}
    rows = [{"sweep": name, **lag_summary(t), **warning_quality(t)} for name, t in tables.items()]
    everything = pd.concat(tables.values(), ignore_index=True)
    rows.append({"sweep": "all", **lag_summary(everything), **warning_quality(everything, strata="sweep")})
    return pd.DataFrame(rows)
