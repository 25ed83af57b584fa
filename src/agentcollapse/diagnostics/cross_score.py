"""In-batch cross-scoring: log p_theta(Z_r | X_c) for every reasoning trace r under every context c.

METHOD.md section 3. ``cross_score`` runs one forward over each distinct context (``use_cache=True``),
keeps its key/value tensors, and scores the traces against them in batches: per batch a fresh
``DynamicCache`` is built from the context's per-layer tensors expanded along the batch, so the cached
context is never mutated (``DynamicCache.update`` concatenates into the cache object it is given).
Only trace tokens are run per (trace, context) pair. ``naive_cross_score`` runs context + trace
jointly for every pair; it is the reference the cached version is tested against.

Both return a float32 CPU tensor of shape ``[R, C]`` (R = number of traces, C = number of contexts)
holding the summed (sequence) log-likelihood of each trace; the first trace token is scored by the
context's last logit. An empty trace scores 0. Contexts must be non-empty.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

__all__ = ["cross_score", "naive_cross_score"]

# Elements of a [rows, T, V] float32 logits chunk processed at once when turning logits into
# token log-probs (bounds the float32 copy for large vocabularies).
_LOGPROB_CHUNK_ELEMS = 1 << 26


# ----------------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------------


def _base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The underlying transformers model (unwraps a peft PeftModel)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def _forward_params(model: torch.nn.Module) -> set[str]:
    try:
        return set(inspect.signature(_base_model(model).forward).parameters)
    except (TypeError, ValueError):  # pragma: no cover - exotic wrappers
        return set()


def _cache_kwarg(params: set[str]) -> str:
    """transformers >= 5.x calls the cache argument ``cache``; older versions ``past_key_values``."""
    return "cache" if "cache" in params else "past_key_values"


def _model_device(model: torch.nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:  # pragma: no cover
        return torch.device("cpu")


def _output_cache(out):
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = getattr(out, "past_key_values", None)
    if cache is None:
        raise RuntimeError("model returned no key/value cache although use_cache=True was passed")
    return cache


@contextmanager
def _eval_no_grad(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode + no_grad for the duration; every submodule's training flag is restored after."""
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, was_training in flags:
            m.training = was_training


def _token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log_softmax(logits)[..., targets] in float32, chunked over the leading dim. logits [B, T, V]."""
    b, t, v = logits.shape
    rows = max(1, _LOGPROB_CHUNK_ELEMS // max(1, t * v))
    out = []
    for s in range(0, b, rows):
        chunk = logits[s : s + rows].float()
        tgt = targets[s : s + rows].unsqueeze(-1)
        out.append((chunk.gather(-1, tgt) - torch.logsumexp(chunk, dim=-1, keepdim=True)).squeeze(-1))
    return torch.cat(out, dim=0) if out else logits.new_zeros((0, t), dtype=torch.float32)


def _check_contexts(contexts: Sequence[Sequence[int]]) -> None:
    for c, ctx in enumerate(contexts):
        if len(ctx) == 0:
            raise ValueError(f"context {c} is empty: the first trace token needs a conditioning logit")


def _pad_traces(traces: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [B, T] (pad id 0) and mask [B, T] (1 = real token)."""
    t_max = max((len(t) for t in traces), default=0)
    ids = torch.zeros((len(traces), t_max), dtype=torch.long)
    mask = torch.zeros((len(traces), t_max), dtype=torch.long)
    for i, tr in enumerate(traces):
        if len(tr):
            ids[i, : len(tr)] = torch.as_tensor(list(tr), dtype=torch.long)
            mask[i, : len(tr)] = 1
    return ids.to(device), mask.to(device)


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


