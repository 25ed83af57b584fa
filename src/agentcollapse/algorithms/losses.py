"""Loss aggregation, the PPO clipped policy loss, the clipped value loss and token entropy."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from agentcollapse.models.logprobs import CHUNK_ELEMENTS, position_blocks
from agentcollapse.registry import Registry

__all__ = [
    "LOSS_AGG_MODES",
    "PolicyLossOutput",
    "aggregate_loss",
    "entropy_from_logits",
    "masked_mean",
    "policy_loss",
    "register_loss_agg",
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
    clipfrac: Tensor  # fraction of valid tokens where the PPO clip was active
    approx_kl: Tensor  # mean over valid tokens of old_logprob - logprob (k1 of old vs new)
    lower_clipfrac: Tensor  # fraction of valid tokens where the dual clip (A < 0) was active


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
    if logprob.shape != old_logprob.shape or logprob.shape != mask.shape:
        raise ValueError(
            "logprob, old_logprob and mask must share one shape; got "
            f"{tuple(logprob.shape)}, {tuple(old_logprob.shape)}, {tuple(mask.shape)}"
        )
    if advantages.dim() == logprob.dim() - 1:
        advantages = advantages.unsqueeze(-1)
    advantages = advantages.expand_as(logprob)
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
