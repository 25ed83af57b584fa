"""In-batch cross-scoring: log p_theta(Z_r | X_c) for every reasoning trace r under every context c.

METHOD.md section 3. ``cross_score`` runs one forward over each distinct context but its last token
(``use_cache=True``) and keeps its key/value tensors; every (context, trace) pair then runs only
``[last context token] + trace[:-1]`` on top of that cache. Pairs are batched across contexts, sorted
by trace length, so padding stays small; each batch gets a fresh ``DynamicCache`` over (views of) the
kept tensors, which the forward grows by concatenation into new storage, so the cached contexts are
never mutated. ``naive_cross_score`` runs context + trace jointly for every pair; it is the reference
the cached version is tested against.

Both return a float32 CPU tensor of shape ``[R, C]`` (R = number of traces, C = number of contexts)
holding the summed (sequence) log-likelihood of each trace; the first trace token is scored by the
logit at the context's last token. An empty trace scores 0. Contexts must be non-empty. ``weights``
(one float per token of each trace) turn the sum into a weighted one, e.g. 0 for the tokens copied
from the observation (``agentcollapse.diagnostics.copying``): teacher forcing still reads every
token, only the sum leaves some out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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

__all__ = ["PairMemo", "cross_score", "naive_cross_score", "sequence_cross_score"]

ScoreFn = Callable[[list[list[int]]], list[list[float]]]
PairMemo = dict[tuple[tuple[int, ...], tuple[int, ...]], torch.Tensor]
"""(context ids, trace ids) -> the trace's per-token log-probs under the context (float32 CPU)."""
"""Log-probs of every token of each sequence after its first (an inference engine's ``score``)."""

# cross_score: a block of contexts holds about this many forwards' worth (x batch_size) of pairs.
_PAIRS_PER_BLOCK = 8


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def _check_contexts(contexts: Sequence[Sequence[int]]) -> None:
    for c, ctx in enumerate(contexts):
        if len(ctx) == 0:
            raise ValueError(f"context {c} is empty: the first trace token needs a conditioning logit")


def _check_weights(traces: Sequence[Sequence[int]], weights: Sequence[Sequence[float]] | None) -> list[list[float]] | None:
    if weights is None:
        return None
    if len(weights) != len(traces):
        raise ValueError(f"{len(weights)} weight rows for {len(traces)} traces")
    out = [[float(w) for w in row] for row in weights]
    for r, (row, tr) in enumerate(zip(out, traces)):
        if len(row) != len(tr):
            raise ValueError(f"trace {r} has {len(tr)} tokens but {len(row)} weights")
    return out


def _unique_contexts(contexts: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[int]]:
    """Distinct contexts (first-seen order) and, per context, its index among them."""
    index: dict[tuple[int, ...], int] = {}
    uniq: list[list[int]] = []
    col_to_uniq = []
    for ctx in contexts:
        key = tuple(int(x) for x in ctx)
        if key not in index:
            index[key] = len(uniq)
            uniq.append(list(key))
        col_to_uniq.append(index[key])
    return uniq, col_to_uniq


# ----------------------------------------------------------------------------------------------
# cached version
# ----------------------------------------------------------------------------------------------


def _prefix_cache(model, ctx: list[int], device: torch.device, keep_last: dict) -> RowCache | None:
    """Per-layer keys/values ``[heads, len(ctx) - 1, head_dim]`` of ``ctx[:-1]`` (None when that is empty)."""
    if len(ctx) < 2:
        return None
    ids = torch.tensor([ctx[:-1]], dtype=torch.long, device=device)
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


