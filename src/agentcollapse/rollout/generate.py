"""Batched sampling with the KV cache, one random stream per sequence.

Each sequence draws its noise from its own ``torch.Generator`` (Gumbel-max sampling), so a sequence
samples the same tokens whether it is decoded alone or inside any batch: rollouts are reproducible
independent of batch size and of which other trajectories are still alive.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agentcollapse.models.hf import cache_kwarg, forward_params, output_cache


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        if len(p):
            ids[row, width - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
            attn[row, width - len(p) :] = 1
    return ids, attn


def sample_next(logits: torch.Tensor, temperature: float, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """Greedy at temperature 0, else Gumbel-max with each row's own generator."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    vocab = logits.shape[-1]
    noise = torch.stack([torch.rand(vocab, generator=g) for g in generators]).to(logits.device)
    gumbel = -torch.log(-torch.log(noise.clamp_min(1e-20)))
    return (logits.float() / temperature + gumbel).argmax(dim=-1)


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    generators: Sequence[torch.Generator],
    temperature: float,
    max_new_tokens: int,
    stop_ids: set[int],
    pad_id: int,
) -> list[list[int]]:
    """Continue every prompt until a stop token (kept) or ``max_new_tokens``; returns new tokens."""
    if not prompts:
        return []
    device = next(model.parameters()).device
    ids, attn = left_pad(prompts, pad_id)
    ids, attn = ids.to(device), attn.to(device)
    positions = (attn.cumsum(-1) - 1).clamp_min(0)
    cache_arg = cache_kwarg(forward_params(model))
    out = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True)
    past, logits = output_cache(out), out.logits[:, -1, :]
    last_pos = positions[:, -1:]
    stop = torch.tensor(sorted(stop_ids), device=device)
    finished = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    generated: list[list[int]] = [[] for _ in prompts]
    for _ in range(max_new_tokens):
        active = torch.nonzero(~finished).flatten().tolist()
        # Finished rows draw no noise, so a row's stream never depends on its batch-mates.
        nxt = torch.full((len(prompts),), pad_id, dtype=torch.long, device=device)
        nxt[active] = sample_next(logits[active], temperature, [generators[r] for r in active])
        for row in active:
            generated[row].append(int(nxt[row]))
        finished |= torch.isin(nxt, stop)
        if bool(finished.all()):
            break
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
        last_pos = last_pos + 1
        out = model(input_ids=nxt[:, None], attention_mask=attn, position_ids=last_pos, use_cache=True, **{cache_arg: past})
        past, logits = output_cache(out), out.logits[:, -1, :]
    return generated
