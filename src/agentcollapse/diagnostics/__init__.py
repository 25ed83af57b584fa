"""Diagnostics for template collapse: the in-batch MI proxy (METHOD.md section 3) and a simulator.

Pure functions and small stateful helpers; no Lightning or Hydra.
"""

from .cross_score import cross_score, naive_cross_score
from .ema import EMA, ProxyEMAState
from .proxy import (
    PROXY_KEYS,
    column_equivalence,
    matched_marginal,
    proxy_metrics,
    zscore_with_sigma,
)
from .samplers import ProxySample, first_turn_sample, trajectory_sample
from .simulator import SimulatorScorer, get_scorer, run_simulation, simulate

__all__ = [
    "cross_score",
    "naive_cross_score",
    "EMA",
    "ProxyEMAState",
    "PROXY_KEYS",
    "column_equivalence",
    "matched_marginal",
    "proxy_metrics",
    "zscore_with_sigma",
    "ProxySample",
    "first_turn_sample",
    "trajectory_sample",
    "SimulatorScorer",
    "get_scorer",
    "run_simulation",
    "simulate",
]
