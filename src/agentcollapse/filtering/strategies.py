"""Filter strategies (docs/method.md section 5): which groups, or which trajectories, an update trains on.

Each strategy is one function decorated with :func:`register_strategy`. Two levels exist:

- ``level="group"``: ``fn(ranked, value, ctx) -> positions``. ``ranked`` holds the scores of the
  candidate groups in preference order (highest first for ``filter_type="largest"``, lowest first
  for ``"smallest"``; ties keep the lower group index first); the function returns the positions
  (into ``ranked``) it keeps. :func:`select_groups` handles zero exclusion and ordering around it.
- ``level="trajectory"``: ``fn(returns, value) -> mask``: a ``[P, G]`` boolean mask; every group
  stays, only some of its trajectories train (``within_group``).

``check`` validates (and normalises) ``value`` before any data is seen, so a bad config fails on
any batch. Semantics follow the authors' ``ragen/trainer/rollout_filter.py`` (``docs/parity.md``):

- Candidates: every group, or with ``include_zero=False`` those with ``|score| > 1e-10``
  (negative scores, e.g. a negative mean ``reward``, are candidates like any other).
- ``top_p`` linear: ``value >= 1`` keeps every candidate. Else ``threshold = value * sum(scores)
  - selection_eps``; walk the ranking adding scores while the running mass is below the threshold,
  stopping at the first non-positive score; keep the walked prefix if its mass reached the
  threshold, nothing otherwise. So ``value * total <= eps`` keeps nothing: a batch without signal
  is skipped. ``top_p`` softmax: probabilities ``softmax(+-scores)`` (sign by ``filter_type``);
  keep ``searchsorted(cumsum, value) + 1`` groups (no eps).
- ``top_k``: ``max(1, min(int(value * num_groups), candidates))`` with ``num_groups`` = all groups
  (truncation, not rounding). ``top_k_abs``: ``min(value, candidates)``.
- ``min_p``: largest keeps ``score >= value * max - 1e-10``; smallest keeps
  ``score <= min / (value + 1e-10) + 1e-10``.
- ``percentile_range`` ``(lo, hi)`` over the N candidates: ranks
  ``[round(lo*N), max(round(lo*N) + 1, min(round(hi*N), N)))`` (Python's round, half to even).
- ``within_group``: ``k = max(1, round(value * G))`` trajectories per group, the subset with the
  largest reward variance, which is always bottom-j plus top-(k-j) of the sorted returns; the first
  best j wins (ties: fewer bottom ones).

Output order is the ranking order: most preferred first.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentcollapse.errors import UserError
from agentcollapse.filtering._arrays import as_1d, as_2d
from agentcollapse.filtering.scores import ZERO_TOL
from agentcollapse.registry import Registry

__all__ = [
    "FILTER_TYPES",
    "LEVELS",
    "MIN_P_TOL",
    "STRATEGIES",
    "SelectContext",
    "StrategySpec",
    "TOP_P_MODES",
    "get_strategy",
    "register_strategy",
    "select_groups",
    "strategy_names",
    "trajectory_filter",
    "within_group_mask",
]

TOP_P_MODES: tuple[str, ...] = ("linear", "softmax")
FILTER_TYPES: tuple[str, ...] = ("largest", "smallest")
LEVELS: tuple[str, ...] = ("group", "trajectory")
MIN_P_TOL = 1e-10  # the authors' slack on the min_p threshold


@dataclass(frozen=True)
class SelectContext:
    """What a group-level strategy may need besides the ranked scores and its value."""

    num_groups: int  # all groups of the batch, before zero exclusion (top_k is a fraction of these)
    filter_type: str  # largest | smallest
    top_p_mode: str  # linear | softmax
    selection_eps: float


GroupFn = Callable[[np.ndarray, Any, SelectContext], np.ndarray]
TrajectoryFn = Callable[[np.ndarray, Any], np.ndarray]
CheckFn = Callable[[Any, str], Any]


@dataclass(frozen=True)
class StrategySpec:
    name: str
    fn: Callable[..., np.ndarray]
    level: str  # group | trajectory
    check: CheckFn  # (value, strategy name) -> normalised value; raises UserError
    help: str


_STRATEGIES: Registry[StrategySpec] = Registry("filter strategy")


# -- value checks ---------------------------------------------------------------------------------
def _number(value: Any, strategy: str) -> float:
    if isinstance(value, bool):
        raise UserError(f"{strategy} value must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{strategy} value must be a number, got {value!r}") from exc


def unit_open(value: Any, strategy: str) -> float:
    """A fraction in (0, 1]."""
    v = _number(value, strategy)
    if not 0.0 < v <= 1.0:
        raise UserError(f"{strategy} value must be in (0, 1], got {value!r}; set value in (0, 1]")
    return v


def unit_closed(value: Any, strategy: str) -> float:
    """A fraction in [0, 1]."""
    v = _number(value, strategy)
    if not 0.0 <= v <= 1.0:
        raise UserError(f"{strategy} value must be in [0, 1], got {value!r}; set value in [0, 1]")
    return v


def count(value: Any, strategy: str) -> int:
    """An integral count >= 1 (2.0 is fine, 2.5 is an error)."""
    if isinstance(value, bool):
        raise UserError(f"{strategy} value must be an integer >= 1, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{strategy} value must be an integer >= 1, got {value!r}; set value=<count>") from exc
    if not (math.isfinite(v) and v >= 1.0 and v == int(v)):
        raise UserError(f"{strategy} value must be an integer >= 1, got {value!r}; set value=<count> (use strategy top_k for a fraction)")
    return int(v)


def band(value: Any, strategy: str) -> tuple[float, float]:
    """A pair (lo, hi) with 0 <= lo < hi <= 1."""
    example = "e.g. value=(0.0, 0.25) for the top quartile"
    if isinstance(value, (str, bytes)):
        raise UserError(f"{strategy} value must be a pair (lo, hi), got {value!r}; {example}")
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{strategy} value must be a pair (lo, hi), got {value!r}; {example}") from exc
    if not (0.0 <= lo < hi <= 1.0):
        raise UserError(f"{strategy} value must satisfy 0 <= lo < hi <= 1, got {value!r}; {example}")
    return lo, hi


# -- registry -------------------------------------------------------------------------------------
def register_strategy(
    name: str, *, check: CheckFn, level: str = "group"
) -> Callable[[Callable[..., np.ndarray]], Callable[..., np.ndarray]]:
    """Decorator: register a strategy (see the module docstring for the two signatures)."""
    if level not in LEVELS:
        raise ValueError(f"strategy {name!r}: level must be one of {LEVELS}, got {level!r}")

    def deco(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        doc = (fn.__doc__ or "").strip().splitlines()
        _STRATEGIES.add(name, StrategySpec(name, fn, level, check, doc[0] if doc else ""))
        return fn

    return deco


def strategy_names(level: str | None = None) -> tuple[str, ...]:
    """Registered strategy names in registration order (optionally only one level's)."""
    if level is None:
        return _STRATEGIES.names()
    return tuple(n for n in _STRATEGIES if _STRATEGIES.get(n).level == level)


def get_strategy(name: str) -> StrategySpec:
    """The spec of strategy ``name``; an unknown name raises UserError listing the valid ones."""
    return _STRATEGIES.get(name)


def _prefix(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64)


# -- group-level strategies -----------------------------------------------------------------------
@register_strategy("top_p", check=unit_open)
def _top_p(ranked: np.ndarray, value: float, ctx: SelectContext) -> np.ndarray:
    """The shortest ranked prefix holding ``value`` of the score mass (linear) or softmax mass."""
    n = ranked.size
    if value >= 1.0:
        return _prefix(n)
    if ctx.top_p_mode == "softmax":
        logits = ranked if ctx.filter_type == "largest" else -ranked
        z = np.exp(logits - logits.max())
        # ranked order is descending probability, so the cumulative mass is over ranked itself
        cum = np.cumsum(z / z.sum())
        k = int(np.searchsorted(cum, value, side="left")) + 1
        return _prefix(min(k, n))
    threshold = value * float(ranked.sum()) - ctx.selection_eps
    mass, taken = 0.0, 0
    for score in ranked.tolist():
        if mass >= threshold or score <= 0.0:
            break
        mass += score
        taken += 1
    # Threshold unreachable (e.g. value * total <= eps, or the walk hit a non-positive score first):
    # no group is kept, so the caller skips the update.
    return _prefix(taken) if mass >= threshold else _prefix(0)


@register_strategy("top_k", check=unit_open)
def _top_k(ranked: np.ndarray, value: float, ctx: SelectContext) -> np.ndarray:
    """``int(value * num_groups)`` groups (at least 1, at most the candidates)."""
    return _prefix(max(1, min(int(value * ctx.num_groups), ranked.size)))


@register_strategy("top_k_abs", check=count)
def _top_k_abs(ranked: np.ndarray, value: int, ctx: SelectContext) -> np.ndarray:
    """``value`` groups (at most the candidates)."""
    return _prefix(min(value, ranked.size))


@register_strategy("min_p", check=unit_closed)
def _min_p(ranked: np.ndarray, value: float, ctx: SelectContext) -> np.ndarray:
    """Groups within a factor ``value`` of the best score."""
    if ctx.filter_type == "largest":
        keep = ranked >= value * ranked[0] - MIN_P_TOL  # ranked[0] is the max
    else:
        keep = ranked <= ranked[0] / (value + MIN_P_TOL) + MIN_P_TOL  # ranked[0] is the min
    return np.nonzero(keep)[0].astype(np.int64)


@register_strategy("percentile_range", check=band)
def _percentile_range(ranked: np.ndarray, value: tuple[float, float], ctx: SelectContext) -> np.ndarray:
    """Ranks ``[lo, hi)`` of the candidates (the quartile ablation: Q1 = (0, 0.25))."""
    n = ranked.size
    lo = round(value[0] * n)
    hi = max(lo + 1, min(round(value[1] * n), n))
    return np.arange(lo, min(hi, n), dtype=np.int64)


# -- trajectory-level strategies ------------------------------------------------------------------
def _max_variance_subset(row: np.ndarray, keep: int) -> np.ndarray:
    """Boolean mask of the ``keep`` entries of ``row`` with the largest variance (ddof=1).

    The optimum is always bottom-j plus top-(keep-j) of the sorted values (swapping a middle value
    for a more extreme one never lowers the variance), so the keep+1 splits are enumerated. Values
    are sorted by (value, index); among splits of equal variance the first (fewest bottom ones)
    wins, with a relative tolerance so float rounding does not pick between exact ties.
    """
    g = row.size
    mask = np.zeros(g, dtype=bool)
    if keep >= g:
        mask[:] = True
        return mask
    order = np.argsort(row, kind="stable")
    best_var, best_j = -1.0, 0
    for j in range(keep + 1):
        chosen = np.concatenate([order[:j], order[g - (keep - j) :]])
        var = float(row[chosen].var(ddof=1)) if keep > 1 else 0.0
        if var > best_var + 1e-12 * max(1.0, abs(best_var)):
            best_var, best_j = var, j
    mask[order[:best_j]] = True
    mask[order[g - (keep - best_j) :]] = True
    return mask


@register_strategy("within_group", check=unit_open, level="trajectory")
def within_group_mask(returns: Any, value: float) -> np.ndarray:
    """Every group, ``max(1, round(value * G))`` trajectories each: the max-variance subset."""
    arr = as_2d(returns, "returns")
    value = unit_open(value, "within_group")
    keep = max(1, round(value * arr.shape[1]))
    mask = np.zeros(arr.shape, dtype=bool)
    for p, row in enumerate(arr):
        mask[p] = _max_variance_subset(row, keep)
    return mask


STRATEGIES: tuple[str, ...] = strategy_names()
"""The built-in strategy names (a snapshot at import; :func:`strategy_names` also lists later ones)."""


def _check_common(top_p_mode: str, selection_eps: Any, filter_type: str) -> float:
    if top_p_mode not in TOP_P_MODES:
        raise UserError(f"unknown top_p_mode {top_p_mode!r}; choose one of {', '.join(TOP_P_MODES)}")
    if filter_type not in FILTER_TYPES:
        raise UserError(f"unknown filter_type {filter_type!r}; choose one of {', '.join(FILTER_TYPES)}")
    try:
        eps = float(selection_eps)
    except (TypeError, ValueError) as exc:
        raise UserError(f"selection_eps must be a number, got {selection_eps!r}") from exc
    if not (math.isfinite(eps) and eps >= 0.0):
        raise UserError(f"selection_eps must be a finite number >= 0, got {selection_eps!r}")
    return eps


def select_groups(
    scores: Any,
    strategy: str = "top_p",
    value: Any = 0.9,
    include_zero: bool = False,
    top_p_mode: str = "linear",
    selection_eps: float = 0.01,
    filter_type: str = "largest",
) -> np.ndarray:
    """Indices (int64) of the groups a group-level strategy keeps, most preferred first.

    See the module docstring for each rule. Returns an empty array when nothing is kept (e.g. all
    scores zero with ``include_zero=False``); the caller then skips the update.
    """
    spec = get_strategy(strategy)
    if spec.level != "group":
        raise UserError(
            f"filter strategy {strategy!r} selects trajectories inside every group, not groups; "
            "use agentcollapse.filtering.decide (or within_group_mask)"
        )
    eps = _check_common(top_p_mode, selection_eps, filter_type)
    v = spec.check(value, strategy)  # before the scores, so config errors surface on any batch
    s = as_1d(scores)
    candidates = np.arange(s.size, dtype=np.int64)
    if not include_zero:
        candidates = candidates[np.abs(s) > ZERO_TOL]
    if candidates.size == 0:
        return candidates
    key = -s[candidates] if filter_type == "largest" else s[candidates]
    ranked_idx = candidates[np.argsort(key, kind="stable")]
    ctx = SelectContext(int(s.size), filter_type, top_p_mode, eps)
    return ranked_idx[spec.fn(s[ranked_idx], v, ctx)]


def trajectory_filter(returns: Any, k: int) -> np.ndarray:
    """Boolean ``[P, G]`` mask keeping the top-k and bottom-k trajectories of every group.

    The paper's trajectory-level baseline (keep top-8 and bottom-8 by reward). Trajectories are
    ranked by ``(reward, index)``, so ties resolve by index and the two sets never overlap: exactly
    ``2k`` stay per group, or all of them when ``2k >= G``.
    """
    arr = as_2d(returns, "returns")
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
