"""Off-policy correction for a rollout engine whose log-probs are not the trainer's (vLLM: bf16, other
kernels): truncated importance sampling, as TRL's ``vllm_importance_sampling_correction`` and verl's
rollout correction do.

The tokens were sampled from the engine's distribution ``q``; the loss is written for the trainer's
``pi_old``. Per token the importance ratio is ``pi_old / q = exp(old_logp - sample_logp)``:

- ``none``: no correction (the ratio is only measured);
- ``token_tis``: every token's loss weighted by ``min(ratio, cap)`` (TRL's and verl's token TIS);
- ``sequence_mask``: a sequence whose geometric-mean ratio ``exp(mean(old_logp - sample_logp))`` lies
  outside ``[1 / cap, cap]`` is left out of the loss (weight 0), the rest count in full (verl's
  geometric rejection sampling).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["ROLLOUT_CORRECTIONS", "CorrectionStats", "rollout_correction_weights"]

ROLLOUT_CORRECTIONS = ("none", "token_tis", "sequence_mask")


@dataclass
class CorrectionStats:
    """Detached statistics of one micro-batch, over its response tokens, and what each is a mean over
    (so that micro-batches combine into the statistic of all their tokens or sequences)."""

    logp_abs_diff: float  # mean |sample_logp - old_logp|: 0 when the engine serves the trainer's weights
    ratio_mean: float  # mean token ratio pi_old / q
    corrected_frac: float  # token_tis: tokens capped; sequence_mask: sequences masked; none: 0
    tokens: float = 0.0  # the response tokens the two means are over
    corrected_of: float = 0.0  # what corrected_frac is a share of: tokens, or sequences for sequence_mask


def rollout_correction_weights(
    old_logp: Tensor, sample_logp: Tensor, mask: Tensor, mode: str, cap: float
) -> tuple[Tensor | None, CorrectionStats]:
    """Per-token loss weights ``[B, T]`` (None for ``none``) and the statistics. ``old_logp`` and
    ``sample_logp`` are ``[B, T]`` log-probs of the same tokens, ``mask`` the response tokens."""
    if mode not in ROLLOUT_CORRECTIONS:
        raise ValueError(f"unknown rollout correction {mode!r}; valid: {', '.join(ROLLOUT_CORRECTIONS)}")
    if cap <= 1.0:
        raise ValueError(f"the rollout correction cap must be > 1, got {cap}")
    with torch.no_grad():
        tokens = mask.sum().clamp_min(1.0)
        log_ratio = (old_logp.detach().float() - sample_logp.float()).clamp(-20.0, 20.0) * mask
        ratio = log_ratio.exp()
        abs_diff = float(log_ratio.abs().sum() / tokens)
        ratio_mean = float((ratio * mask).sum() / tokens)
        n = float(mask.sum())
        if mode == "none":
            return None, CorrectionStats(abs_diff, ratio_mean, 0.0, n, n)
        if mode == "token_tis":
            capped = (ratio > cap) & (mask > 0)
            return ratio.clamp(max=cap) * mask, CorrectionStats(abs_diff, ratio_mean, float(capped.sum() / tokens), n, n)
        lengths = mask.sum(dim=-1)
        geo = (log_ratio.sum(dim=-1) / lengths.clamp_min(1.0)).exp()
        keep = (geo <= cap) & (geo >= 1.0 / cap)
        rows = (lengths > 0).sum().clamp_min(1)
        masked = float(((~keep) & (lengths > 0)).sum() / rows)
        stats = CorrectionStats(abs_diff, ratio_mean, masked, n, float((lengths > 0).sum()))
        return keep[:, None].to(mask.dtype) * mask, stats
