"""The default policy: a tiny Llama built and warm-started here, offline and deterministically.

Warm start = supervised fine-tuning on planner demonstrations whose reasoning names the real state
(position, goal, neighbouring holes) in varied wording, with a share of random actions (headroom for
RL) and a share of input-agnostic template reasoning (so template collapse is a reachable attractor).
The result is cached on disk under a key made of everything that shapes it; ``force=True`` rebuilds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from agentcollapse import envs
from agentcollapse.models.cache import cached_build, checked_cache_dir
from agentcollapse.models.context import (
    assistant_message,
    encode,
    first_user_message,
    format_response,
    next_context_ids,
    next_user_message,
    render_context,
)
from agentcollapse.models.hf import forward_params
from agentcollapse.models.tokenizer import build_tokenizer
from agentcollapse.progress import Progress
from agentcollapse.seeds import warm_start_env_seed

if TYPE_CHECKING:  # models sit below the config layer: configs are read, never imported
    from agentcollapse.config import EnvConfig, ModelConfig

log = logging.getLogger(__name__)
BUILD_VERSION = 2  # bump when the build recipe changes, so caches rebuild


def cache_key(model_cfg: ModelConfig, env_cfg: EnvConfig) -> str:
    warm_start = asdict(model_cfg.warm_start) if not isinstance(model_cfg.warm_start, dict) else dict(model_cfg.warm_start)
    spec = {
        "version": BUILD_VERSION,
        "env": envs.episode_identity(env_cfg)
        # a real data set (env.data_path) brings its own words and demonstrations; unset keeps existing keys
        | ({"data_path": str(env_cfg.data_path)} if getattr(env_cfg, "data_path", None) else {}),
        "arch": [model_cfg.hidden_size, model_cfg.num_layers, model_cfg.num_heads, model_cfg.intermediate_size],
        # Unset (None) options do not shape the build, so adding one keeps existing caches valid.
        "warm_start": {k: v for k, v in warm_start.items() if v is not None},
    }
    blob = json.dumps(spec, sort_keys=True, default=str)
    return f"tiny-{env_cfg.name}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def demonstration_episodes(
    env_cfg: EnvConfig, episodes: int, suboptimal_prob: float, template_prob: float, seed: int
) -> tuple[str, list[list[tuple[str, str]]]]:
    """Planner-played episodes as (context text, response text) per turn, plus the system prompt."""
    rng = random.Random(seed)
    env = envs.from_config(env_cfg)
    out = []
    for i in range(episodes):
        obs = env.reset(warm_start_env_seed(seed, i))
        messages = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": first_user_message(obs)}]
        turns = []
        while not env.done:
            think, answer = env.demonstration(rng, suboptimal_prob)
            if rng.random() < template_prob:
                think = env.template_reasoning(rng)
            response = format_response(think, answer)
            turns.append((messages, response))
            obs, reward, _, _ = env.step(answer)
            messages = messages + [
                {"role": "assistant", "content": assistant_message(response)},
                {"role": "user", "content": next_user_message(env.turn + 1, reward, obs)},
            ]
        out.append(turns)
    return env.system_prompt, out  # type: ignore[return-value]


def episode_sequence(tokenizer: Any, turns: list[tuple[list[dict[str, str]], str]]) -> tuple[list[int], list[int]]:
    """One token sequence per demonstration episode, built as a rollout builds its contexts (token in,
    token out: ``models.context``), with a loss mask over every response."""
    ids = encode(tokenizer, render_context(tokenizer, turns[0][0]))
    mask = [0] * len(ids)
    for k, (_, response) in enumerate(turns):
        response_ids = encode(tokenizer, response)
        if k + 1 < len(turns):
            extended = next_context_ids(tokenizer, ids, response_ids, turns[k + 1][0][-1]["content"])
        else:
            extended = ids + response_ids
        mask += [1] * len(response_ids) + [0] * (len(extended) - len(ids) - len(response_ids))
        ids = extended
    return ids, mask


def weights_hash(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())  # any dtype, bf16 too
    return h.hexdigest()


def tiny_llama_config(model_cfg: ModelConfig, tokenizer: Any) -> LlamaConfig:
    """The tiny policy's architecture (``model=tiny`` sizes) over ``tokenizer``'s vocabulary."""
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=model_cfg.hidden_size,
        intermediate_size=model_cfg.intermediate_size,
        num_hidden_layers=model_cfg.num_layers,
        num_attention_heads=model_cfg.num_heads,
        num_key_value_heads=model_cfg.num_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build_tiny_policy(
    model_cfg: ModelConfig, env_cfg: EnvConfig, cache_dir: str | os.PathLike, force: bool = False, progress: bool = True
) -> Path:
    """Directory holding the warm-started tiny model and its tokenizer; built once, then cached."""
    target = checked_cache_dir(cache_dir) / cache_key(model_cfg, env_cfg)
    return cached_build(target, lambda tmp: _build(tmp, target, model_cfg, env_cfg, progress), marker="meta.json", force=force)


def _build(tmp: Path, target: Path, model_cfg: ModelConfig, env_cfg: EnvConfig, progress: bool) -> None:
    """The tiny policy of cache entry ``target``, warm-started into ``tmp``: a tokenizer over the env's text, a Llama of the
    configured size, supervised fine-tuning on planner demonstrations, and ``meta.json``."""
    ws = model_cfg.warm_start
    started = time.time()
    torch.manual_seed(ws.seed)
    system_prompt, episodes = demonstration_episodes(env_cfg, ws.episodes, ws.suboptimal_prob, ws.template_prob, ws.seed)
    env = envs.from_config(env_cfg)
    corpus = [system_prompt, *env.templates, "Turn Reward : - . \n", *env.vocabulary_texts()]
    corpus += [m["content"] for turns in episodes for messages, resp in turns for m in messages] + [
        resp for turns in episodes for _, resp in turns
    ]
    tokenizer = build_tokenizer(corpus)
    model = LlamaForCausalLM(tiny_llama_config(model_cfg, tokenizer))
    sequences = [episode_sequence(tokenizer, turns) for turns in episodes]
    batches = length_bucketed_batches([len(ids) for ids, _ in sequences], ws.batch_size, ws.batch_tokens)
    final_loss = supervised_fine_tune(
        model, sequences, batches, ws.steps, ws.lr, ws.seed, tokenizer.pad_token_id, progress, ws.context_loss_weight
    )
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    meta = {
        "key": target.name,
        "params": sum(p.numel() for p in model.parameters()),
        "final_sft_loss": final_loss,
        "weights_sha256": weights_hash(model),
        "build_seconds": round(time.time() - started, 1),
        "sft_device": training_device().type,
        "env": env_cfg.name,
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    log.info("built tiny policy %s in %.0fs (sft loss %.3f)", target, meta["build_seconds"], final_loss)


def length_bucketed_batches(lengths: list[int], batch_size: int, batch_tokens: int | None = None) -> list[list[int]]:
    """Indices sorted by length, cut into batches of ``batch_size`` sequences, or, with
    ``batch_tokens``, of as many as fit (rows x longest length <= batch_tokens, at least one).
    Similar lengths together waste little on padding."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if batch_tokens is None:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:  # ascending, so the newest sequence is the longest of its batch
        if current and (len(current) + 1) * lengths[i] > batch_tokens:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def training_device() -> torch.device:
    """Where the supervised fine-tunes (the tiny build, a pretrained model's warm start) run: CUDA if any."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sft_loss(model: torch.nn.Module, ids: torch.Tensor, weights: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """The weighted mean next-token cross-entropy of a padded batch (``weights`` per position of ``ids``).
    Logits only at the positions some row has loss on: with the loss on responses alone (a pretrained
    model) the observations' [positions, vocabulary] logits are most of a step's memory. The losses go back
    to their places, zeros elsewhere, so the sum is the full batch's, in the same order: the same number,
    bit for bit, as over every position's logits."""
    w = weights[:, 1:]
    keep = torch.nonzero(w.any(0)).squeeze(1)
    if len(keep) == w.shape[1] or "logits_to_keep" not in forward_params(model):  # all positions, or a model without the option
        keep = torch.arange(w.shape[1], device=w.device)
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    else:
        logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep).logits
    targets = ids[:, 1:].index_select(1, keep)
    kept_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    token_loss = torch.zeros_like(w).index_copy(1, keep, kept_loss.reshape(targets.shape)).reshape(-1)
    w = w.reshape(-1)
    return (token_loss * w).sum() / w.sum()


