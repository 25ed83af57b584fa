"""Loss aggregation, the policy losses (PPO's clipped surrogate, GSPO, CISPO, SAPO), the clipped value
loss and token entropy."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from agentcollapse.models.logprobs import CHUNK_ELEMENTS, position_blocks, token_logprobs
from agentcollapse.registry import Registry

__all__ = [
    "DEFAULT_POLICY_LOSS",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "PolicyLoss",
    "PolicyLossOutput",
    "aggregate_loss",
    "cispo_policy_loss",
    "entropy_from_logits",
    "gspo_policy_loss",
    "masked_mean",
    "policy_loss",
    "response_token_stats",
    "register_loss_agg",
    "register_policy_loss",
    "sapo_policy_loss",
    "value_loss",
]

LOSS_AGG_MODES: Registry = Registry("loss aggregation mode")
"""name -> ``f(masked_loss [B, T], mask as float [B, T], norm_length) -> scalar``; add one with
``@register_loss_agg``. Every mode sees at least one valid token (the empty case is handled once)."""
register_loss_agg = LOSS_AGG_MODES.register


@register_loss_agg("token-mean")
def _token_mean(masked: Tensor, m: Tensor, norm_length: int | None) -> Tensor:
    return masked.sum() / m.sum()


@register_loss_agg("seq-mean-token-mean")
def _seq_mean_token_mean(masked: Tensor, m: Tensor, norm_length: int | None) -> Tensor:
    tokens = m.sum(dim=-1)
    return (masked.sum(dim=-1) / tokens.clamp(min=1))[tokens > 0].mean()


@register_loss_agg("seq-mean-token-sum")
def _seq_mean_token_sum(masked: Tensor, m: Tensor, norm_length: int | None) -> Tensor:
    return masked.sum(dim=-1)[m.sum(dim=-1) > 0].mean()


@register_loss_agg("seq-mean-token-sum-norm")
def _seq_mean_token_sum_norm(masked: Tensor, m: Tensor, norm_length: int | None) -> Tensor:
    length = m.shape[-1] if norm_length is None else norm_length
    if length <= 0:
        raise ValueError(f"norm_length must be positive, got {length}")
    return masked.sum() / length


def _masked(x: Tensor, mask: Tensor) -> Tensor:
    """x * mask, with masked entries exactly 0 even where x is inf/NaN (e.g. padding)."""
    m = mask.to(x.dtype)
    return torch.where(m != 0, x * m, torch.zeros_like(x))


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of x over valid (mask==1) entries; a differentiable 0 when there are none."""
    total = _masked(x, mask).sum()
    n = mask.to(x.dtype).sum()
    return total / n if n > 0 else total


