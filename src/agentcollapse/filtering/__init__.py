"""SNR-aware filtering (docs/method.md section 5): score groups, keep a subset, diagnose RV spread.

- :mod:`.scores`: the score registry (``@register_score``) and :func:`group_scores`.
- :mod:`.strategies`: the strategy registry (``@register_strategy``), :func:`select_groups`,
  the trajectory-level filters.
- :mod:`.decide`: :func:`decide`, the whole per-batch filter decision, and :func:`check_settings`.
- :mod:`.snr`: loss scaling, Std(RV)/Mean(RV), RV buckets for the gradient analysis.

Semantics follow the authors' code; ``docs/parity.md`` lists what matches and what differs.
"""

from agentcollapse.filtering.decide import FilterDecision, check_settings, decide
from agentcollapse.filtering.scores import (
    DEFAULT_METRIC,
    FEATURES,
    METRICS,
    ZERO_TOL,
    ScoreSpec,
    get_score,
    group_scores,
    register_score,
    required_feature,
    score_names,
)
from agentcollapse.filtering.snr import (
    BUCKET_MODES,
    RV_EDGES,
    SCALE_MODES,
    groups_with_signal,
    interpret_rv_ratio,
    loss_scale,
    rv_buckets,
    rv_quantile_buckets,
    rv_std_over_mean,
)
from agentcollapse.filtering.strategies import (
    FILTER_TYPES,
    STRATEGIES,
    TOP_P_MODES,
    SelectContext,
    StrategySpec,
    get_strategy,
    register_strategy,
    select_groups,
    strategy_names,
    trajectory_filter,
    within_group_mask,
)

__all__ = [
    "BUCKET_MODES",
    "DEFAULT_METRIC",
    "FEATURES",
    "FILTER_TYPES",
    "FilterDecision",
    "METRICS",
    "RV_EDGES",
    "SCALE_MODES",
    "STRATEGIES",
    "ScoreSpec",
    "SelectContext",
    "StrategySpec",
    "TOP_P_MODES",
    "ZERO_TOL",
    "check_settings",
    "decide",
    "get_score",
    "get_strategy",
    "group_scores",
    "groups_with_signal",
    "interpret_rv_ratio",
    "loss_scale",
    "register_score",
    "register_strategy",
    "required_feature",
    "rv_buckets",
    "rv_quantile_buckets",
    "rv_std_over_mean",
    "score_names",
    "select_groups",
    "strategy_names",
    "trajectory_filter",
    "within_group_mask",
]
