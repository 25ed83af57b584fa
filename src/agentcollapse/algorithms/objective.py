"""The RL objective of one micro-batch, written once: the update trains on it and the gradient-bucket
analysis takes its task and regulariser parts apart.

    total = weight * (pg_loss + kl_coef * KL - entropy_coef * entropy + value_loss)
    task = weight * pg_loss          regulariser = weight * (kl_coef * KL - entropy_coef * entropy)

Each term is aggregated over the micro-batch's response tokens with the algorithm's loss aggregation;
``weight`` (:func:`micro_batch_weight`) makes the sum over micro-batches equal the loss of the whole
batch aggregated in one piece; :func:`aggregation_pair` writes the same weighting as a (sum, count)
pair, which is how the update logs its losses so that they do not depend on the micro-batching.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from agentcollapse.algorithms.kl import kl_penalty
from agentcollapse.algorithms.losses import POLICY_LOSSES, PolicyLossOutput, aggregate_loss, masked_mean, value_loss
from agentcollapse.algorithms.presets import AlgorithmPreset

__all__ = ["ObjectiveTerms", "aggregation_pair", "micro_batch_weight", "rl_objective"]


@dataclass
class ObjectiveTerms:
    """One micro-batch's weighted loss terms (with autograd graphs) and detached statistics."""

    total: Tensor
    task: Tensor
    regulariser: Tensor
    policy: PolicyLossOutput  # the unweighted policy loss (algo.policy_loss) and its clip statistics
    entropy: Tensor  # detached mean token entropy over response tokens
    kl: Tensor | None  # detached aggregated KL (None when kl_coef = 0)
    value_loss: Tensor | None  # detached critic loss (None without a critic)


def aggregation_pair(mode: str, value: float, mb_tokens: float, mb_seqs: int) -> tuple[float, float]:
    """A micro-batch's ``value`` aggregated with ``mode`` over its tokens, as a (sum, count) pair: summed
    over any set of micro-batches, sum / count is their value aggregated in one piece, each micro-batch
    weighted as :func:`micro_batch_weight` weights its loss in the gradient. ``token-mean`` counts
    tokens; the ``seq-mean-*`` modes count sequences; ``seq-mean-token-sum-norm`` (a sum over the
    micro-batch's sequences divided by a constant) is averaged over sequences, as the gradient does."""
    if mode == "token-mean":
        return value * mb_tokens, float(mb_tokens)
    if mode == "seq-mean-token-sum-norm":
        return value, float(mb_seqs)
    return value * mb_seqs, float(mb_seqs)


def micro_batch_weight(mode: str, mb_tokens: float, total_tokens: float, mb_seqs: int, total_seqs: int) -> float:
    """Weight of a micro-batch's aggregated loss so the sum over micro-batches equals the loss of the
    whole batch aggregated in one piece (``seq-mean-token-sum-norm`` aggregates a *sum* over
    sequences, divided by the constant length, so it is averaged over all sequences here): a unit
    loss's :func:`aggregation_pair` sum for the micro-batch over the whole batch's count."""
    share, _ = aggregation_pair(mode, 1.0, mb_tokens, mb_seqs)
    _, whole = aggregation_pair(mode, 1.0, total_tokens, total_seqs)
    return share / whole


def rl_objective(
    algo: AlgorithmPreset,
    entropy: Tensor,
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    norm_length: int,
    weight: float = 1.0,
    ref_logp: Tensor | None = None,
    values: Tensor | None = None,
    value_targets: Tensor | None = None,
    old_values: Tensor | None = None,
    token_weights: Tensor | None = None,
) -> ObjectiveTerms:
    """The objective of one micro-batch: the policy's token ``entropy [B, T]`` (with a graph when
    ``algo.entropy_coef > 0``), ``logp``/``old_logp`` ``[B, T]`` token log-probs, token ``advantages
    [B, T]`` and the response ``mask [B, T]`` (``algorithms.response_token_stats`` gives the first two).

    ``ref_logp`` is needed when ``algo.kl_coef > 0``; ``values``/``value_targets``/``old_values`` when
    the algorithm trains a critic; ``token_weights`` scale the policy loss per token (the rollout
    correction's importance weights). With ``entropy_coef = 0`` the entropy is only logged.
    """
    agg = algo.loss_agg_mode
    pl = POLICY_LOSSES.get(algo.policy_loss).compute(logp, old_logp, advantages, mask, algo, agg, norm_length, token_weights)
    # The total is summed in one fixed order (policy, entropy, KL, critic) so it is bit-stable.
    total = pl.loss
    regulariser = pl.loss.new_zeros(())
    if algo.entropy_coef > 0:
        bonus = algo.entropy_coef * aggregate_loss(entropy, mask, agg, norm_length=norm_length)
        total = total - bonus
        regulariser = regulariser - bonus
    kl = None
    if algo.kl_coef > 0:
        if ref_logp is None:
            raise ValueError("kl_coef > 0 needs the reference log-probs (ref_logp)")
        kl = aggregate_loss(kl_penalty(logp, ref_logp, algo.kl_estimator), mask, agg, norm_length=norm_length)
        total = total + algo.kl_coef * kl
        regulariser = regulariser + algo.kl_coef * kl
    critic = None
    if values is not None:
        if value_targets is None or old_values is None:
            raise ValueError("a critic loss needs value_targets and old_values")
        critic, _ = value_loss(values, value_targets, old_values, mask)
        total = total + critic
    return ObjectiveTerms(
        total=total * weight,
        task=pl.loss * weight,
        regulariser=regulariser * weight,
        policy=pl,
        entropy=masked_mean(entropy.detach(), mask).detach(),
        kl=None if kl is None else kl.detach(),
        value_loss=None if critic is None else critic.detach(),
    )
