"""The whole filter decision of one RL iteration as one pure function (docs/method.md section 5).

``decide(returns, successes, features, **filter_config_fields)`` says which groups (and, for
trajectory-level filters, which trajectories) the update trains on, the loss multiplier and the
``filter/*`` metrics. Its keyword names are the fields of ``agentcollapse.config.FilterConfig``
(except ``max_empty_steps``, which the caller's step counter uses), so the caller passes the config
through unchanged. Precedence: ``name == "none"`` keeps everything (a true no-filter arm);
``trajectory_k > 0`` is the paper's top-k + bottom-k trajectory baseline; otherwise the strategy
decides, at group level or (``within_group``) at trajectory level.

An all-zero batch of a score whose zero means "no task gradient" (``reward_std``,
``reward_variance``) keeps nothing whatever the strategy (docs/method.md section 5: skip the update rather than
train on the regularisers only); an empty ``kept_groups`` tells the caller to skip the update.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentcollapse.errors import UserError
from agentcollapse.filtering._arrays import as_2d
from agentcollapse.filtering.scores import ZERO_TOL, get_score, group_scores, required_feature
from agentcollapse.filtering.snr import SCALE_MODES
from agentcollapse.filtering.snr import loss_scale as _loss_scale
from agentcollapse.filtering.strategies import (
    FILTER_TYPES,
    TOP_P_MODES,
    get_strategy,
    select_groups,
    trajectory_filter,
)

__all__ = ["FilterDecision", "check_settings", "decide", "required_feature"]


@dataclass(frozen=True)
class FilterDecision:
    kept_groups: np.ndarray  # int64 group indices the update trains on (empty: skip the update)
    trajectory_mask: np.ndarray | None  # [P, G] bool: trajectories of the groups that train; None = all
    loss_scale: float
    metrics: dict[str, float] = field(default_factory=dict)  # the filter/* metrics


def _value(value: Any) -> Any:
    """Config lists (also OmegaConf's ListConfig, which is no list) become tuples."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        return value
    return tuple(value)


def check_settings(
    *,
    name: str,
    metric: str,
    strategy: str,
    value: Any,
    include_zero: bool,
    top_p_mode: str,
    selection_eps: float,
    loss_scale: str,
    trajectory_k: int,
    filter_type: str = "largest",
    group_size: int | None = None,
) -> None:
    """Raise UserError for any setting :func:`decide` would reject, without a batch.

    ``group_size`` (optional) also checks that the score has enough rollouts per prompt.
    """
    if name == "none":
        return
    if isinstance(trajectory_k, bool) or not isinstance(trajectory_k, (int, np.integer)) or trajectory_k < 0:
        raise UserError(f"filter.trajectory_k must be an integer >= 0, got {trajectory_k!r}")
    if trajectory_k > 0:
        return
    if loss_scale not in SCALE_MODES:
        raise UserError(f"unknown loss scale mode {loss_scale!r}; choose one of {', '.join(SCALE_MODES)}")
    spec = get_strategy(strategy)
    if spec.level == "group":
        score = get_score(metric)
        if group_size is not None and group_size < score.min_group_size:
            raise UserError(
                f"metric {metric!r} needs at least {score.min_group_size} rollouts per prompt, got "
                f"{group_size}; set group_size>={score.min_group_size}"
            )
        # the dummy scores only exercise the checks of value, top_p_mode, selection_eps, filter_type
        select_groups(np.array([1.0, 0.5]), strategy, _value(value), include_zero, top_p_mode, selection_eps, filter_type)
    else:
        if top_p_mode not in TOP_P_MODES:
            raise UserError(f"unknown top_p_mode {top_p_mode!r}; choose one of {', '.join(TOP_P_MODES)}")
        if filter_type not in FILTER_TYPES:
            raise UserError(f"unknown filter_type {filter_type!r}; choose one of {', '.join(FILTER_TYPES)}")
        spec.check(_value(value), strategy)


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else 0.0


def _spread_metrics(values: np.ndarray, kept: np.ndarray) -> dict[str, float]:
    """``filter/in_group_{std,max,mean}`` of the score's source values, all groups vs the kept ones
    (the authors' base filter metrics; std is ddof=1, so only with >= 2 rollouts per prompt)."""
    out: dict[str, float] = {}
    stats = {"max": values.max(axis=1), "mean": values.mean(axis=1)}
    if values.shape[1] >= 2:
        stats = {"std": values.std(axis=1, ddof=1), **stats}
    for key, per_group in stats.items():
        out[f"filter/in_group_{key}"] = _mean(per_group)
        out[f"filter/chosen_in_group_{key}"] = _mean(per_group[kept])
    return out


def decide(
    returns: Any,
    successes: Any,
    features: Mapping[str, Any] | None = None,
    *,
    name: str,
    metric: str,
    strategy: str,
    value: Any,
    include_zero: bool,
    top_p_mode: str,
    selection_eps: float,
    loss_scale: str,
    trajectory_k: int,
    filter_type: str = "largest",
) -> FilterDecision:
    """The filter decision for one batch: one of four kinds, in the module's order of precedence.

    ``returns`` and ``successes`` are ``[P, G]``; ``features`` maps a feature name to a ``[P, G]``
    per-trajectory array and must hold ``required_feature(metric)`` when that is not ``None``.
    """
    r = as_2d(returns, "returns")
    s = as_2d(successes, "successes")
    if s.shape != r.shape:
        raise UserError(f"successes has shape {s.shape} but returns {r.shape}; pass both as [P, G]")
    if name == "none":
        return _keep_everything(r.shape[0])
    check_settings(
        name=name,
        metric=metric,
        strategy=strategy,
        value=value,
        include_zero=include_zero,
        top_p_mode=top_p_mode,
        selection_eps=selection_eps,
        loss_scale=loss_scale,
        trajectory_k=trajectory_k,
        filter_type=filter_type,
    )
    if trajectory_k > 0:
        return _trajectory_baseline(r, int(trajectory_k))
    if get_strategy(strategy).level == "trajectory":
        return _trajectory_level(r, strategy, _value(value), loss_scale)
    source = _score_source(r, features, metric)
    return _group_level(r, s, source, metric, strategy, _value(value), include_zero, top_p_mode, selection_eps, loss_scale, filter_type)


def _keep_everything(num_prompts: int) -> FilterDecision:
    """``filter=none``: every group trains at full weight (a true no-filter arm, no setting checked)."""
    all_groups = np.arange(num_prompts, dtype=np.int64)
    return FilterDecision(all_groups, None, 1.0, {"filter/kept_count": float(num_prompts), "filter/kept_ratio": 1.0})


def _trajectory_baseline(r: np.ndarray, k: int) -> FilterDecision:
    """The paper's baseline: the top-k and bottom-k trajectories of every group, the loss unscaled."""
    mask = trajectory_filter(r, k)
    all_groups = np.arange(r.shape[0], dtype=np.int64)
    return FilterDecision(all_groups, mask, 1.0, {"filter/kept_ratio": float(mask.mean()), "filter/kept_count": float(mask.sum())})


def _trajectory_level(r: np.ndarray, strategy: str, value: Any, loss_scale: str) -> FilterDecision:
    """A trajectory-level strategy (``within_group``): every group trains, on the trajectories it keeps."""
    spec = get_strategy(strategy)
    mask = spec.fn(r, spec.check(value, strategy))
    kept_traj, total = int(mask.sum()), int(mask.size)
    per_group = mask.sum(axis=1)
    metrics = {
        "filter/kept_count": float(kept_traj),
        "filter/kept_ratio": float(mask.mean()) if total else 0.0,
        f"filter/{strategy}_keep_k": float(per_group.max()) if per_group.size else 0.0,
        f"filter/{strategy}_keep_ratio": float(per_group.max() / r.shape[1]) if per_group.size and r.shape[1] else 0.0,
    }
    scale = _loss_scale(kept_traj, total, loss_scale) if kept_traj else 1.0
    all_groups = np.arange(r.shape[0], dtype=np.int64)
    return FilterDecision(all_groups, mask, scale, metrics)


def _score_source(r: np.ndarray, features: Mapping[str, Any] | None, metric: str) -> np.ndarray:
    """The ``[P, G]`` values ``metric`` scores a group by: the returns, or the feature it needs."""
    need = required_feature(metric)
    if need is None:
        return r
    if features is None or need not in features:
        raise UserError(
            f"filter metric {metric!r} needs features[{need!r}], a [P, G] per-trajectory array; "
            "compute it from the rollout (see agentcollapse.filtering.required_feature)"
        )
    source = as_2d(features[need], f"features[{need!r}]")
    if source.shape != r.shape:
        raise UserError(f"features[{need!r}] has shape {source.shape} but returns {r.shape}; pass [P, G]")
    return source


def _group_level(
    r: np.ndarray,
    s: np.ndarray,
    source: np.ndarray,
    metric: str,
    strategy: str,
    value: Any,
    include_zero: bool,
    top_p_mode: str,
    selection_eps: float,
    loss_scale: str,
    filter_type: str,
) -> FilterDecision:
    """A group-level strategy: score each group from ``source``, keep the groups the strategy selects
    (none when no group carries task signal), with the kept groups' statistics beside all groups'."""
    num_prompts = r.shape[0]
    scores = group_scores(source, metric)
    kept = select_groups(scores, strategy, value, include_zero, top_p_mode, selection_eps, filter_type)
    if get_score(metric).zero_means_no_signal and np.all(np.abs(scores) <= ZERO_TOL):
        kept = kept[:0]  # docs/method.md section 5: no group carries task signal, so skip rather than regularise only
    metrics = {
        "filter/kept_count": float(kept.size),
        "filter/kept_ratio": float(kept.size / max(1, num_prompts)),
        "filter/zero_count": float(np.sum(np.abs(scores) <= ZERO_TOL)),
        "filter/all_success_mean": _mean(s),
        "filter/chosen_success_mean": _mean(s[kept]),
    }
    if r.shape[1] >= 2:  # the reward variance needs two rollouts per prompt
        rv = group_scores(r, "reward_variance")
        metrics["filter/all_rv_mean"] = _mean(rv)
        metrics["filter/chosen_rv_mean"] = _mean(rv[kept])
    metrics.update(_spread_metrics(source, kept))
    scale = _loss_scale(int(kept.size), num_prompts, loss_scale) if kept.size else 1.0
    return FilterDecision(kept, None, scale, metrics)