def aggregate_loss(loss_mat: Tensor, mask: Tensor, mode: str, norm_length: int | None = None) -> Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar over the valid (mask==1) tokens.

    - ``token-mean``: sum(loss*mask) / sum(mask); every token weighs the same (verl default, DAPO).
    - ``seq-mean-token-mean``: mean over sequences of each sequence's token mean (original GRPO);
      sequences with no valid token are left out.
    - ``seq-mean-token-sum``: mean over sequences (with >= 1 valid token) of each token sum.
    - ``seq-mean-token-sum-norm``: sum(loss*mask) / norm_length, norm_length defaulting to
      mask.shape[-1] (the max response length). This is Dr. GRPO's constant normaliser: it removes
      the 1/|o| length bias of per-sequence means. Like verl it divides the batch-wide sum (not the
      per-sequence mean) by the constant, so keep T (or pass norm_length) fixed across steps.

    With no valid token at all it returns a differentiable 0, never NaN.
    """
    aggregate = LOSS_AGG_MODES.get(mode)
    if loss_mat.shape != mask.shape:
        raise ValueError(f"loss_mat and mask shapes differ: {tuple(loss_mat.shape)} vs {tuple(mask.shape)}")
    masked = _masked(loss_mat, mask)
    m = mask.to(loss_mat.dtype)
    if m.sum() == 0:
        return masked.sum() * 0.0
    return aggregate(masked, m, norm_length)


@dataclass
class PolicyLossOutput:
    """Result of :func:`policy_loss`: the scalar loss plus detached diagnostics (float scalars)."""

    loss: Tensor
    clipfrac: Tensor  # fraction of valid tokens where the loss's clip (or SAPO's gate) was active
    approx_kl: Tensor  # mean over valid tokens of old_logprob - logprob (k1 of old vs new)
    lower_clipfrac: Tensor  # fraction of valid tokens where the dual clip (A < 0) was active (0: no dual clip)


def policy_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    dual_clip: bool = True,
    agg_mode: str = "token-mean",
    norm_length: int | None = None,
    token_weights: Tensor | None = None,
) -> PolicyLossOutput:
    """PPO clipped surrogate with decoupled clip range and optional dual clip.

    ratio = exp(clamp(l - l_old, -20, 20)); pg1 = -A * ratio; pg2 = -A * clip(ratio, 1 - clip_low,
    1 + clip_high); loss = max(pg1, pg2). clip_high > clip_low is DAPO's clip-higher, which lets
    low-probability tokens grow and so slows entropy collapse. Dual clip (Ye et al. 2020): for
    A < 0 the loss is further capped at -A * clip_ratio_c so one token with a huge ratio cannot
    dominate. ``advantages`` is [B] (one per sequence, broadcast over tokens) or [B, T].
    ``token_weights`` (detached, [B, T]) scale each token's loss: the rollout correction's
    importance weights (``algorithms.correction``).
    """
    advantages = _check_shapes(logprob, old_logprob, advantages, mask)
    if dual_clip and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 for the dual clip, got {clip_ratio_c}")

    log_ratio = torch.clamp(logprob - old_logprob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clipped = torch.maximum(pg1, pg2)
    if dual_clip:
        pg3 = -advantages * clip_ratio_c
        negative = advantages < 0
        losses = torch.where(negative, torch.minimum(clipped, pg3), clipped)
        lower_active = (clipped > pg3) & negative
    else:
        losses = clipped
        lower_active = torch.zeros_like(mask, dtype=torch.bool)
    if token_weights is not None:
        losses = losses * token_weights

    loss = aggregate_loss(losses, mask, agg_mode, norm_length)
    with torch.no_grad():
        clipfrac = masked_mean((pg2 > pg1).to(logprob.dtype), mask)
        approx_kl = masked_mean(-log_ratio, mask)
        lower_clipfrac = masked_mean(lower_active.to(logprob.dtype), mask)
    return PolicyLossOutput(
        loss=loss,
        clipfrac=clipfrac.detach(),
        approx_kl=approx_kl.detach(),
        lower_clipfrac=lower_clipfrac.detach(),
    )


def _check_shapes(logprob: Tensor, old_logprob: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """The advantages broadcast to ``logprob``'s [B, T] shape, after checking the shapes agree."""
    if logprob.shape != old_logprob.shape or logprob.shape != mask.shape:
        raise ValueError(
            "logprob, old_logprob and mask must share one shape; got "
            f"{tuple(logprob.shape)}, {tuple(old_logprob.shape)}, {tuple(mask.shape)}"
        )
    if advantages.dim() == logprob.dim() - 1:
        advantages = advantages.unsqueeze(-1)
    return advantages.expand_as(logprob)


def _finish(
    losses: Tensor,
    mask: Tensor,
    agg_mode: str,
    norm_length: int | None,
    token_weights: Tensor | None,
    active: Tensor,
    log_ratio: Tensor,
) -> PolicyLossOutput:
    """Weight, aggregate and summarise a per-token policy loss (no dual clip: lower_clipfrac is 0)."""
    if token_weights is not None:
        losses = losses * token_weights
    loss = aggregate_loss(losses, mask, agg_mode, norm_length)
    with torch.no_grad():
        clipfrac = masked_mean(active.to(log_ratio.dtype), mask)
        approx_kl = masked_mean(-log_ratio, mask)
    return PolicyLossOutput(
        loss=loss,
        clipfrac=clipfrac.detach(),
        approx_kl=approx_kl.detach(),
        lower_clipfrac=torch.zeros_like(clipfrac).detach(),
    )


