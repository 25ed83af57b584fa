"""SNR-aware filtering (METHOD.md section 5): score groups, keep a subset, diagnose RV spread."""

from agentcollapse.filtering.snr import (
    METRICS,
    SCALE_MODES,
    STRATEGIES,
    TOP_P_MODES,
    ZERO_TOL,
    group_scores,
    interpret_rv_ratio,
    loss_scale,
    rv_quantile_buckets,
    rv_std_over_mean,
    select_groups,
    trajectory_filter,
)

__all__ = [
    "METRICS",
    "SCALE_MODES",
    "STRATEGIES",
    "TOP_P_MODES",
    "ZERO_TOL",
    "group_scores",
    "interpret_rv_ratio",
    "loss_scale",
    "rv_quantile_buckets",
    "rv_std_over_mean",
    "select_groups",
    "trajectory_filter",
]
