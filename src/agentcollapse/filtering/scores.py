"""Filter scores (docs/method.md section 5): one number per prompt group from a ``[P, G]`` array.

Every score is one function decorated with :func:`register_score`; ``needs`` says which
per-trajectory ``[P, G]`` array it reads (``"returns"``, ``"entropy"`` or ``"length"``), so the
caller knows what to supply (:func:`required_feature`).

Names are honest: a ``*_std`` score is a standard deviation, a ``*_variance`` score a variance (both
``ddof=1``, sample statistics over the G rollouts). The authors' code computes the *std* under the
name ``reward_variance`` (and ``entropy_variance``); their runs therefore correspond to our
``reward_std`` / ``entropy_std`` (see ``docs/parity.md``). ``reward_std`` is the default.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentcollapse.errors import UserError
from agentcollapse.filtering._arrays import as_2d
from agentcollapse.registry import Registry

__all__ = [
    "DEFAULT_METRIC",
    "FEATURES",
    "METRICS",
    "ScoreSpec",
    "ZERO_TOL",
    "get_score",
    "group_scores",
    "register_score",
    "required_feature",
    "score_names",
]

ZERO_TOL = 1e-10
"""A score with ``|score| <= ZERO_TOL`` counts as zero (the authors' tolerance)."""

DEFAULT_METRIC = "reward_std"
FEATURES: tuple[str, ...] = ("returns", "entropy", "length")

ScoreFn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class ScoreSpec:
    name: str
    fn: ScoreFn  # [P, G] float64 -> [P] float64
    needs: str  # which [P, G] array the score reads: one of FEATURES
    min_group_size: int  # rollouts per prompt the score needs (2 for spreads)
    # True when a zero score means the group carries no task gradient (every rollout got the same
    # return); a batch of such groups only is skipped (docs/method.md section 5) instead of regularised only.
    zero_means_no_signal: bool
    help: str


_SCORES: Registry[ScoreSpec] = Registry("filter metric")


def register_score(
    name: str, *, needs: str = "returns", min_group_size: int = 1, zero_means_no_signal: bool = False
) -> Callable[[ScoreFn], ScoreFn]:
    """Decorator: register ``fn([P, G]) -> [P]`` as the filter score ``name``."""
    if needs not in FEATURES:
        raise ValueError(f"score {name!r}: needs must be one of {FEATURES}, got {needs!r}")

    def deco(fn: ScoreFn) -> ScoreFn:
        doc = (fn.__doc__ or "").strip().splitlines()
        _SCORES.add(name, ScoreSpec(name, fn, needs, min_group_size, zero_means_no_signal, doc[0] if doc else ""))
        return fn

    return deco


def score_names() -> tuple[str, ...]:
    """Registered score names, in registration order."""
    return _SCORES.names()


def get_score(name: str) -> ScoreSpec:
    """The spec of score ``name``; an unknown name raises UserError listing the valid ones."""
    return _SCORES.get(name)


def required_feature(metric: str) -> str | None:
    """The per-trajectory ``[P, G]`` array the caller must supply for ``metric``: ``"entropy"``,
    ``"length"``, or ``None`` when the episode returns suffice."""
    needs = get_score(metric).needs
    return None if needs == "returns" else needs


# -- the scores -------------------------------------------------------------------------------------
@register_score("reward_variance", min_group_size=2, zero_means_no_signal=True)
def _reward_variance(values: np.ndarray) -> np.ndarray:
    """Within-group variance of episode returns (ddof=1): the paper's wording."""
    return values.var(axis=1, ddof=1)


@register_score("reward_std", min_group_size=2, zero_means_no_signal=True)
def _reward_std(values: np.ndarray) -> np.ndarray:
    """Within-group std of episode returns (ddof=1): what the authors' code ranks by (default)."""
    return values.std(axis=1, ddof=1)


@register_score("reward")
def _reward(values: np.ndarray) -> np.ndarray:
    """Mean episode return of the group (ablation)."""
    return values.mean(axis=1)


@register_score("reward_sum")
def _reward_sum(values: np.ndarray) -> np.ndarray:
    """Sum of the group's episode returns (the authors' reward_sum ablation)."""
    return values.sum(axis=1)


@register_score("entropy", needs="entropy")
def _entropy(values: np.ndarray) -> np.ndarray:
    """Mean over the group of each trajectory's token-mean policy entropy (ablation)."""
    return values.mean(axis=1)


@register_score("entropy_variance", needs="entropy", min_group_size=2)
def _entropy_variance(values: np.ndarray) -> np.ndarray:
    """Within-group variance (ddof=1) of trajectory entropies (ablation)."""
    return values.var(axis=1, ddof=1)


@register_score("entropy_std", needs="entropy", min_group_size=2)
def _entropy_std(values: np.ndarray) -> np.ndarray:
    """Within-group std (ddof=1) of trajectory entropies: the authors' "entropy_variance"."""
    return values.std(axis=1, ddof=1)


@register_score("length", needs="length")
def _length(values: np.ndarray) -> np.ndarray:
    """Mean response length of the group (ablation)."""
    return values.mean(axis=1)


METRICS: tuple[str, ...] = score_names()
"""The built-in score names (a snapshot at import; :func:`score_names` also lists later ones)."""


def group_scores(values: Any, metric: str = DEFAULT_METRIC) -> np.ndarray:
    """One score per group from a ``[P, G]`` array (returns, entropies or lengths: see ``needs``)."""
    spec = get_score(metric)
    arr = as_2d(values, "values")
    group_size = arr.shape[1]
    if group_size < 1:
        raise UserError("values has 0 rollouts per prompt; set group_size>=1")
    if group_size < spec.min_group_size:
        raise UserError(
            f"metric {metric!r} needs at least {spec.min_group_size} rollouts per prompt, got "
            f"{group_size}; set group_size>={spec.min_group_size}"
        )
    return np.asarray(spec.fn(arr), dtype=np.float64)