def gspo_policy_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    agg_mode: str = "seq-mean-token-mean",
    norm_length: int | None = None,
    token_weights: Tensor | None = None,
) -> PolicyLossOutput:
    """GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"), its GSPO-token form as verl's
    ``compute_policy_loss_gspo`` computes it.

    s_i = exp(mean over sequence i's valid tokens of (l - l_old)) is the sequence-level ratio (the
    geometric mean of the token ratios); per token s_i,t = sg[s_i] * exp(l - sg[l]), whose value is
    s_i and whose gradient is s_i * grad l. log s_i,t is clamped at 10 (verl). pg1 = -A * s_i,t;
    pg2 = -A * clip(s_i,t, 1 - clip_low, 1 + clip_high); loss = max(pg1, pg2): the clip acts on the
    whole sequence. GSPO's own aggregation is ``seq-mean-token-mean`` (the default; verl forces it).
    No dual clip. ``clipfrac`` is the share of valid tokens in sequences whose ratio was clipped.
    """
    advantages = _check_shapes(logprob, old_logprob, advantages, mask)
    m = mask.to(logprob.dtype)
    log_ratio = _masked(logprob - old_logprob, mask)  # padding contributes exactly 0, even if inf/NaN
    seq_log_ratio = log_ratio.sum(dim=-1) / m.sum(dim=-1).clamp(min=1)
    log_s = torch.clamp(logprob - logprob.detach() + seq_log_ratio.detach().unsqueeze(-1), max=10.0)
    s = torch.exp(log_s)
    pg1 = -advantages * s
    pg2 = -advantages * torch.clamp(s, 1.0 - clip_low, 1.0 + clip_high)
    losses = torch.maximum(pg1, pg2)
    return _finish(losses, mask, agg_mode, norm_length, token_weights, pg2 > pg1, torch.clamp(log_ratio, -20.0, 20.0))


