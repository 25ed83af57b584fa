"""SNR-aware filtering core (METHOD.md sections 4 and 5): score groups, pick groups, diagnostics.

Pure numpy: no Lightning, no Hydra. Every array argument may also be a torch tensor (it is
detached, moved to the CPU and converted). Bad input raises :class:`agentcollapse.errors.UserError`
with a one-line message that says what is wrong and how to fix it.

Decisions where the method leaves room (all tested in ``tests/filtering/test_snr.py``):

- A score counts as "zero" when ``score <= ZERO_TOL`` (1e-12). With ``include_zero=False`` such
  groups (and negative ones, e.g. a negative mean ``reward``) are dropped before ``top_p``,
  ``top_k``, ``top_k_abs`` and ``min_p``; ``percentile_range`` always ranks *all* groups (the
  paper's quartile ablation ranks every prompt), so ``include_zero`` does not apply to it.
- Output order is always highest score first; ties keep the lower group index first.
- ``top_p`` linear follows the authors' code: ``threshold = value * total - selection_eps``, keep
  the shortest descending prefix whose cumulative mass reaches it (at least 1 group when any
  survive). ``value >= 1`` keeps every survivor outright, so float rounding cannot drop the last
  group. The linear mode needs non-negative scores; the softmax mode accepts any finite scores.
- ``top_k`` keeps ``max(1, floor(value * n + 0.5))`` survivors (round half up, not Python's
  banker's rounding), capped at ``n``.
- ``top_k_abs`` needs an integral ``value >= 1`` (2.0 is fine, 2.5 is an error); it keeps
  ``min(value, n)`` survivors.
- ``percentile_range`` ``(lo, hi)`` keeps descending ranks ``[floor(lo*n), floor(hi*n))`` (with a
  1e-9 guard against float error such as ``0.29 * 100 = 28.999...``); consecutive ranges that share
  a boundary therefore partition the groups for every ``n``.
- ``trajectory_filter`` ranks trajectories inside a group by ``(reward, index)``: among equal
  rewards the lower index counts as lower. Bottom-k and top-k are then disjoint, so exactly ``2k``
  trajectories stay per group when ``2k < G``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agentcollapse.errors import UserError

METRICS: tuple[str, ...] = (
    "reward_variance",
    "reward_std",
    "reward",
    "entropy",
    "entropy_variance",
    "length",
)
STRATEGIES: tuple[str, ...] = ("top_p", "top_k", "top_k_abs", "min_p", "percentile_range")
TOP_P_MODES: tuple[str, ...] = ("linear", "softmax")
SCALE_MODES: tuple[str, ...] = ("none", "linear", "sqrt")

ZERO_TOL = 1e-12
"""Scores ``<= ZERO_TOL`` count as zero (dropped when ``include_zero=False``)."""

_VARIANCE_METRICS = frozenset({"reward_variance", "reward_std", "entropy_variance"})
_PERCENTILE_GUARD = 1e-9

RV_RATIO_HIGH = 1.0
RV_RATIO_LOW = 0.5


def _to_numpy(x: Any, name: str) -> np.ndarray:
    """Convert array-likes and torch tensors to a float64 numpy array."""
    if hasattr(x, "detach"):
        t = x.detach().cpu()
        try:
            arr = np.asarray(t)
        except (TypeError, RuntimeError):  # e.g. bfloat16 has no numpy dtype
            arr = np.asarray(t.double())
    else:
        arr = np.asarray(x)
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise UserError(
            f"{name} must be numeric, got dtype {arr.dtype}; pass a float array or tensor"
        ) from exc


def _check_finite(arr: np.ndarray, name: str) -> None:
    if arr.size and not np.all(np.isfinite(arr)):
        n_nan = int(np.isnan(arr).sum())
        n_inf = int(np.isinf(arr).sum())
        raise UserError(
            f"{name} contains {n_nan} NaN and {n_inf} inf values; "
            "fix the rollout/reward computation so every value is finite"
        )


def _as_2d(values: Any, name: str) -> np.ndarray:
    arr = _to_numpy(values, name)
    if arr.ndim != 2:
        raise UserError(
            f"{name} must be a 2-D [prompts, group_size] array, got shape {tuple(arr.shape)}; "
            "reshape to [P, G]"
        )
    _check_finite(arr, name)
    return arr


def _as_1d(scores: Any, name: str = "scores") -> np.ndarray:
    arr = _to_numpy(scores, name)
    if arr.ndim != 1:
        raise UserError(
            f"{name} must be a 1-D [prompts] array, got shape {tuple(arr.shape)}; "
            "pass one score per group (see group_scores)"
        )
    _check_finite(arr, name)
    return arr


def _descending(scores: np.ndarray) -> np.ndarray:
    """Indices by score, highest first; ties keep the lower index first."""
    return np.argsort(-scores, kind="stable").astype(np.int64)


def group_scores(values: Any, metric: str = "reward_variance") -> np.ndarray:
    """One score per group from a ``[P, G]`` array.

    ``values`` holds episode returns for ``reward_variance``, ``reward_std`` and ``reward``, per-
    trajectory entropies for ``entropy`` and ``entropy_variance``, and per-trajectory lengths for
    ``length``. Variance and std use ``ddof=1`` (sample statistics over the ``G`` rollouts).
    """
    if metric not in METRICS:
        raise UserError(f"unknown filter metric {metric!r}; choose one of {', '.join(METRICS)}")
    arr = _as_2d(values, "values")
    group_size = arr.shape[1]
    if group_size < 1:
        raise UserError("values has 0 rollouts per prompt; set group_size>=1")
    if metric in _VARIANCE_METRICS and group_size < 2:
        raise UserError(
            f"metric {metric!r} needs at least 2 rollouts per prompt, got {group_size}; "
            "set group_size>=2"
        )
    if metric in ("reward", "entropy", "length"):
        return arr.mean(axis=1)
    var = arr.var(axis=1, ddof=1)
    if metric == "reward_std":
        return np.sqrt(var)
    return var


def _check_unit(value: Any, strategy: str, *, low_open: bool) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{strategy} value must be a number, got {value!r}") from exc
    ok = (0.0 < v <= 1.0) if low_open else (0.0 <= v <= 1.0)
    if not ok:
        rng = "(0, 1]" if low_open else "[0, 1]"
        raise UserError(f"{strategy} value must be in {rng}, got {value!r}; set value in {rng}")
    return v


def _top_p(ranked_scores: np.ndarray, value: float, mode: str, eps: float) -> int:
    """Number of leading entries of ``ranked_scores`` (descending) that top_p keeps."""
    n = ranked_scores.size
    if value >= 1.0:
        return n
    if mode == "softmax":
        z = np.exp(ranked_scores - ranked_scores.max())
        mass = z / z.sum()
    else:
        if ranked_scores[-1] < 0:
            raise UserError(
                "top_p linear mode needs non-negative scores (got a negative one); "
                "use top_p_mode='softmax', include_zero=False, or a non-negative metric"
            )
        mass = ranked_scores
    threshold = value * float(mass.sum()) - eps
    reached = np.nonzero(np.cumsum(mass) >= threshold)[0]
    k = int(reached[0]) + 1 if reached.size else n
    return max(1, min(k, n))


def select_groups(
    scores: Any,
    strategy: str = "top_p",
    value: Any = 0.9,
    include_zero: bool = False,
    top_p_mode: str = "linear",
    selection_eps: float = 0.01,
) -> np.ndarray:
    """Indices (int64) of the groups to keep, highest score first (ties: lower index first).

    See the module docstring for the exact rule of each strategy. Returns an empty array when
    nothing survives (e.g. all scores zero with ``include_zero=False``); the caller then skips
    the update and logs ``empty_after_filter``.
    """
    if strategy not in STRATEGIES:
        raise UserError(
            f"unknown filter strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}"
        )
    if top_p_mode not in TOP_P_MODES:
        raise UserError(
            f"unknown top_p_mode {top_p_mode!r}; choose one of {', '.join(TOP_P_MODES)}"
        )
    try:
        eps = float(selection_eps)
    except (TypeError, ValueError) as exc:
        raise UserError(f"selection_eps must be a number, got {selection_eps!r}") from exc
    if not (math.isfinite(eps) and eps >= 0.0):
        raise UserError(f"selection_eps must be a finite number >= 0, got {selection_eps!r}")

    # Validate the value before looking at the scores so config errors surface on any batch.
    if strategy == "percentile_range":
        try:
            lo, hi = (float(v) for v in value)
        except (TypeError, ValueError) as exc:
            raise UserError(
                f"percentile_range value must be a pair (lo, hi), got {value!r}; "
                "e.g. value=(0.0, 0.25) for the top quartile"
            ) from exc
        if not (0.0 <= lo < hi <= 1.0):
            raise UserError(
                f"percentile_range value must satisfy 0 <= lo < hi <= 1, got {value!r}; "
                "e.g. value=(0.0, 0.25) for the top quartile"
            )
    elif strategy == "top_k_abs":
        if isinstance(value, bool):
            raise UserError(f"top_k_abs value must be an integer >= 1, got {value!r}")
        try:
            v_abs = float(value)
        except (TypeError, ValueError) as exc:
            raise UserError(
                f"top_k_abs value must be an integer >= 1, got {value!r}; set value=<count>"
            ) from exc
        if not (math.isfinite(v_abs) and v_abs >= 1.0 and v_abs == int(v_abs)):
            raise UserError(
                f"top_k_abs value must be an integer >= 1, got {value!r}; set value=<count> "
                "(use strategy top_k for a fraction)"
            )
        count = int(v_abs)
    else:
        v = _check_unit(value, strategy, low_open=strategy != "min_p")

    s = _as_1d(scores)
    order = _descending(s)
    n_all = s.size

    if strategy == "percentile_range":
        start = int(math.floor(lo * n_all + _PERCENTILE_GUARD))
        stop = int(math.floor(hi * n_all + _PERCENTILE_GUARD))
        return order[start:stop]

    kept = order if include_zero else order[s[order] > ZERO_TOL]
    n = kept.size
    if n == 0:
        return kept
    ranked = s[kept]

    if strategy == "top_p":
        return kept[: _top_p(ranked, v, top_p_mode, eps)]
    if strategy == "top_k":
        k = max(1, int(math.floor(v * n + 0.5)))
        return kept[: min(k, n)]
    if strategy == "top_k_abs":
        return kept[: min(count, n)]
    # min_p
    best = float(ranked[0])
    if best < 0:
        raise UserError(
            "min_p needs non-negative scores (the best score is negative); "
            "use include_zero=False or a non-negative metric such as reward_variance"
        )
    return kept[ranked >= v * best]


def trajectory_filter(returns: Any, k: int) -> np.ndarray:
    """Boolean ``[P, G]`` mask keeping the top-k and bottom-k trajectories of every group.

    The paper's trajectory-level baseline (keep top-8 and bottom-8 by reward). Trajectories are
    ranked by ``(reward, index)``, so ties resolve by index and the two sets never overlap: exactly
    ``2k`` stay per group, or all of them when ``2k >= G``.
    """
    arr = _as_2d(returns, "returns")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise UserError(f"trajectory_filter k must be an integer >= 1, got {k!r}; set k>=1")
    k = int(k)
    num_prompts, group_size = arr.shape
    mask = np.zeros((num_prompts, group_size), dtype=bool)
    if 2 * k >= group_size:
        mask[:] = True
        return mask
    order = np.argsort(arr, axis=1, kind="stable")  # ascending by (reward, index)
    rows = np.arange(num_prompts)[:, None]
    mask[rows, order[:, :k]] = True
    mask[rows, order[:, group_size - k :]] = True
    return mask


def loss_scale(kept: int, total: int, mode: str) -> float:
    """Loss multiplier for the kept fraction.

    ``none`` -> 1.0, ``linear`` -> kept/total, ``sqrt`` -> sqrt(kept/total).
    """
    if mode not in SCALE_MODES:
        raise UserError(
            f"unknown loss scale mode {mode!r}; choose one of {', '.join(SCALE_MODES)}"
        )
    if total <= 0:
        raise UserError(
            f"loss_scale total must be > 0 (number of groups before filtering), got {total}"
        )
    if not (0 <= kept <= total):
        raise UserError(
            f"loss_scale kept must be in [0, total={total}], got {kept}; "
            "pass the number of kept groups"
        )
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


def interpret_rv_ratio(ratio: float) -> str:
    """One-line reading of :func:`rv_std_over_mean` (METHOD.md section 5).

    ``>= 1.0``: filtering likely helps (Sokoban 1.16-1.29); ``< 0.5``: likely hurts (FrozenLake
    0.33); in between: borderline; ``nan``: all-zero RV.
    """
    r = float(ratio)
    if math.isnan(r):
        return (
            "Std(RV)/Mean(RV) undefined: no reward variance in any group: nothing to learn from; "
            "filtering would empty the batch"
        )
    if r < 0:
        raise UserError(f"rv ratio must be >= 0 (a std over a mean of variances), got {ratio}")
    if r >= RV_RATIO_HIGH:
        return (
            f"Std(RV)/Mean(RV) = {r:.2f}: high variance spread: SNR filtering likely helps "
            "(paper: Sokoban 1.16-1.29, +3.2/+4.6 points)"
        )
    if r < RV_RATIO_LOW:
        return (
            f"Std(RV)/Mean(RV) = {r:.2f}: uniform reward variance: filtering unlikely to help and "
            "may hurt (paper: FrozenLake 0.33, -5.0 points)"
        )
    return (
        f"Std(RV)/Mean(RV) = {r:.2f}: borderline: filtering may or may not help; "
        "compare a filtered and an unfiltered run"
    )


def rv_quantile_buckets(scores: Any, num_buckets: int = 6) -> list[np.ndarray]:
    """Split group indices into ``num_buckets`` RV quantile buckets (0 = lowest RV, last = highest).

    ``np.array_split`` over the stable ascending argsort; with fewer groups than buckets the last
    buckets are empty. Used for the gradient-norm-by-RV analysis (METHOD.md section 4).
    """
    if (
        isinstance(num_buckets, bool)
        or not isinstance(num_buckets, (int, np.integer))
        or num_buckets < 1
    ):
        raise UserError(f"num_buckets must be an integer >= 1, got {num_buckets!r}; e.g. 6")
    s = _as_1d(scores)
    order = np.argsort(s, kind="stable").astype(np.int64)
    return [b.astype(np.int64) for b in np.array_split(order, int(num_buckets))]
