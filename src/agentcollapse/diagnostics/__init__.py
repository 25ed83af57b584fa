"""Diagnostics for template collapse: the in-batch MI proxy (docs/method.md section 3) and a simulator.

Pure functions and small stateful helpers; no Lightning or Hydra. Samplers register by name
(``@register_sampler``); :func:`collapse_metrics` runs every registered one on a batch (but those it
is told to skip). :mod:`.copying` finds the reasoning copied from the observation (the nocopy samplers).
"""

from .collapse import BATCH_KEYS, RV_STAT_KEYS, SamplerOptions, collapse_metrics, reward_variance_stats, valid_thinking_counts
from .copying import MIN_COPY_WORDS, copied_runs, copied_token_mask, copied_words
from .cross_score import ProxyShare, cross_score, naive_cross_score, shared_cross_score
from .ema import EMA, ProxyEMAState
from .proxy import (
    PROXY_KEYS,
    column_equivalence,
    matched_marginal,
    proxy_metrics,
    zscore_with_sigma,
)
from .samplers import (
    ProxySample,
    SamplerSpec,
    first_turn_nocopy_sample,
    first_turn_sample,
    get_sampler,
    reasoning_ids,
    register_sampler,
    sampler_names,
    sampler_prefix,
    sampler_prefixes,
    trajectory_nocopy_sample,
    trajectory_sample,
)
from .simulator import SimulatorScorer, get_scorer, run_simulation, simulate

__all__ = [
    "BATCH_KEYS",
    "RV_STAT_KEYS",
    "SamplerOptions",
    "collapse_metrics",
    "reward_variance_stats",
    "valid_thinking_counts",
    "MIN_COPY_WORDS",
    "copied_runs",
    "copied_token_mask",
    "copied_words",
    "ProxyShare",
    "cross_score",
    "naive_cross_score",
    "shared_cross_score",
    "EMA",
    "ProxyEMAState",
    "PROXY_KEYS",
    "column_equivalence",
    "matched_marginal",
    "proxy_metrics",
    "zscore_with_sigma",
    "ProxySample",
    "SamplerSpec",
    "first_turn_nocopy_sample",
    "first_turn_sample",
    "get_sampler",
    "reasoning_ids",
    "register_sampler",
    "sampler_names",
    "sampler_prefix",
    "sampler_prefixes",
    "trajectory_nocopy_sample",
    "trajectory_sample",
    "SimulatorScorer",
    "get_scorer",
    "run_simulation",
    "simulate",
]
