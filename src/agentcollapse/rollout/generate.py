"""Batched sampling with the KV cache, one random stream per sequence.

Each sequence draws its noise from its own ``torch.Generator`` (Gumbel-max sampling), so a sequence
samples the same tokens whether it is decoded alone or inside any batch: rollouts are reproducible
independent of batch size and of which other trajectories are still alive. A row draws the noise of
several steps in one call (``NOISE_FLOATS_PER_ROW``); how much it draws depends only on the vocabulary,
the token budget and when the row itself stops, never on its batch-mates.

A row may start from a cached prefix (its keys/values from an earlier call: a multi-turn context is
the previous context + response + the new observation), so only the tokens after it are encoded; the
call can hand back each row's cache of its prompt + response for the next turn.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agentcollapse.models.hf import (
    RowCache,
    base_model,
    cache_kwarg,
    forward_params,
    growing_cache,
    layer_tensors,
    output_cache,
    stack_row_caches,
)
from agentcollapse.models.policy import StopText


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        if len(p):
            ids[row, width - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
            attn[row, width - len(p) :] = 1
    return ids, attn


# Uniform noise drawn per row at once: up to this many floats (a whole turn for a small vocabulary,
# one step for a 49k one), so a turn costs one generator call per row instead of one per token.
NOISE_FLOATS_PER_ROW = 1 << 16
# Compact the decoding batch once more than 1 / COMPACT_AT of its rows have stopped.
COMPACT_AT = 4


def gumbel_argmax(logits: torch.Tensor, temperatures: torch.Tensor, uniform: torch.Tensor | None) -> torch.Tensor:
    """Per row: greedy where its temperature is 0, else Gumbel-max sampling with that row's uniform
    noise (``uniform`` [rows, vocab], read only on sampled rows)."""
    choice = logits.argmax(dim=-1)
    sampled = temperatures > 0
    if uniform is not None and bool(sampled.any()):
        gumbel = -torch.log(-torch.log(uniform[sampled].clamp_min(1e-20)))
        choice[sampled] = (logits[sampled].float() / temperatures[sampled, None] + gumbel).argmax(dim=-1)
    return choice


def row_caches(cache: object, attn: torch.Tensor, batch_rows: Sequence[int], lengths: Sequence[int]) -> list[RowCache]:
    """Each row's first ``lengths[i]`` real (unmasked) positions of a batch cache, copied out."""
    layers = layer_tensors(cache)
    out = []
    for b, n in zip(batch_rows, lengths):
        real = attn[b].nonzero().flatten()[:n]
        out.append([(k[b][:, real], v[b][:, real]) for k, v in layers])
    return out


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    generators: Sequence[torch.Generator],
    temperature: float | Sequence[float],
    max_new_tokens: int,
    stop_ids: set[int],
    pad_id: int,
    prefixes: Sequence[RowCache | None] | None = None,
    keep_cache: bool = False,
    stop_text: StopText | None = None,
    min_new_tokens: int = 0,
) -> tuple[list[list[int]], list[RowCache | None]]:
    """Continue every prompt until a stop token (kept), the ``stop_text`` (its last token kept) or
    ``max_new_tokens``; returns the new tokens and, with ``keep_cache``, each row's cache of its
    prompt + new tokens but the last (else None). As vLLM's ``min_tokens``: no stop token is drawn
    among a row's first ``min_new_tokens`` tokens, and only the text after them can hold ``stop_text``.

    ``temperature`` is one for all rows or one per row (0 = greedy), so several evaluation
    temperatures decode in one batch. ``prefixes[i]``, where given, holds the keys/values of
    ``prompts[i]``'s first tokens (fewer than all of them): only the rest is encoded. A ``prefixes`` list
    is emptied once its rows are stacked into the batch's cache: the caller hands its caches over, so the
    last turn's caches are freed before decoding instead of living beside the batch's cache and the
    caches this call hands back."""
    if not prompts:
        return [], []
    device = next(model.parameters()).device
    params = forward_params(model)
    cache_arg = cache_kwarg(params)
    # the prompt's last position only: its next token is all the prefill is for, and [rows, positions,
    # vocabulary] logits are gigabytes at a real vocabulary (an evaluation's 64 maps x 3 temperatures)
    keep_last = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    rows_given = list(prefixes) if prefixes is not None else [None] * len(prompts)
    done_before = [0 if p is None else int(p[0][0].shape[1]) for p in rows_given]
    ids, attn = left_pad([list(p)[n:] for p, n in zip(prompts, done_before)], pad_id)
    ids, attn = ids.to(device), attn.to(device)
    positions = torch.as_tensor(done_before, device=device)[:, None] + (attn.cumsum(-1) - 1).clamp_min(0)
    config = getattr(base_model(model), "config", None)
    if any(done_before):
        layers, past_mask = stack_row_caches(rows_given, left=True)  # every row's prefix ends where its new tokens start
        del rows_given
        if isinstance(prefixes, list):
            prefixes.clear()
        # the cache holds the stacked layers until each layer's first append copies it into a buffer with room
        past = growing_cache(config, max_new_tokens, layers)
        del layers
        attn = torch.cat([past_mask.to(device), attn], dim=1)
    else:
        past = growing_cache(config, room=max_new_tokens)
    # With a cache of room to grow, each decoded token is written in place, not concatenated.
    cache = {cache_arg: past} if past is not None else {}
    out = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True, **cache, **keep_last)
    past, logits = output_cache(out), out.logits[:, -1, :]
    last_pos = positions[:, -1:]
    stop = torch.tensor(sorted(stop_ids), device=device)
    finished = torch.zeros(len(prompts), dtype=torch.bool)
    generated: list[list[int]] = [[] for _ in prompts]
    temps = torch.as_tensor(
        [temperature] * len(prompts) if isinstance(temperature, (int, float)) else list(temperature), dtype=torch.float32
    )
    if temps.numel() != len(prompts):
        raise ValueError(f"{temps.numel()} temperatures for {len(prompts)} prompts")
    vocab = logits.shape[-1]
    chunk = max(1, min(max_new_tokens, NOISE_FLOATS_PER_ROW // vocab))
    noise = torch.empty((len(prompts), chunk, vocab)) if bool((temps > 0).any()) else None
    rows = torch.arange(len(prompts))  # the prompts still in the decoding batch (it shrinks as they stop)
    caches: list[RowCache | None] = [None] * len(prompts)

    def save_caches(batch_rows: torch.Tensor) -> None:  # prompt + response but its last token
        if keep_cache and len(batch_rows):
            prompt_rows = rows[batch_rows].tolist()
            lengths = [len(prompts[r]) + len(generated[r]) - 1 for r in prompt_rows]
            for r, c in zip(prompt_rows, row_caches(past, attn, batch_rows.tolist(), lengths)):
                caches[r] = c

    for step in range(max_new_tokens):
        done_here = finished[rows]
        if int(done_here.sum()) * COMPACT_AT > len(rows):
            # Drop stopped rows from the batch and its cache: every later step costs only the live ones.
            save_caches(torch.nonzero(done_here).flatten())
            keep = torch.nonzero(~done_here).flatten()
            past.batch_select_indices(keep.to(device))
            attn, last_pos, logits, rows = attn[keep.to(device)], last_pos[keep.to(device)], logits[keep.to(device)], rows[keep]
            done_here = finished[rows]
        live = torch.nonzero(~done_here).flatten()  # positions in the batch
        active = rows[live]  # prompt indices
        if noise is not None and step % chunk == 0:
            # Only rows still decoding draw, so a row's stream never depends on its batch-mates.
            span = min(chunk, max_new_tokens - step)
            for r in active.tolist():
                if temps[r] > 0:
                    noise[r, :span] = torch.rand((span, vocab), generator=generators[r])
        uniform = noise[active, step % chunk].to(logits.device) if noise is not None else None
        step_logits = logits[live.to(device)]  # a copy: masking it leaves the batch's logits alone
        if step < min_new_tokens:
            step_logits.index_fill_(-1, stop, float("-inf"))
        choice = gumbel_argmax(step_logits, temps[active].to(logits.device), uniform)
        for r, token in zip(active.tolist(), choice.tolist()):
            generated[r].append(token)
            if (
                stop_text is not None
                and step >= min_new_tokens
                and token in stop_text.trigger_ids
                and stop_text.hit(generated[r][min_new_tokens:])
            ):
                finished[r] = True
        finished[active] |= torch.isin(choice, stop).cpu()
        if bool(finished.all()):
            break
        nxt = torch.full((len(rows),), pad_id, dtype=torch.long, device=device)
        nxt[live.to(device)] = choice
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
        last_pos = last_pos + 1
        out = model(input_ids=nxt[:, None], attention_mask=attn, position_ids=last_pos, use_cache=True, **{cache_arg: past})
        past, logits = output_cache(out), out.logits[:, -1, :]
    save_caches(torch.arange(len(rows)))
    return generated, caches