def _layer_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-layer (keys, values) of a filled cache, shapes [1, heads, len, head_dim]."""
    if hasattr(cache, "layers"):  # transformers >= 4.56 / 5.x
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "key_cache"):  # pragma: no cover - older DynamicCache
        return list(zip(cache.key_cache, cache.value_cache))
    return [(k, v) for k, v, *_ in cache]  # pragma: no cover - legacy tuples


def _expanded_cache(layers: list[tuple[torch.Tensor, torch.Tensor]], batch: int, config):
    """A fresh DynamicCache holding the context's keys/values repeated ``batch`` times.

    DynamicLayer initialisation concatenates into new storage, so later in-place growth of this cache
    never touches the context tensors kept by the caller.
    """
    from transformers import DynamicCache

    data = [(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in layers]
    if config is not None:
        try:
            return DynamicCache(data, config=config)
        except (TypeError, ValueError, AttributeError):  # pragma: no cover - config-less fallback
            pass
    return DynamicCache(data)


def cross_score(
    model: torch.nn.Module,
    contexts: Sequence[Sequence[int]],
    traces: Sequence[Sequence[int]],
    batch_size: int = 64,
) -> torch.Tensor:
    """Teacher-forced ``log p(traces[r] | contexts[c])`` summed over trace tokens, as ``[R, C]`` float32 CPU.

    One forward per *distinct* context (identical contexts share the cache and the column values);
    traces are scored against the cached context in batches of ``batch_size`` (right-padded, attention
    mask = ones over the context + the trace mask, position ids continuing from ``len(context)``).
    ``model`` is a Hugging Face causal LM or a peft ``PeftModel``; it is put in eval mode under
    ``torch.no_grad`` for the call and its training flags are restored afterwards.

    Memory per batch: ``batch_size`` copies of the context's key/value cache plus the trace logits
    ``[batch_size, max |Z|, vocab]`` (turned into float32 log-probs in chunks); lower ``batch_size``
    for long contexts or large vocabularies.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    _check_contexts(contexts)
    n_rows, n_cols = len(traces), len(contexts)
    result = torch.zeros((n_rows, n_cols), dtype=torch.float32)
    if n_rows == 0 or n_cols == 0:
        return result

    device = _model_device(model)
    params = _forward_params(model)
    cache_kw = _cache_kwarg(params)
    keep_last = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    config = getattr(_base_model(model), "config", None)
    uniq, col_to_uniq = _unique_contexts(contexts)
    uniq_scores = torch.zeros((n_rows, len(uniq)), dtype=torch.float32)

    with _eval_no_grad(model):
        for u, ctx in enumerate(uniq):
            ctx_ids = torch.tensor([ctx], dtype=torch.long, device=device)
            out = model(
                input_ids=ctx_ids,
                attention_mask=torch.ones_like(ctx_ids),
                use_cache=True,
                **keep_last,
            )
            # log-softmax of the context's last logit scores every trace's first token
            first_lp = torch.log_softmax(out.logits[0, -1].float(), dim=-1)  # [V]
            layers = [(k.detach(), v.detach()) for k, v in _layer_tensors(_output_cache(out))]
            del out
            n_ctx = len(ctx)
            for s in range(0, n_rows, batch_size):
                chunk = traces[s : s + batch_size]
                b = len(chunk)
                ids, mask = _pad_traces(chunk, device)
                t_max = ids.shape[1]
                if t_max == 0:
                    continue  # all empty traces: score 0
                tok_lp = torch.zeros((b, t_max), dtype=torch.float32, device=device)
                tok_lp[:, 0] = first_lp[ids[:, 0]]
                if t_max > 1:
                    inp = ids[:, :-1]
                    attn = torch.cat(
                        [torch.ones((b, n_ctx), dtype=torch.long, device=device), mask[:, :-1]], dim=1
                    )
                    pos = (torch.arange(t_max - 1, device=device) + n_ctx).unsqueeze(0).expand(b, -1)
                    cache = _expanded_cache(layers, b, config)
                    logits = model(
                        input_ids=inp,
                        attention_mask=attn,
                        position_ids=pos,
                        use_cache=True,
                        **{cache_kw: cache},
                    ).logits
                    tok_lp[:, 1:] = _token_logprobs(logits, ids[:, 1:])
                    del logits, cache
                tok_lp = tok_lp * mask.to(tok_lp.dtype)
                uniq_scores[s : s + b, u] = tok_lp.sum(dim=1).cpu()
            del layers

    result[:] = uniq_scores[:, col_to_uniq]
    return result


# ----------------------------------------------------------------------------------------------
# naive reference
# ----------------------------------------------------------------------------------------------


def naive_cross_score(
    model: torch.nn.Module,
    contexts: Sequence[Sequence[int]],
    traces: Sequence[Sequence[int]],
) -> torch.Tensor:
    """Reference for :func:`cross_score`: one unpadded forward over ``context + trace`` per pair."""
    _check_contexts(contexts)
    n_rows, n_cols = len(traces), len(contexts)
    result = torch.zeros((n_rows, n_cols), dtype=torch.float32)
    if n_rows == 0 or n_cols == 0:
        return result
    device = _model_device(model)
    with _eval_no_grad(model):
        for c, ctx in enumerate(contexts):
            for r, tr in enumerate(traces):
                if len(tr) == 0:
                    continue
                ids = torch.tensor([list(ctx) + list(tr)], dtype=torch.long, device=device)
                logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
                n_ctx = len(ctx)
                # logits at position p predict token p + 1: trace tokens use positions n_ctx-1 .. end-2
                pred = logits[:, n_ctx - 1 : n_ctx - 1 + len(tr)]
                result[r, c] = _token_logprobs(pred, ids[:, n_ctx:]).sum().cpu()
    return result
