"""Advantage estimators: group-relative (GRPO, Dr. GRPO) and token-level GAE (PPO).

Plain functions on torch tensors (the role of verl's ``core_algos``). Callers pass detached tensors;
nothing here needs gradients. See docs/method.md section 6.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from agentcollapse.registry import Registry

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "compute_group_advantages",
    "dr_grpo_advantages",
    "gae_advantages",
    "grpo_advantages",
    "group_advantages",
    "masked_whiten",
    "whiten_across",
    "register_adv_est",
]

ADVANTAGE_ESTIMATORS: Registry = Registry("advantage estimator")
"""Group-based estimators ``f(returns[P, G]) -> advantages[P, G]``; add one with ``@register_adv_est``.
GAE (PPO) is token-level, needs a critic and lives apart (``gae_advantages``)."""
register_adv_est = ADVANTAGE_ESTIMATORS.register


@register_adv_est("grpo")
def grpo_advantages(returns: Tensor, eps: float = 1e-6, normalize_std: bool = True) -> Tensor:
    """Group-normalised advantages A = (R - mean_g) / (std_g + eps) for ``returns[P, G]``.

    Each row is the G rollouts of one prompt. std is unbiased (ddof=1), as in GRPO/verl. A group of
    size 1 has no baseline and gets 0. A group whose returns are all equal gets exactly 0 (no task
    signal; see docs/method.md section 4). ``normalize_std=False`` is Dr. GRPO: mean-centred only, which
    removes the per-prompt 1/std reweighting that favours low-variance prompts.
    """
    if returns.dim() != 2:
        raise ValueError(f"returns must be [P, G], got shape {tuple(returns.shape)}")
    P, G = returns.shape
    if G < 2:
        return torch.zeros_like(returns)
    mean = returns.mean(dim=-1, keepdim=True)
    adv = returns - mean
    if normalize_std:
        std = returns.std(dim=-1, correction=1, keepdim=True)
        adv = adv / (std + eps)
    # Constant groups: force exact zeros (the float mean can differ from R by one ulp).
    constant = returns.amax(dim=-1, keepdim=True) == returns.amin(dim=-1, keepdim=True)
    return torch.where(constant, torch.zeros_like(adv), adv)


@register_adv_est("dr_grpo")
def dr_grpo_advantages(returns: Tensor) -> Tensor:
    """Dr. GRPO advantages for ``returns[P, G]``: R - mean_g, no division by the group std
    (Liu et al. 2025, "Understanding R1-Zero-Like Training")."""
    return grpo_advantages(returns, normalize_std=False)


def group_advantages(returns: Tensor, group_ids: Tensor, eps: float = 1e-6, normalize_std: bool = True) -> Tensor:
    """Flat form of :func:`grpo_advantages` for ragged groups: ``returns[N]`` with ``group_ids[N]``
    (long; any values, need not be contiguous). Same per-group math: unbiased std, size-1 groups
    and constant groups give exactly 0, ``normalize_std=False`` gives Dr. GRPO."""
    if returns.dim() != 1 or group_ids.shape != returns.shape:
        raise ValueError(f"returns and group_ids must both be [N]; got {tuple(returns.shape)} and {tuple(group_ids.shape)}")
    if returns.numel() == 0:
        return torch.zeros_like(returns)
    _, inv = torch.unique(group_ids, return_inverse=True)
    K = int(inv.max().item()) + 1
    zeros = torch.zeros(K, dtype=returns.dtype, device=returns.device)
    count = zeros.index_add(0, inv, torch.ones_like(returns))
    mean = zeros.index_add(0, inv, returns) / count
    adv = returns - mean[inv]
    if normalize_std:
        sq = zeros.index_add(0, inv, adv * adv)
        var = sq / (count - 1).clamp(min=1)
        adv = adv / (var.sqrt()[inv] + eps)
    gmax = zeros.scatter_reduce(0, inv, returns, reduce="amax", include_self=False)
    gmin = zeros.scatter_reduce(0, inv, returns, reduce="amin", include_self=False)
    zero_group = (count < 2) | (gmax == gmin)
    return torch.where(zero_group[inv], torch.zeros_like(adv), adv)


def gae_advantages(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0, lam: float = 1.0) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over the valid (mask==1) tokens of ``[B, T]`` tensors.

    Masked positions (prompt/observation tokens between turns in a multi-turn trajectory) are
    skipped: the recursion jumps over them, carrying the next valid token's value and GAE, as verl
    does for multi-turn. Rewards at masked positions are ignored (credit rewards on a valid token,
    e.g. the last one). The value after the last valid token is 0. Returns ``(advantages, returns)``
    with returns = advantages + values; both are 0 at masked positions. Not whitened: see
    :func:`masked_whiten`.
    """
    if not (rewards.shape == values.shape == mask.shape) or rewards.dim() != 2:
        raise ValueError(
            f"rewards, values and mask must share one [B, T] shape; got {tuple(rewards.shape)}, {tuple(values.shape)}, {tuple(mask.shape)}"
        )
    m = mask.to(rewards.dtype)
    B, T = rewards.shape
    next_value = torch.zeros(B, dtype=rewards.dtype, device=rewards.device)
    last_gae = torch.zeros_like(next_value)
    out = torch.zeros_like(rewards)
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        gae_t = delta + gamma * lam * last_gae
        mt = m[:, t]
        next_value = values[:, t] * mt + (1 - mt) * next_value
        last_gae = gae_t * mt + (1 - mt) * last_gae
        out[:, t] = last_gae
    advantages = out * m
    returns = (advantages + values) * m
    return advantages, returns


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Whiten ``x`` with the mean and unbiased variance of its valid (mask==1) entries; masked
    entries become 0. Used on GAE advantages for PPO. With fewer than 2 valid entries there is no
    variance estimate and the result is x - mean (i.e. 0) on the valid entries."""
    m = mask.to(x.dtype)
    n = m.sum()
    if n < 2:
        return torch.zeros_like(x)
    mean = (x * m).sum() / n
    var = (((x - mean) ** 2) * m).sum() / (n - 1)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * m


def whiten_across(
    values: list[torch.Tensor], masks: list[torch.Tensor], reduce: Callable[[Tensor], Tensor] | None = None, eps: float = 1e-8
) -> list[torch.Tensor]:
    """:func:`masked_whiten` over every valid token of several micro-batches of different widths.

    ``reduce`` sums a scalar over the processes that hold the batch's other micro-batches (data
    parallel): the mean and variance are then the whole batch's, and ``values`` may be empty."""
    if reduce is not None:
        return _whiten_reduced(values, masks, reduce, eps)
    flat = masked_whiten(torch.cat([v.reshape(-1) for v in values]), torch.cat([m.reshape(-1) for m in masks]))
    out, start = [], 0
    for v in values:
        out.append(flat[start : start + v.numel()].reshape(v.shape))
        start += v.numel()
    return out


def _whiten_reduced(values: list[Tensor], masks: list[Tensor], reduce: Callable[[Tensor], Tensor], eps: float) -> list[Tensor]:
    # The same two passes as masked_whiten, each sum taken over every process.
    x = torch.cat([v.reshape(-1) for v in values]) if values else torch.zeros(0)
    m = torch.cat([k.reshape(-1) for k in masks]).to(x.dtype) if masks else torch.zeros(0)
    n = reduce(m.sum())
    mean = reduce((x * m).sum()) / n.clamp(min=1)
    var = reduce((((x - mean.to(x.device)) ** 2) * m).sum()) / (n - 1).clamp(min=1)
    if n < 2:
        return [torch.zeros_like(v) for v in values]
    flat = (x - mean.to(x.device)) * torch.rsqrt(var.to(x.device) + eps) * m
    out, start = [], 0
    for v in values:
        out.append(flat[start : start + v.numel()].reshape(v.shape))
        start += v.numel()
    return out


def compute_group_advantages(name: str, returns: Tensor) -> Tensor:
    """Run the group-based estimator ``name`` (registered in ADVANTAGE_ESTIMATORS) on ``returns[P, G]``."""
    return ADVANTAGE_ESTIMATORS.get(name)(returns)
