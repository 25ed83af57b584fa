"""Per-batch collapse diagnostics: the MI-proxy family of every registered sampler and RV statistics.

Pure functions of (model, tokenizer, batch, state): no Lightning. The training callback
(``agentcollapse.lightning.diagnostics.CollapseDiagnostics``) owns the state (one
:class:`ProxyEMAState` per sampler, the sampler RNG) and decides on which steps to call
:func:`collapse_metrics`; :func:`reward_variance_stats` is cheap and runs every step.

Metric names: ``collapse_<sampler>_sample/<metric>`` for each sampler of
``agentcollapse.diagnostics.samplers`` (keys: ``PROXY_KEYS``, the EMA keys and
``valid_thinking_rate``, ``state_grounding``; the nocopy samplers add ``copied_token_frac``), plus
the batch-level keys of :data:`BATCH_KEYS`:
``collapse/valid_thinking_rate`` is the share of *all* turns with non-empty reasoning (the
authors' definition), and ``collapse/first_turn_num_total`` / ``_num_valid`` / ``_valid_rate``
count the first-turn traces before any ``num_samples`` cap.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agentcollapse.diagnostics.cross_score import PairMemo, ProxyShare, ScoreFn, cross_score, sequence_cross_score, shared_cross_score
from agentcollapse.diagnostics.ema import ProxyEMAState
from agentcollapse.diagnostics.proxy import column_equivalence, proxy_metrics
from agentcollapse.diagnostics.samplers import ProxySample, get_sampler, reasoning_ids, sampler_names, sampler_prefix
from agentcollapse.filtering import group_scores, rv_std_over_mean
from agentcollapse.models.context import encode
from agentcollapse.rollout.batch import RolloutBatch

__all__ = [
    "BATCH_KEYS",
    "RV_STAT_KEYS",
    "SamplerOptions",
    "collapse_metrics",
    "reward_variance_stats",
    "valid_thinking_counts",
]

RV_STAT_KEYS = ("collapse/rv_std_over_mean", "collapse/zero_rv_group_frac")
BATCH_KEYS = (
    "collapse/valid_thinking_rate",
    "collapse/first_turn_num_total",
    "collapse/first_turn_num_valid",
    "collapse/first_turn_valid_rate",
)


@dataclass(frozen=True)
class SamplerOptions:
    """How one sampler draws: ``num_samples`` (None = all) and with or without replacement."""

    num_samples: int | None = None
    replace: bool = False


def reward_variance_stats(batch: RolloutBatch) -> dict[str, float]:
    """Std(RV)/Mean(RV) and the share of zero-RV groups (RV = ddof=1 variance); {} when G < 2."""
    if batch.group_size < 2:
        return {}
    returns = batch.returns()
    rv = group_scores(returns, "reward_variance")
    # a variance <= 1e-12 counts as zero here (unchanged); the filter's 1e-10 applies to its scores
    return {
        "collapse/rv_std_over_mean": rv_std_over_mean(returns),
        "collapse/zero_rv_group_frac": float(np.mean(rv <= 1e-12)),
    }


def valid_thinking_counts(batch: RolloutBatch, encode_think: Any) -> tuple[int, int]:
    """(turns with non-empty re-tokenised reasoning, all turns) over every trajectory."""
    total = valid = 0
    for traj in batch.trajectories:
        for turn in traj.turns:
            total += 1
            valid += bool(reasoning_ids(turn, encode_think))
    return valid, total


def collapse_metrics(
    model: torch.nn.Module,
    tokenizer: Any,
    batch: RolloutBatch,
    emas: dict[str, ProxyEMAState],
    rng: np.random.Generator,
    batch_size: int = 64,
    trajectory_samples: int | None = None,
    *,
    first_turn_samples: int | None = None,
    trajectory_replace: bool = False,
    options: Mapping[str, SamplerOptions] | None = None,
    skip: Collection[str] = (),
    score: ScoreFn | None = None,
    autocast: torch.dtype | None = None,
    share: ProxyShare | None = None,
) -> dict[str, float]:
    """Every registered sampler's proxy metrics for one batch, named ``collapse_<name>_sample/<metric>``.
    The cross-scores come from ``model`` (cached, :func:`cross_score`), or from ``score`` where given
    (an inference engine, :func:`sequence_cross_score`).

    ``emas`` maps ``sampler_prefix(name)`` to that sampler's EMA state (created on first use).
    Sampler draws come from ``rng`` in registration order. ``trajectory_samples``,
    ``first_turn_samples`` and ``trajectory_replace`` set the built-in samplers' options, and those of
    every sampler registered to draw like one (``SamplerSpec.draws_like``: the nocopy variants); ``options`` (keyed by sampler name) overrides them or
    configures other samplers. ``skip``: registered samplers not to run.
    A sample's ``token_weights`` weight the cross-score sums and set its per-token lengths
    (:meth:`ProxySample.lengths`). A (context, trace) pair that several samplers draw runs one forward
    (``cross_score``'s memo). ``autocast``: the dtype the model's cross-scoring forwards run in (None: as loaded).
    ``share`` (data-parallel ranks): each rank cross-scores its share of the distinct contexts and the scores
    are gathered (:func:`shared_cross_score`), so every rank returns the same metrics at 1/N of the forwards.
    """
    opts = _sampler_options(first_turn_samples, trajectory_samples, trajectory_replace, options)
    memo: PairMemo = {}  # every sampler's pairs, scored once: the nocopy samplers reweight the plain ones'
    encode_think = lambda text: encode(tokenizer, text)  # noqa: E731
    valid, total = valid_thinking_counts(batch, encode_think)
    out: dict[str, float] = {"collapse/valid_thinking_rate": valid / total if total else 0.0}
    for name in sampler_names():
        if name in skip:
            continue
        prefix = sampler_prefix(name)
        o = opts.get(name, SamplerOptions())
        sample = get_sampler(name).fn(batch, encode_think, rng, num_samples=o.num_samples, replace=o.replace)
        out.update(_sample_stats(name, prefix, sample))
        if not sample.traces or len(sample.contexts) < 2:
            continue  # nothing to retrieve among: the metrics are undefined this step

        def score_columns(contexts: list[Sequence[int]], sample: ProxySample = sample) -> torch.Tensor:
            if score is None:
                return cross_score(
                    model, contexts, sample.traces, batch_size=batch_size, weights=sample.token_weights, memo=memo, autocast=autocast
                )
            return sequence_cross_score(score, contexts, sample.traces, weights=sample.token_weights, memo=memo)

        if share is None or share.world_size == 1:
            logp = score_columns(list(sample.contexts))
        else:
            logp = shared_cross_score(score_columns, sample.contexts, sample.traces, share)
        metrics = _proxy_with_ema(logp, sample, emas.setdefault(prefix, ProxyEMAState(decay=0.9)))
        out.update({f"{prefix}/{k}": float(v) for k, v in metrics.items()})
    return out


def _sampler_options(
    first_turn_samples: int | None,
    trajectory_samples: int | None,
    trajectory_replace: bool,
    options: Mapping[str, SamplerOptions] | None,
) -> dict[str, SamplerOptions]:
    """Each sampler's options: a built-in's from the diagnostics settings, shared by every sampler
    that draws like it (``SamplerSpec.draws_like``), then ``options`` over them."""
    builtin = {"first_turn": SamplerOptions(first_turn_samples), "trajectory": SamplerOptions(trajectory_samples, trajectory_replace)}
    drawn = {name: get_sampler(name).draws_like for name in sampler_names()}
    return {name: builtin[like] for name, like in drawn.items() if like in builtin} | dict(options or {})


def _sample_stats(name: str, prefix: str, sample: ProxySample) -> dict[str, float]:
    """What a sample says before any scoring: its reasoning and grounding rates (and the nocopy
    samplers' copied share); the first-turn sampler also counts its traces before any cap."""
    out = {f"{prefix}/valid_thinking_rate": float(sample.stats["valid_thinking_rate"])}
    for key in ("state_grounding", "copied_token_frac"):
        if key in sample.stats:
            out[f"{prefix}/{key}"] = float(sample.stats[key])
    if name == "first_turn":
        n_total, n_valid = sample.stats["num_candidates"], sample.stats["num_valid"]
        out["collapse/first_turn_num_total"] = float(n_total)
        out["collapse/first_turn_num_valid"] = float(n_valid)
        out["collapse/first_turn_valid_rate"] = float(n_valid / n_total) if n_total else 0.0
    return out


def _proxy_with_ema(logp: torch.Tensor, sample: ProxySample, ema: ProxyEMAState) -> dict[str, Any]:
    """The proxy's metrics of one sample's cross-score matrix, and their EMAs (``ema`` is updated)."""
    z_len = torch.tensor(sample.lengths(), dtype=torch.float32)
    row_col = torch.tensor(sample.row_col, dtype=torch.long)
    equiv = column_equivalence(sample.contexts)
    metrics = proxy_metrics(logp, z_len, row_col, equiv)
    return ema.update(logp, z_len, row_col, metrics, equiv)
