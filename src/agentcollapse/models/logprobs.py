"""Token log-probabilities from logits without a [batch, length, vocabulary] log-softmax.

At a real vocabulary (SmolLM2: 49,152) a full log-softmax over a multi-turn batch is gigabytes, and
autograd would keep it. ``log p(y) = logit_y - logsumexp(logits)``, taken a chunk of positions at a
time, keeps only the logits themselves (which the model returns anyway) and [rows] results; the
backward of ``logsumexp`` recomputes the softmax from the saved logits chunk by chunk (as TRL's
``selective_log_softmax`` does).
"""

from __future__ import annotations

import torch

__all__ = ["CHUNK_ELEMENTS", "token_logprobs"]

CHUNK_ELEMENTS = 1 << 24
"""Logit elements processed at once (64 MB of float32 temporaries)."""


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[..., targets]`` in float32: ``logits`` [..., V], ``targets`` [...] (long).
    Differentiable; chunked over the positions."""
    shape = targets.shape
    flat = logits.reshape(-1, logits.shape[-1])
    idx = targets.reshape(-1, 1)
    rows = max(1, CHUNK_ELEMENTS // max(1, flat.shape[-1]))
    parts = []
    for s in range(0, flat.shape[0], rows):
        chunk = flat[s : s + rows].float()
        parts.append((chunk.gather(-1, idx[s : s + rows]) - torch.logsumexp(chunk, dim=-1, keepdim=True)).squeeze(-1))
    if not parts:
        return logits.new_zeros(shape, dtype=torch.float32)
    return torch.cat(parts).reshape(shape)
