"""SNR diagnostics around the filter (docs/method.md sections 4 and 5): loss scaling, Std(RV)/Mean(RV) and
the reward-variance buckets of the gradient-norm analysis.

Pure numpy: no Lightning, no Hydra. Scores live in :mod:`agentcollapse.filtering.scores`, strategies
in :mod:`agentcollapse.filtering.strategies`, the whole filter decision in
:mod:`agentcollapse.filtering.decide`.

Buckets follow the authors' gradient analysis: ``quantile`` splits the groups sorted by RV into
``min(num_buckets, P)`` buckets of ``P // num_buckets`` groups with the leftover groups going to the
top (highest-RV) bucket (P=8, 6 buckets: sizes 1,1,1,1,1,3); ``fixed_rv`` bins the scores by fixed
edges (default 0,1,2,3,4,5: ``[0,1) ... [4,5) [5, inf)``; the authors bin the reward *std*).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agentcollapse.errors import UserError
from agentcollapse.filtering._arrays import as_1d
from agentcollapse.filtering.scores import ZERO_TOL, group_scores

__all__ = [
    "BUCKET_MODES",
    "groups_with_signal",
    "RV_EDGES",
    "SCALE_MODES",
    "interpret_rv_ratio",
    "loss_scale",
    "rv_buckets",
    "rv_quantile_buckets",
    "rv_std_over_mean",
]

SCALE_MODES: tuple[str, ...] = ("none", "linear", "sqrt")
BUCKET_MODES: tuple[str, ...] = ("quantile", "fixed_rv")
RV_EDGES: tuple[float, ...] = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)

RV_RATIO_HIGH = 1.0
RV_RATIO_LOW = 0.5


def groups_with_signal(returns: Any) -> np.ndarray:
    """Indices (ascending) of the groups whose returns are not all equal: the only groups whose
    group-relative advantages are non-zero. DAPO's dynamic sampling keeps these (verl's
    ``filter_groups``: std of the group's returns > 0; here > the filter's zero tolerance)."""
    std = group_scores(returns, "reward_std")
    return np.nonzero(np.abs(std) > ZERO_TOL)[0].astype(np.int64)


def loss_scale(kept: int, total: int, mode: str) -> float:
    """Loss multiplier for the kept fraction.

    ``none`` -> 1.0, ``linear`` -> kept/total, ``sqrt`` -> sqrt(kept/total).
    """
    if mode not in SCALE_MODES:
        raise UserError(f"unknown loss scale mode {mode!r}; choose one of {', '.join(SCALE_MODES)}")
    if total <= 0:
        raise UserError(f"loss_scale total must be > 0 (number of groups before filtering), got {total}")
    if not (0 <= kept <= total):
        raise UserError(f"loss_scale kept must be in [0, total={total}], got {kept}; pass the number of kept groups")
    if mode == "none":
        return 1.0
    frac = kept / total
    return float(frac) if mode == "linear" else float(math.sqrt(frac))


def rv_std_over_mean(returns: Any) -> float:
    """Std(RV) / Mean(RV) across groups: RV is the ddof=1 variance per group, Std is population.

    Returns ``nan`` when Mean(RV) is 0 (no group has any reward variance) or there are no groups.
    """
    rv = group_scores(returns, "reward_variance")
    if rv.size == 0:
        return float("nan")
    mean = float(rv.mean())
    if mean <= 0.0:
        return float("nan")
    return float(rv.std(ddof=0) / mean)


def interpret_rv_ratio(ratio: float, success_rate: float | None = None) -> str:
    """One-line reading of :func:`rv_std_over_mean` (docs/method.md section 5).

    ``>= 1.0``: filtering likely helps (Sokoban 1.16-1.29); ``< 0.5``: likely hurts (FrozenLake
    0.33); in between: borderline; ``nan``: all-zero RV. With ``success_rate`` 0 (no trajectory of the
    batch succeeded) the reading says so: its variance then comes from partial rewards and penalties
    (a format penalty, WebShop's attribute credit), not from success, and a reading taken from the
    paper's success-driven numbers may not carry over.
    """
    r = float(ratio)
    if success_rate is not None and success_rate == 0 and not math.isnan(r):
        return (
            "no trajectory succeeded: the reward variance comes from partial rewards and penalties (e.g. format "
            "penalties), not from success; " + interpret_rv_ratio(r)
        )
    if math.isnan(r):
        return "Std(RV)/Mean(RV) undefined: no reward variance in any group: nothing to learn from; filtering would empty the batch"
    if r < 0:
        raise UserError(f"rv ratio must be >= 0 (a std over a mean of variances), got {ratio}")
    if r >= RV_RATIO_HIGH:
        return f"Std(RV)/Mean(RV) = {r:.2f}: high variance spread: SNR filtering likely helps (paper: Sokoban 1.16-1.29, +3.2/+4.6 points)"
    if r < RV_RATIO_LOW:
        return (
            f"Std(RV)/Mean(RV) = {r:.2f}: uniform reward variance: filtering unlikely to help and "
            "may hurt (paper: FrozenLake 0.33, -5.0 points)"
        )
    return f"Std(RV)/Mean(RV) = {r:.2f}: borderline: filtering may or may not help; compare a filtered and an unfiltered run"


def _check_num_buckets(num_buckets: Any) -> int:
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, (int, np.integer)) or num_buckets < 1:
        raise UserError(f"num_buckets must be an integer >= 1, got {num_buckets!r}; e.g. 6")
    return int(num_buckets)


def rv_quantile_buckets(scores: Any, num_buckets: int = 6) -> list[np.ndarray]:
    """Group indices in ``num_buckets`` RV quantile buckets (0 = lowest RV, last = highest).

    Groups sorted ascending (stable: ties keep the lower index first) are cut into
    ``min(num_buckets, P)`` buckets of ``P // that`` groups; the leftover ``P % that`` groups join
    the last (highest-RV) bucket, as in the authors' gradient analysis. With fewer groups than
    buckets each group gets its own bucket and the trailing buckets are empty, so the list always
    has ``num_buckets`` entries. Used for the gradient-norm-by-RV analysis (docs/method.md section 4).
    """
    n_buckets = _check_num_buckets(num_buckets)
    s = as_1d(scores)
    order = np.argsort(s, kind="stable").astype(np.int64)
    used = min(n_buckets, order.size)
    out: list[np.ndarray] = []
    start = 0
    for b in range(n_buckets):
        if b >= used:
            out.append(order[:0])
            continue
        size = order.size // used + (order.size % used if b == used - 1 else 0)
        out.append(order[start : start + size])
        start += size
    return out


def rv_buckets(scores: Any, num_buckets: int = 6, mode: str = "quantile", edges: Any = RV_EDGES) -> list[np.ndarray]:
    """RV buckets by ``mode``: ``quantile`` (:func:`rv_quantile_buckets`) or ``fixed_rv``.

    ``fixed_rv``: one bucket per edge, ``[edges[i], edges[i+1])`` and the last ``[edges[-1], inf)``
    (``num_buckets`` is ignored; scores below ``edges[0]`` fall in no bucket); indices ascending
    inside each bucket. The authors pass the reward std with edges 0..5.
    """
    if mode not in BUCKET_MODES:
        raise UserError(f"unknown bucket mode {mode!r}; choose one of {', '.join(BUCKET_MODES)}")
    if mode == "quantile":
        return rv_quantile_buckets(scores, num_buckets)
    e = as_1d(edges, "edges")
    if e.size == 0 or np.any(np.diff(e) <= 0):
        raise UserError(f"bucket edges must be a non-empty increasing list, got {list(e)}; e.g. [0, 1, 2, 3, 4, 5]")
    s = as_1d(scores)
    out = []
    for i, low in enumerate(e):
        inside = s >= low
        if i + 1 < e.size:
            inside &= s < e[i + 1]
        out.append(np.nonzero(inside)[0].astype(np.int64))
    return out
