"""In-batch cross-scoring: log p_theta(Z_r | X_c) for every reasoning trace r under every context c.

docs/method.md section 3. ``cross_score`` scores every (context, trace) pair as a continuation of the
context (``agentcollapse.models.continuations``): one forward over each distinct context but its last
token keeps its key/value tensors, and every pair then runs only ``[last context token] + trace[:-1]``
on top of that cache, batched across contexts. ``naive_cross_score`` runs context + trace jointly for
every pair; it is the reference the cached version is tested against.

Both return a float32 CPU tensor of shape ``[R, C]`` (R = number of traces, C = number of contexts)
holding the summed (sequence) log-likelihood of each trace; the first trace token is scored by the
logit at the context's last token. An empty trace scores 0. Contexts must be non-empty. ``weights``
(one float per token of each trace) turn the sum into a weighted one, e.g. 0 for the tokens copied
from the observation (``agentcollapse.diagnostics.copying``): teacher forcing still reads every
token, only the sum leaves some out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentcollapse.models.continuations import PairMemo, continuation_logprobs
from agentcollapse.models.hf import eval_no_grad, model_device
from agentcollapse.models.logprobs import token_logprobs

__all__ = ["PairMemo", "ProxyShare", "cross_score", "naive_cross_score", "sequence_cross_score", "shared_cross_score"]

ScoreFn = Callable[[list[list[int]]], list[list[float]]]
"""Log-probs of every token of each sequence after its first (an inference engine's ``score``)."""


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

    Every (distinct context, non-empty trace) pair is one ``(prefix, continuation)`` of
    :func:`agentcollapse.models.continuations.continuation_logprobs`: one forward per distinct context
    fills its key/value cache, then the pairs run ``batch_size`` a forward on top of it (identical
    contexts share the cache and the column values; identical traces run once). Results do not depend
    on ``batch_size`` beyond float rounding. ``weights[r][t]`` multiplies the log-prob of token t of
    trace r in the sum (default 1 everywhere).

    ``memo`` (one dict per model state) keeps each scored (context, trace) pair's per-token log-probs:
    pairs already in it run no forward. The MI proxy passes one memo to every sampler of a step, so the
    nocopy samplers (other weights over the same pairs) and the trajectory sampler's first turns (the
    first-turn sampler's pairs) cost no second forward. ``autocast`` (e.g. ``torch.bfloat16``): the
    forwards run under ``torch.autocast`` in that dtype; the log-normaliser is still taken in float32.

    ``model`` is a Hugging Face causal LM or a peft ``PeftModel``; it is put in eval mode under
    ``torch.no_grad`` for the call and its training flags are restored afterwards. Memory: as
    ``continuation_logprobs`` (lower ``batch_size`` for long contexts, deep models or large vocabularies).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    _check_contexts(contexts)
    token_weights = _check_weights(traces, weights)
    n_rows, n_cols = len(traces), len(contexts)
    result = torch.zeros((n_rows, n_cols), dtype=torch.float32)
    if n_rows == 0 or n_cols == 0:
        return result
    uniq, col_to_uniq = _unique_contexts(contexts)
    rows = [r for r in range(n_rows) if len(traces[r]) > 0]  # empty traces score 0
    # context-major: each context's traces in row order (the batching the forwards follow)
    tok = continuation_logprobs(model, [(ctx, traces[r]) for ctx in uniq for r in rows], batch_size, memo, autocast)
    uniq_scores = torch.zeros((n_rows, len(uniq)), dtype=torch.float32)
    for k, r in enumerate(rows):
        w = None if token_weights is None else torch.tensor(token_weights[r], dtype=torch.float32)
        for u in range(len(uniq)):
            lp = tok[u * len(rows) + k]
            uniq_scores[r, u] = lp.sum() if w is None else (lp * w).sum()
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


# ----------------------------------------------------------------------------------------------
# the cross-scores dealt across ranks
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProxyShare:
    """How the cross-scoring is split across the ranks of a data-parallel run (every rank holds the same
    batch and draws the same samples). The process group's functions come in from the caller, so this
    layer stays free of it."""

    rank: int
    world_size: int
    gather: Callable[[Any], list[Any]]  # every rank's object, in rank order
    deal: Callable[[Sequence[float], int], list[list[int]]]  # item indices per rank by cost, the same on every rank


def shared_cross_score(
    score_columns: Callable[[list[Sequence[int]]], torch.Tensor],
    contexts: Sequence[Sequence[int]],
    traces: Sequence[Sequence[int]],
    share: ProxyShare,
) -> torch.Tensor:
    """The ``[R, C]`` cross-scores with the distinct contexts dealt across ranks: each rank scores every trace
    under its share (``score_columns(contexts)`` -> ``[R, len(contexts)]``, e.g. :func:`cross_score` on those
    columns), and the shares are gathered into the whole matrix on every rank. A context's cost is its length
    (each column runs the same traces on top of it), so the deal balances the context forwards. The values are
    the single-process ones up to float rounding (other pairs share a forward batch)."""
    _check_contexts(contexts)
    uniq, col_to_uniq = _unique_contexts(contexts)
    mine = share.deal([float(len(ctx)) for ctx in uniq], share.world_size)[share.rank]
    part = score_columns([uniq[u] for u in mine]) if mine else torch.zeros((len(traces), 0), dtype=torch.float32)
    uniq_scores = torch.zeros((len(traces), len(uniq)), dtype=torch.float32)
    for owned, scores in share.gather((mine, part)):
        if owned:
            uniq_scores[:, owned] = scores
    return uniq_scores[:, col_to_uniq]