def cispo_policy_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_high: float = 4.0,
    agg_mode: str = "token-mean",
    norm_length: int | None = None,
    token_weights: Tensor | None = None,
) -> PolicyLossOutput:
    """CISPO (MiniMax-M1, 2025): loss = -sg[min(r, 1 + clip_high)] * A * l per token, r = exp(l - l_old).

    The importance weight is clipped and detached; every token keeps its log-prob gradient (a clipped
    token's gradient is scaled, never zeroed as PPO's clip does). No lower bound, as the paper
    (which sets its epsilon_low out of reach) and TRL (``loss_type="cispo"``, cap ``epsilon_high``,
    recommended 5.0 after ScaleRL) do: the default clip_high 4.0 is that cap of 5. The loss's value
    is not a surrogate of the return (it is -A * l weighted); only its gradient matters.
    ``clipfrac`` is the share of valid tokens whose weight was capped.
    """
    advantages = _check_shapes(logprob, old_logprob, advantages, mask)
    log_ratio = torch.clamp(logprob - old_logprob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    weight = torch.clamp(ratio, max=1.0 + clip_high).detach()
    losses = -weight * advantages * logprob
    return _finish(losses, mask, agg_mode, norm_length, token_weights, ratio > 1.0 + clip_high, log_ratio)


def sapo_policy_loss(
    logprob: Tensor,
    old_logprob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    agg_mode: str = "seq-mean-token-mean",
    norm_length: int | None = None,
    token_weights: Tensor | None = None,
) -> PolicyLossOutput:
    """SAPO (Soft Adaptive Policy Optimization, Qwen 2025), as verl's ``compute_policy_loss_sapo`` and
    TRL's ``loss_type="sapo"`` compute it.

    r = exp(clamp(l - l_old, -20, 20)); tau = tau_pos where A > 0, else tau_neg; the soft gate
    f(r) = sigmoid(tau * (r - 1)) * 4 / tau replaces the hard clip: loss = -f(r) * A. Its gradient is
    w * r * A * grad l with w = 4 p (1 - p), p = sigmoid(tau * (r - 1)): w = 1 on-policy (PPO's
    gradient), decaying smoothly as r leaves 1. The paper's objective is ``seq-mean-token-mean``
    (the default; verl forces it). ``clipfrac`` is the gate's mean attenuation 1 - w over valid tokens
    (0 on-policy, towards 1 as the gate shuts); verl logs 0 here.
    """
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"SAPO temperatures must be > 0, got tau_pos={tau_pos}, tau_neg={tau_neg}")
    advantages = _check_shapes(logprob, old_logprob, advantages, mask)
    log_ratio = torch.clamp(logprob - old_logprob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    tau = torch.where(advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    p = torch.sigmoid(tau * (ratio - 1.0))
    losses = -p * (4.0 / tau) * advantages
    with torch.no_grad():
        attenuation = 1.0 - 4.0 * p * (1.0 - p)
    return _finish(losses, mask, agg_mode, norm_length, token_weights, attenuation, log_ratio)


class PolicyLossSettings(Protocol):
    """The algorithm settings a policy loss reads (``AlgorithmPreset`` has them all)."""

    clip_low: float
    clip_high: float
    clip_ratio_c: float
    dual_clip: bool
    sapo_tau_pos: float
    sapo_tau_neg: float


PolicyLossFn = Callable[..., PolicyLossOutput]


@dataclass(frozen=True)
class PolicyLoss:
    """A registered policy loss: ``compute(logprob, old_logprob, advantages, mask, settings, agg_mode,
    norm_length, token_weights)`` and the algorithm settings it brings as defaults when chosen (an
    explicit setting still wins)."""

    compute: PolicyLossFn
    defaults: Mapping[str, Any] = field(default_factory=dict)


POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss")
"""name -> :class:`PolicyLoss` (``algorithm.policy_loss``), as verl's ``register_policy_loss``."""
DEFAULT_POLICY_LOSS = "clipped"


def register_policy_loss(name: str, **defaults: Any) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: register ``f(logprob, old_logprob, advantages, mask, settings, agg_mode, norm_length,
    token_weights) -> PolicyLossOutput`` under ``name`` with the settings it defaults."""

    def wrap(fn: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSSES.add(name, PolicyLoss(fn, dict(defaults)))
        return fn

    return wrap


@register_policy_loss(DEFAULT_POLICY_LOSS)
def _clipped(lp, old, adv, mask, s: PolicyLossSettings, agg_mode, norm_length, token_weights) -> PolicyLossOutput:
    return policy_loss(lp, old, adv, mask, s.clip_low, s.clip_high, s.clip_ratio_c, s.dual_clip, agg_mode, norm_length, token_weights)


# GSPO paper (v2) section 5.1: clip range 3e-4 / 4e-4; its objective is a per-sequence token mean.
@register_policy_loss("gspo", clip_low=3e-4, clip_high=4e-4, loss_agg_mode="seq-mean-token-mean", dual_clip=False)
def _gspo(lp, old, adv, mask, s: PolicyLossSettings, agg_mode, norm_length, token_weights) -> PolicyLossOutput:
    return gspo_policy_loss(lp, old, adv, mask, s.clip_low, s.clip_high, agg_mode, norm_length, token_weights)


# CISPO: the paper normalises by all tokens of the batch (token-mean); TRL recommends a cap of 5.0.
@register_policy_loss("cispo", clip_high=4.0, loss_agg_mode="token-mean", dual_clip=False)
def _cispo(lp, old, adv, mask, s: PolicyLossSettings, agg_mode, norm_length, token_weights) -> PolicyLossOutput:
    return cispo_policy_loss(lp, old, adv, mask, s.clip_high, agg_mode, norm_length, token_weights)


# SAPO: tau_pos 1.0, tau_neg 1.05 (the preset's sapo_tau_*: TRL's and verl's defaults).
@register_policy_loss("sapo", loss_agg_mode="seq-mean-token-mean", dual_clip=False)
def _sapo(lp, old, adv, mask, s: PolicyLossSettings, agg_mode, norm_length, token_weights) -> PolicyLossOutput:
    return sapo_policy_loss(lp, old, adv, mask, s.sapo_tau_pos, s.sapo_tau_neg, agg_mode, norm_length, token_weights)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy -sum_v p_v log p_v of softmax(logits) over the last (vocabulary) axis.

    Computed from log_softmax (logsumexp-stable), so huge logits and -inf (banned) tokens give
    finite values and finite gradients. A chunk of positions at a time (``CHUNK_ELEMENTS``), each
    under activation checkpointing when a gradient is needed: at a real vocabulary the softmax of a
    whole batch would otherwise be kept for the backward (gigabytes).
    """
    if logits.dim() != 3 or logits.shape[0] * logits.shape[1] * logits.shape[2] <= CHUNK_ELEMENTS:
        return _dense_entropy(logits)
    keep_graph = torch.is_grad_enabled() and logits.requires_grad
    parts = [
        checkpoint(_dense_entropy, block, use_reentrant=False) if keep_graph else _dense_entropy(block)
        for _, _, block in position_blocks(logits)
    ]
    return torch.cat(parts).reshape(logits.shape[:-1])


def response_token_stats(
    head: Callable[[Tensor], Tensor],
    hidden: Tensor,
    targets: Tensor,
    mask: Tensor,
    entropy: bool = True,
    entropy_grad: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Token log-probs of ``targets`` [B, T] and the policy's entropies [B, T] from the final hidden
    states ``hidden`` [B, T, d] that predict them, through the output ``head`` (hidden -> logits), at
    the positions ``mask`` selects only; 0 elsewhere (``entropy=False``: no entropies;
    ``entropy_grad=False``: entropies without a graph, for logging).

    In a multi-turn sequence most positions after the first response are observation tokens, which
    no loss reads: the head and the softmax over the vocabulary run on the response tokens packed
    into one row instead of every position (measured: three quarters of the tiny FrozenLake policy's
    head positions were observation tokens). A mask with no position still runs the first one, so the
    loss reaches the weights and a data-parallel padding micro-batch backwards like the others.
    """
    rows, cols = mask.nonzero(as_tuple=True)
    if len(rows) == 0:
        rows, cols = (torch.zeros(1, dtype=torch.long, device=mask.device),) * 2
    logits = head(hidden[rows, cols])[None]  # [1, N, V]
    logp = token_logprobs(logits, targets[rows, cols][None])[0]
    out = logp.new_zeros(mask.shape).index_put((rows, cols), logp)
    if not entropy:
        return out, None
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        ent = entropy_from_logits(logits)[0]
    return out, ent.new_zeros(mask.shape).index_put((rows, cols), ent)


def _dense_entropy(logits: Tensor) -> Tensor:
    low_precision = logits.dtype in (torch.float16, torch.bfloat16)
    logp = torch.log_softmax(logits.float() if low_precision else logits, dim=-1)
    p = logp.exp()
    safe_logp = logp.clamp(min=torch.finfo(logp.dtype).min)
    return -(p * safe_logp).sum(dim=-1).to(logits.dtype)


def value_loss(
    values: Tensor,
    returns: Tensor,
    old_values: Tensor,
    mask: Tensor,
    clip_range: float = 0.2,
    agg_mode: str = "token-mean",
) -> tuple[Tensor, Tensor]:
    """Clipped critic loss 0.5 * max((V - R)^2, (V_clip - R)^2), V_clip = clip(V, V_old +- range).

    The clip keeps the new value near the rollout-time value, as PPO does for the policy. Returns
    (loss, clipfrac) where clipfrac is the fraction of valid tokens where the clipped term won.
    """
    v_clipped = torch.clamp(values, old_values - clip_range, old_values + clip_range)
    l1 = (values - returns).square()
    l2 = (v_clipped - returns).square()
    loss = 0.5 * aggregate_loss(torch.maximum(l1, l2), mask, agg_mode)
    with torch.no_grad():
        clipfrac = masked_mean((l2 > l1).to(values.dtype), mask)
    return loss, clipfrac.detach()
