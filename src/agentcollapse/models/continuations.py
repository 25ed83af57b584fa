"""Teacher-forced log-probs of continuations after shared prefixes: one forward per distinct prefix.

``continuation_logprobs(model, pairs)`` returns, for each ``(prefix, continuation)`` pair, the log-prob
of every continuation token given the prefix and the continuation before it. Many pairs share a
prefix: the MI proxy scores every reasoning trace under every prompt of the batch
(``diagnostics.cross_score``), and the update's reference pass scores every response of a group
under the group's one prompt (``lightning.update``). So each distinct prefix runs one forward over all
its tokens but the last (``use_cache=True``) and keeps its key/value tensors; every pair then runs
only ``[last prefix token] + continuation[:-1]`` on top of that cache, whose logits predict the
continuation (its first token from the prefix's last). Pairs are batched across prefixes, sorted by
continuation length, so padding stays small; each batch gets a fresh ``DynamicCache`` over (views of)
the kept tensors, which the forward grows by concatenation into new storage, so the kept prefixes
are never mutated. Results equal a plain forward over ``prefix + continuation`` up to float rounding
(tested against one).

``shared_prefix_forward`` is the same idea with gradients, for the update: the rows of one micro-batch
that share a group's prompt run it once and only their own tokens after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentcollapse.models.hf import (
    RowCache,
    base_model,
    cache_from_layers,
    cache_kwarg,
    eval_no_grad,
    forward_params,
    layer_tensors,
    model_device,
    output_cache,
    stack_row_caches,
)
from agentcollapse.models.logprobs import token_logprobs

__all__ = ["PairMemo", "continuation_logprobs", "shared_prefix_forward"]

PairMemo = dict[tuple[tuple[int, ...], tuple[int, ...]], torch.Tensor]
"""(prefix ids, continuation ids) -> the continuation's per-token log-probs (float32 CPU)."""

# a block of prefixes holds about this many forwards' worth (x batch_size) of pairs
_PAIRS_PER_BLOCK = 8


def _prefix_cache(model, prefix: tuple[int, ...], device: torch.device, keep_last: dict) -> RowCache | None:
    """Per-layer keys/values ``[heads, len(prefix) - 1, head_dim]`` of ``prefix[:-1]`` (None when that is empty)."""
    if len(prefix) < 2:
        return None
    ids = torch.tensor([prefix[:-1]], dtype=torch.long, device=device)
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, **keep_last)
    return [(k[0].detach(), v[0].detach()) for k, v in layer_tensors(output_cache(out))]


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    """(value, count) of each run of equal consecutive values."""
    out: list[tuple[int, int]] = []
    for i in ids:
        if out and out[-1][0] == i:
            out[-1] = (i, out[-1][1] + 1)
        else:
            out.append((i, 1))
    return out


def _gather_rows(stacked: torch.Tensor, runs: list[tuple[int, int]], length: int) -> torch.Tensor:
    """Rows of ``stacked[:, :, :length]`` repeated as ``runs`` says: a broadcast view for a single run
    (the forward's concatenation copies it once), else one concatenation of broadcast views."""
    views = [stacked[i : i + 1, :, :length].expand(n, -1, -1, -1) for i, n in runs]
    return views[0] if len(views) == 1 else torch.cat(views, dim=0)