def cross_score(
    model: torch.nn.Module,
    contexts: Sequence[Sequence[int]],
    traces: Sequence[Sequence[int]],
    batch_size: int = 64,
    weights: Sequence[Sequence[float]] | None = None,
    memo: PairMemo | None = None,
    autocast: torch.dtype | None = None,
) -> torch.Tensor:
    """Teacher-forced ``log p(traces[r] | contexts[c])`` summed over trace tokens, as ``[R, C]`` float32 CPU.

    One forward per *distinct* context over all its tokens but the last fills its key/value cache
    (identical contexts share the cache and the column values). Then every (context, non-empty trace)
    pair is scored by a forward over ``[last context token] + trace[:-1]`` on top of that cache, whose
    logits predict the trace's tokens (the first one from the context's last token). Pairs are formed
    over blocks of distinct contexts (sorted by length; a block holds about 8 forwards' worth of pairs
    and at most ``batch_size`` contexts), sorted by trace length and run ``batch_size`` pairs per
    forward, so the rows of one forward have near-equal trace and context lengths (little padding).
    Each row's cache is its context's keys/values, zero-padded to the longest context of the forward;
    padded slots and padded trace tokens are masked out, and position ids continue from each row's own
    context length. Results do not depend on ``batch_size`` beyond float rounding. ``weights[r][t]``
    multiplies the log-prob of token t of trace r in the sum (default 1 everywhere).

    ``memo`` (one dict per model state) keeps each scored (context, trace) pair's per-token log-probs:
    pairs already in it run no forward, and identical traces run once. The MI proxy passes one memo to
    every sampler of a step, so the nocopy samplers (other weights over the same pairs) and the
    trajectory sampler's first turns (the first-turn sampler's pairs) cost no second forward.
    ``autocast`` (e.g. ``torch.bfloat16``): the forwards run under ``torch.autocast`` in that dtype; the
    log-normaliser is still taken in float32 over the (rounded) logits.

    ``model`` is a Hugging Face causal LM or a peft ``PeftModel``; it is put in eval mode under
    ``torch.no_grad`` for the call and its training flags are restored afterwards.

    Memory: the block's caches (at most ``batch_size`` contexts), once stacked and once gathered per
    forward (``batch_size`` rows x the block's longest context), plus the trace logits
    ``[batch_size, max |Z|, vocab]`` (turned into float32 log-probs in chunks); lower ``batch_size``
    for long contexts, deep models or large vocabularies.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    _check_contexts(contexts)
    token_weights = _check_weights(traces, weights)
    n_rows, n_cols = len(traces), len(contexts)
    result = torch.zeros((n_rows, n_cols), dtype=torch.float32)
    if n_rows == 0 or n_cols == 0:
        return result

    device = model_device(model)
    params = forward_params(model)
    cache_kw = cache_kwarg(params)
    keep_last = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    config = getattr(base_model(model), "config", None)
    uniq, col_to_uniq = _unique_contexts(contexts)
    uniq_scores = torch.zeros((n_rows, len(uniq)), dtype=torch.float32)
    rows = [r for r in range(n_rows) if len(traces[r]) > 0]  # empty traces score 0
    trace_ids = [[int(t) for t in traces[r]] for r in range(n_rows)]
    memo = {} if memo is None else memo
    ctx_keys = [tuple(ctx) for ctx in uniq]
    trace_keys = [tuple(tr) for tr in trace_ids]
    # the pairs to run: not in the memo, and each distinct trace once per context
    todo: dict[int, list[int]] = {}
    for u, ck in enumerate(ctx_keys):
        seen: set[tuple[int, ...]] = set()
        for r in rows:
            if (ck, trace_keys[r]) not in memo and trace_keys[r] not in seen:
                seen.add(trace_keys[r])
                todo.setdefault(u, []).append(r)
    ctx_order = sorted(todo, key=lambda u: (len(uniq[u]), u))
    n_todo = sum(len(v) for v in todo.values())

    # Contexts per block: enough pairs for ~_PAIRS_PER_BLOCK forwards (so sorting by trace length leaves
    # little padding), few enough that the block's contexts have near-equal lengths (contexts are
    # sorted by length) and that its caches stay within batch_size contexts.
    block_size = min(batch_size, max(1, -(-_PAIRS_PER_BLOCK * batch_size * len(todo) // max(1, n_todo))))

    with eval_no_grad(model), torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
        for b0 in range(0, len(ctx_order), block_size):
            block = ctx_order[b0 : b0 + block_size]
            prefixes = [_prefix_cache(model, uniq[u], device, keep_last) for u in block]
            # right-padded: each row's trace continues from its own context length (its position ids)
            stacked = stack_row_caches(prefixes, left=False)[0] if any(p is not None for p in prefixes) else None
            del prefixes  # stacked holds copies
            # (trace length, context length) order: near-equal lengths within each forward
            pairs = sorted(
                ((len(trace_ids[r]), len(uniq[u]), i, r) for i, u in enumerate(block) for r in todo[u]),
            )
            for s in range(0, len(pairs), batch_size):
                chunk = sorted(pairs[s : s + batch_size], key=lambda p: (p[2], p[0], p[3]))  # by context
                b = len(chunk)
                t_max = max(p[0] for p in chunk)
                n_ctx_max = max(p[1] for p in chunk) - 1  # cached prefix length of the longest context
                inp = torch.zeros((b, t_max), dtype=torch.long)
                tgt = torch.zeros((b, t_max), dtype=torch.long)
                tmask = torch.zeros((b, t_max), dtype=torch.long)
                cmask = torch.zeros((b, n_ctx_max), dtype=torch.long)
                pos = torch.zeros((b, t_max), dtype=torch.long)
                for j, (n_z, n_x, i, r) in enumerate(chunk):
                    ctx, tr = uniq[block[i]], trace_ids[r]
                    inp[j, :n_z] = torch.tensor([ctx[-1], *tr[:-1]], dtype=torch.long)
                    tgt[j, :n_z] = torch.tensor(tr, dtype=torch.long)
                    tmask[j, :n_z] = 1
                    cmask[j, : n_x - 1] = 1
                    pos[j] = torch.arange(n_x - 1, n_x - 1 + t_max)
                inp, tgt, tmask, pos = inp.to(device), tgt.to(device), tmask.to(device), pos.to(device)
                kwargs = {}
                attn = tmask
                if n_ctx_max > 0 and stacked is not None:
                    runs = _runs([p[2] for p in chunk])  # chunk rows are grouped by context
                    layers = [(_gather_rows(k, runs, n_ctx_max), _gather_rows(v, runs, n_ctx_max)) for k, v in stacked]
                    kwargs[cache_kw] = cache_from_layers(layers, config)
                    attn = torch.cat([cmask.to(device), tmask], dim=1)
                    del layers
                logits = model(input_ids=inp, attention_mask=attn, position_ids=pos, use_cache=True, **kwargs).logits
                tok_lp = token_logprobs(logits, tgt).float().cpu()
                del logits, kwargs
                for j, (n_z, _, i, r) in enumerate(chunk):
                    memo[(ctx_keys[block[i]], trace_keys[r])] = tok_lp[j, :n_z].clone()
            del stacked

    for r in rows:
        w = None if token_weights is None else torch.tensor(token_weights[r], dtype=torch.float32)
        for u, ck in enumerate(ctx_keys):
            tok = memo[(ck, trace_keys[r])]
            uniq_scores[r, u] = tok.sum() if w is None else (tok * w).sum()
    result[:] = uniq_scores[:, col_to_uniq]
    return result


# ----------------------------------------------------------------------------------------------
# naive reference
# ----------------------------------------------------------------------------------------------


def naive_cross_score(
    model: torch.nn.Module,
    contexts: Sequence[Sequence[int]],
    traces: Sequence[Sequence[int]],
    weights: Sequence[Sequence[float]] | None = None,
) -> torch.Tensor:
    """Reference for :func:`cross_score`: one unpadded forward over ``context + trace`` per pair."""
    _check_contexts(contexts)
    token_weights = _check_weights(traces, weights)
    n_rows, n_cols = len(traces), len(contexts)
    result = torch.zeros((n_rows, n_cols), dtype=torch.float32)
    if n_rows == 0 or n_cols == 0:
        return result
    device = model_device(model)
    with eval_no_grad(model):
        for c, ctx in enumerate(contexts):
            for r, tr in enumerate(traces):
                if len(tr) == 0:
                    continue
                ids = torch.tensor([list(ctx) + list(tr)], dtype=torch.long, device=device)
                logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
                n_ctx = len(ctx)
                # logits at position p predict token p + 1: trace tokens use positions n_ctx-1 .. end-2
                pred = logits[:, n_ctx - 1 : n_ctx - 1 + len(tr)]
                tok_lp = token_logprobs(pred, ids[:, n_ctx:])[0].cpu()
                w = torch.ones(len(tr)) if token_weights is None else torch.tensor(token_weights[r], dtype=torch.float32)
                result[r, c] = (tok_lp * w).sum()
    return result


def sequence_cross_score(
    score: ScoreFn,
    contexts: Sequence[Sequence[int]],
    traces: Sequence[Sequence[int]],
    weights: Sequence[Sequence[float]] | None = None,
    memo: PairMemo | None = None,
) -> torch.Tensor:
    """:func:`cross_score` through an inference engine: every ``context + trace`` is one sequence that
    ``score`` (the vLLM engine's ``prompt_logprobs``) returns token log-probs of; a trace's sum is over
    its own positions. The engine batches the pairs and shares each context's cached prefix itself.
    ``memo`` as for :func:`cross_score`: a pair in it is not sent again."""
    _check_contexts(contexts)
    token_weights = _check_weights(traces, weights)
    result = torch.zeros((len(traces), len(contexts)), dtype=torch.float32)
    memo = {} if memo is None else memo
    pairs = [(r, c) for c in range(len(contexts)) for r in range(len(traces)) if len(traces[r])]
    keys = {(r, c): (tuple(int(x) for x in contexts[c]), tuple(int(x) for x in traces[r])) for r, c in pairs}
    todo = list({keys[p]: p for p in pairs if keys[p] not in memo}.values())  # each new pair once
    if todo:
        scored = score([list(contexts[c]) + list(traces[r]) for r, c in todo])
        for (r, c), logp in zip(todo, scored):
            memo[keys[(r, c)]] = torch.tensor(logp[len(contexts[c]) - 1 :], dtype=torch.float32)  # entry j: token j + 1
    for r, c in pairs:
        tok_lp = memo[keys[(r, c)]]
        result[r, c] = tok_lp.sum() if token_weights is None else (tok_lp * torch.tensor(token_weights[r], dtype=torch.float32)).sum()
    return result