def supervised_fine_tune(
    model: torch.nn.Module,
    sequences: list[tuple[list[int], list[int]]],
    buckets: list[list[int]],
    steps: int,
    lr: float,
    seed: int,
    pad_id: int,
    progress: bool,
    context_weight: float = 0.0,
) -> float:
    """AdamW with warmup + cosine decay. Context tokens get ``context_weight`` of a response token's
    loss: modelling the observations too is what teaches the small model to look at (copy from) them.
    Runs on the CUDA GPU where there is one (on a GPU machine's CPU, SmolLM2's 48 steps took ~5 min) and
    hands the model back on the CPU, where its caller merges, hashes and saves it."""
    device = training_device()
    model.to(device)
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    model.train()
    bar = Progress(steps, "warm start (SFT)") if progress else None
    loss_value = float("nan")
    # The batches' order is shuffled each pass.
    for step in range(steps):
        if step % len(buckets) == 0:
            schedule_order = torch.randperm(len(buckets), generator=gen).tolist()
        idx = buckets[schedule_order[step % len(buckets)]]
        width = max(len(sequences[i][0]) for i in idx)
        ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
        weights = torch.zeros((len(idx), width))
        attn = torch.zeros((len(idx), width), dtype=torch.long)
        for row, i in enumerate(idx):
            seq, mask = sequences[i]
            ids[row, : len(seq)] = torch.tensor(seq)
            attn[row, : len(seq)] = 1
            weights[row, : len(seq)] = torch.tensor([1.0 if m else context_weight for m in mask])
        loss = sft_loss(model, ids.to(device), weights.to(device), attn.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss_value = float(loss.detach())
        if bar is not None:
            bar.update(1, loss=loss_value)
    if bar is not None:
        bar.close()
    model.to("cpu")
    model.eval()
    return loss_value


def load_tokenizer(path: str | os.PathLike) -> PreTrainedTokenizerFast:
    # PreTrainedTokenizerFast, not AutoTokenizer: the latter may pick a class that encodes differently.
    return PreTrainedTokenizerFast.from_pretrained(str(path))