def continuation_logprobs(
    model: torch.nn.Module,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    batch_size: int = 64,
    memo: PairMemo | None = None,
    autocast: torch.dtype | None = None,
) -> list[torch.Tensor]:
    """Per ``(prefix, continuation)`` pair, ``log p(continuation[t] | prefix + continuation[:t])`` for every
    t, as a float32 CPU tensor ``[len(continuation)]`` (empty for an empty continuation).

    One forward per distinct prefix over all its tokens but the last fills its key/value cache; then
    the distinct pairs not already in ``memo`` run ``batch_size`` a forward on top of their prefixes'
    caches. Prefixes are taken in blocks (sorted by length; a block holds about 8 forwards' worth of
    pairs and at most ``batch_size`` prefixes) and the block's pairs sorted by continuation length,
    so the rows of one forward have near-equal lengths. Each row's cache is its prefix's keys/values,
    zero-padded to the longest prefix of the forward; padded slots and padded continuation tokens are
    masked out, and position ids continue from each row's own prefix length. Results do not depend on
    ``batch_size`` beyond float rounding.

    ``memo`` (one dict per model state) keeps every scored pair: pairs already in it run no forward.
    ``autocast`` (e.g. ``torch.bfloat16``): the forwards run under ``torch.autocast`` in that dtype; the
    log-normaliser is still taken in float32 over the (rounded) logits. ``model`` is a Hugging Face
    causal LM or a peft ``PeftModel`` (with whatever adapter state the caller set); it runs in eval mode
    under ``torch.no_grad`` and its training flags are restored afterwards.

    Memory: the block's caches (at most ``batch_size`` prefixes), once stacked and once gathered per
    forward (``batch_size`` rows x the block's longest prefix), plus the logits ``[batch_size, longest
    continuation, vocab]`` (turned into float32 log-probs in chunks).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    keys = [(tuple(int(t) for t in prefix), tuple(int(t) for t in cont)) for prefix, cont in pairs]
    for k, (prefix, cont) in enumerate(keys):
        if cont and not prefix:
            raise ValueError(f"pair {k} has an empty prefix: its first token needs a conditioning logit")
    memo = {} if memo is None else memo
    # the distinct pairs to run, grouped by prefix (first-seen order)
    todo: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    queued: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    for key in keys:
        if key[1] and key not in memo and key not in queued:
            queued.add(key)
            todo.setdefault(key[0], []).append(key[1])
    if todo:
        _score_into(model, todo, len(queued), batch_size, memo, autocast)
    return [memo[key] if key[1] else torch.zeros(0, dtype=torch.float32) for key in keys]


def _score_into(
    model: torch.nn.Module,
    todo: dict[tuple[int, ...], list[tuple[int, ...]]],
    n_todo: int,
    batch_size: int,
    memo: PairMemo,
    autocast: torch.dtype | None,
) -> None:
    """Run every (prefix, continuation) of ``todo`` (prefix -> its continuations) into ``memo``."""
    device = model_device(model)
    params = forward_params(model)
    cache_kw = cache_kwarg(params)
    keep_last = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    config = getattr(base_model(model), "config", None)
    prefixes = list(todo)
    order = sorted(range(len(prefixes)), key=lambda u: (len(prefixes[u]), u))
    # Prefixes per block: enough pairs for ~_PAIRS_PER_BLOCK forwards (so sorting by continuation
    # length leaves little padding), few enough that the block's prefixes have near-equal lengths
    # (prefixes are sorted by length) and that its caches stay within batch_size prefixes.
    block_size = min(batch_size, max(1, -(-_PAIRS_PER_BLOCK * batch_size * len(prefixes) // max(1, n_todo))))

    with eval_no_grad(model), torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
        for b0 in range(0, len(order), block_size):
            block = [prefixes[u] for u in order[b0 : b0 + block_size]]
            caches = [_prefix_cache(model, prefix, device, keep_last) for prefix in block]
            # right-padded: each row's continuation goes on from its own prefix length (its position ids)
            stacked = stack_row_caches(caches, left=False)[0] if any(c is not None for c in caches) else None
            del caches  # stacked holds copies
            # (continuation length, prefix length) order: near-equal lengths within each forward
            rows = sorted((len(cont), len(prefix), i, j) for i, prefix in enumerate(block) for j, cont in enumerate(todo[prefix]))
            for s in range(0, len(rows), batch_size):
                chunk = sorted(rows[s : s + batch_size], key=lambda p: (p[2], p[0], p[3]))  # by prefix
                b = len(chunk)
                t_max = max(p[0] for p in chunk)
                n_ctx_max = max(p[1] for p in chunk) - 1  # cached length of the longest prefix
                inp = torch.zeros((b, t_max), dtype=torch.long)
                tgt = torch.zeros((b, t_max), dtype=torch.long)
                tmask = torch.zeros((b, t_max), dtype=torch.long)
                cmask = torch.zeros((b, n_ctx_max), dtype=torch.long)
                pos = torch.zeros((b, t_max), dtype=torch.long)
                for row, (n_z, n_x, i, j) in enumerate(chunk):
                    prefix = block[i]
                    cont = todo[prefix][j]
                    inp[row, :n_z] = torch.tensor([prefix[-1], *cont[:-1]], dtype=torch.long)
                    tgt[row, :n_z] = torch.tensor(cont, dtype=torch.long)
                    tmask[row, :n_z] = 1
                    cmask[row, : n_x - 1] = 1
                    pos[row] = torch.arange(n_x - 1, n_x - 1 + t_max)
                inp, tgt, tmask, pos = inp.to(device), tgt.to(device), tmask.to(device), pos.to(device)
                kwargs = {}
                attn = tmask
                if n_ctx_max > 0 and stacked is not None:
                    runs = _runs([p[2] for p in chunk])  # chunk rows are grouped by prefix
                    layers = [(_gather_rows(k, runs, n_ctx_max), _gather_rows(v, runs, n_ctx_max)) for k, v in stacked]
                    kwargs[cache_kw] = cache_from_layers(layers, config)
                    attn = torch.cat([cmask.to(device), tmask], dim=1)
                    del layers
                logits = model(input_ids=inp, attention_mask=attn, position_ids=pos, use_cache=True, **kwargs).logits
                tok_lp = token_logprobs(logits, tgt).float().cpu()
                del logits, kwargs
                for row, (n_z, _, i, j) in enumerate(chunk):
                    memo[(block[i], todo[block[i]][j])] = tok_lp[row, :n_z].clone()
            del stacked


def shared_prefix_forward(model: torch.nn.Module, input_ids: torch.Tensor, start: int, **kwargs) -> Any:
    """The model's output at positions ``start ..`` of rows that all begin with the same ``start`` tokens.

    The shared tokens run once, in one row (``use_cache=True``), and every row runs only its tokens
    from ``start`` on, over the shared keys/values broadcast to every row (a view, not a copy), with
    its positions going on from ``start``: the outputs ``model(input_ids, logits_to_keep=T - start)``
    gives at those positions (``logits``, and ``hidden_states`` when ``output_hidden_states=True``;
    ``kwargs`` go to that forward), up to float rounding. Differentiable: the gradients of every row
    reach the shared keys/values and through them the one prefix forward. Rows must be right-padded
    (causality hides the padding, as in a plain forward without an attention mask) and ``start`` >= 1.
    Not under gradient checkpointing, where transformers drops the cache."""
    b, t = input_ids.shape
    if not 1 <= start < t:
        raise ValueError(f"start={start} must leave a shared prefix and at least one position after it ({t} positions)")
    params = forward_params(model)
    prefix = model(input_ids=input_ids[:1, :start], use_cache=True, **({"logits_to_keep": 1} if "logits_to_keep" in params else {}))
    layers = [(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in layer_tensors(output_cache(prefix))]
    cache = cache_from_layers(layers, getattr(base_model(model), "config", None))
    positions = torch.arange(start, t, device=input_ids.device).expand(b, -1)
    return model(input_ids=input_ids[:, start:], position_ids=positions, use_cache=True, **{cache_kwarg(params): cache}, **kwargs)
