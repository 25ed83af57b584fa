"""Token log-probabilities from logits without a [batch, length, vocabulary] log-softmax.

At a real vocabulary (SmolLM2: 49,152) a full log-softmax over a multi-turn batch is gigabytes, and
autograd would keep it. ``log p(y) = logit_y - logsumexp(logits)``, taken a chunk of positions at a
time, keeps only the logits themselves (which the model returns anyway) and [rows] results; the
backward of ``logsumexp`` recomputes the softmax from the saved logits chunk by chunk (as TRL's
``selective_log_softmax`` does).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

__all__ = ["CHUNK_ELEMENTS", "position_blocks", "token_logprobs"]

CHUNK_ELEMENTS = 1 << 24
"""Logit elements processed at once (64 MB of float32 temporaries)."""


def position_blocks(logits: torch.Tensor) -> Iterator[tuple[int, slice, torch.Tensor]]:
    """``(row, positions, logits[row, positions])`` over ``logits`` [B, T, V], at most ``CHUNK_ELEMENTS``
    elements a block. Each block is a view: slicing one row never copies, where flattening a sliced
    batch (``logits[:, :-1]``) would copy all of it."""
    b, t, v = logits.shape
    rows = max(1, CHUNK_ELEMENTS // max(1, v))
    for row in range(b):
        for start in range(0, t, rows):
            span = slice(start, min(t, start + rows))
            yield row, span, logits[row, span]


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[..., targets]`` in float32: ``logits`` [B, T, V], ``targets`` [B, T] (long).
    Differentiable; at most ``CHUNK_ELEMENTS`` logits at once: all of them in one op where they fit (a
    small vocabulary: a row at a time cost a dispatch per row, ~7% of the tiny head's MI proxy), else
    a block of positions at a time (:func:`position_blocks`)."""
    if logits.numel() <= CHUNK_ELEMENTS:
        dense = logits.float()
        return dense.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(dense, dim=-1)
    out = []
    for row, span, block in position_blocks(logits):
        block = block.float()
        picked = block.gather(-1, targets[row, span, None]).squeeze(-1)
        out.append(picked - torch.logsumexp(block, dim=-1))
    return torch.cat(out).reshape(targets.shape)
