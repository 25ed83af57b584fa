"""The supervised warm start of a pretrained model (``model.warm_start.enabled=true``).

A pretrained chat model does not write ``<think>...</think><answer>...</answer>`` on its own
(SmolLM2-135M-Instruct: format-valid rate 0.00, so every group's reward variance is 0 and RL has
nothing to learn from). It gets what the tiny policy gets: the env's planner demonstrations with
grounded reasoning (and the same shares of random actions and template reasoning), built into token
sequences exactly as rollouts build contexts. It needs only the format and the grounding, not the tiny
model's language, so it is a short LoRA fine-tune; the adapter is merged into the weights and the result
cached under a key of everything that shapes it. RL then puts a fresh LoRA adapter on top.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoModelForCausalLM

from agentcollapse import envs
from agentcollapse.models.cache import cached_build
from agentcollapse.models.hf import enable_activation_checkpointing, pad_token_id, quiet_loading
from agentcollapse.models.lora import add_lora
from agentcollapse.models.tiny import (
    demonstration_episodes,
    episode_sequence,
    length_bucketed_batches,
    load_tokenizer,
    supervised_fine_tune,
    training_device,
    weights_hash,
)

if TYPE_CHECKING:  # models sit below the config layer: configs are read, never imported
    from agentcollapse.config import EnvConfig, ModelConfig

log = logging.getLogger(__name__)
BUILD_VERSION = 1  # bump when the recipe changes, so caches rebuild

__all__ = ["BUILD_VERSION", "warm_start_key", "warm_started_dir"]


def _base_fingerprint(base_dir: Path) -> str:
    """The base model's identity: its config and tokenizer files, and its weight files' names and sizes
    (hashing gigabytes of weights on every start would cost more than it protects)."""
    h = hashlib.sha256()
    for f in sorted(base_dir.iterdir()):
        if f.suffix in (".json", ".jinja", ".model", ".txt"):
            h.update(f.name.encode() + f.read_bytes())
        elif f.suffix in (".safetensors", ".bin"):
            h.update(f"{f.name}:{f.stat().st_size}".encode())
    return h.hexdigest()


def warm_start_key(base_dir: Path, model_cfg: ModelConfig, env_cfg: EnvConfig) -> str:
    ws = asdict(model_cfg.warm_start) if not isinstance(model_cfg.warm_start, dict) else dict(model_cfg.warm_start)
    lora = model_cfg.lora
    spec = {
        "version": BUILD_VERSION,
        "base": _base_fingerprint(base_dir),
        "env": envs.episode_identity(env_cfg),
        "warm_start": {k: v for k, v in ws.items() if v is not None},
        "lora": [lora.r, lora.alpha, sorted(lora.target_modules)],
    }
    blob = json.dumps(spec, sort_keys=True, default=str)
    return f"warm-{base_dir.name}-{env_cfg.name}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def warm_started_dir(
    base_dir: Path, model_cfg: ModelConfig, env_cfg: EnvConfig, cache_dir: str | os.PathLike, progress: bool = True, tokenizer: Any = None
) -> Path:
    """Directory of ``base_dir``'s model fine-tuned on ``env_cfg``'s demonstrations; built once, then
    cached. ``tokenizer``: ``base_dir``'s, where the caller has loaded it already (else loaded here);
    the build reads it and saves it unchanged."""
    target = Path(cache_dir).expanduser() / warm_start_key(base_dir, model_cfg, env_cfg)
    return cached_build(target, lambda tmp: _build(tmp, target, base_dir, model_cfg, env_cfg, progress, tokenizer), marker="meta.json")


def _build(tmp: Path, target: Path, base_dir: Path, model_cfg: ModelConfig, env_cfg: EnvConfig, progress: bool, tokenizer: Any) -> None:
    """Cache entry ``target`` written into ``tmp``: ``base_dir``'s model LoRA fine-tuned on the env's
    demonstrations, the adapter merged into its weights, its tokenizer, and ``meta.json``."""
    ws, lora = model_cfg.warm_start, model_cfg.lora
    started = time.time()
    torch.manual_seed(ws.seed)
    if tokenizer is None:
        tokenizer = load_tokenizer(base_dir)
    with quiet_loading():
        base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32, local_files_only=True)
    _, episodes = demonstration_episodes(env_cfg, ws.episodes, ws.suboptimal_prob, ws.template_prob, ws.seed)
    sequences = [episode_sequence(tokenizer, turns) for turns in episodes]
    use_cache = base.config.use_cache
    if model_cfg.gradient_checkpointing:  # the same gradients; SmolLM2's 30 layers' activations are most of the build's memory
        enable_activation_checkpointing(base)
    model = add_lora(base, lora.r, lora.alpha, 0.0, lora.target_modules)
    batches = length_bucketed_batches([len(ids) for ids, _ in sequences], ws.batch_size, ws.batch_tokens)
    pad_id = pad_token_id(tokenizer)
    final_loss = supervised_fine_tune(model, sequences, batches, ws.steps, ws.lr, ws.seed, pad_id, progress, ws.context_loss_weight)
    merged = model.merge_and_unload()
    merged.config.use_cache = use_cache  # saved as loaded: checkpointing was the build's, not the model's
    with quiet_loading():
        merged.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tokens = [len(ids) for ids, _ in sequences]
    meta: dict[str, Any] = {
        "key": target.name,
        "base": str(base_dir),
        "env": env_cfg.name,
        "final_sft_loss": final_loss,
        "episodes": len(sequences),
        "mean_episode_tokens": sum(tokens) / max(1, len(tokens)),
        "weights_sha256": weights_hash(merged),
        "build_seconds": round(time.time() - started, 1),
        "sft_device": training_device().type,
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    log.info("warm-started %s on %s in %.0fs (sft loss %.3f)", base_dir.name, env_cfg.name, meta["build_seconds"], final_loss)
