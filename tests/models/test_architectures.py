"""The architectures users bring, each through one RL iteration on CPU: tiny random-weight Qwen2 and
Llama-3 models (a few layers, but their families' attention biases, tied/untied heads, grouped-query
attention and rope settings) with SmolLM2's real BPE tokenizer and chat template. An architecture-specific
break (LoRA target names, KV-cache layout, tied embeddings, FoldedLoRA) shows up here, not on a GPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from agentcollapse.run import train as run_training

# one xdist worker runs every test that needs the converted SmolLM2 (converting it takes ~40 s)
pytestmark = pytest.mark.xdist_group("smollm2")

SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


def _qwen2(tok):
    from transformers import Qwen2Config

    # Qwen2.5-0.5B/3B: biases on q/k/v (built into Qwen2's attention), tied head, GQA, rope theta 1e6
    return Qwen2Config(**SMALL, vocab_size=len(tok), tie_word_embeddings=True, rope_theta=1_000_000.0, max_position_embeddings=32768)


def _llama3(tok):
    from transformers import LlamaConfig

    # Llama-3.x: untied head, GQA, no biases, llama3 rope scaling
    rope = {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    return LlamaConfig(
        **SMALL, vocab_size=len(tok), tie_word_embeddings=False, rope_theta=500_000.0, rope_scaling=rope, max_position_embeddings=131072
    )


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2", "llama3"])
def test_one_rl_iteration_per_architecture(family, tmp_path, make_cfg, cache_dir):
    from transformers import AutoModelForCausalLM

    from agentcollapse.models.smollm2 import smollm2_dir
    from agentcollapse.models.tiny import load_tokenizer

    source = smollm2_dir(cache_dir)
    tok = load_tokenizer(source)
    config = {"qwen2": _qwen2, "llama3": _llama3}[family](tok)
    config.bos_token_id, config.eos_token_id, config.pad_token_id = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
    torch.manual_seed(0)
    model_dir = tmp_path / family
    AutoModelForCausalLM.from_config(config).save_pretrained(model_dir)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(Path(source) / name, model_dir / name)
    targets = "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"
    cfg = make_cfg(
        "model=hf",
        f"model.path={model_dir}",
        "model.dtype=float32",
        f"model.lora.target_modules={targets}",
        "rollout.num_prompts=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=8",
        "env.kwargs.max_turns=2",
        "trainer.max_steps=1",
        "trainer.val_every=0",
        "diagnostics.compute_freq=1",
    )
    summary = run_training(cfg)
    assert summary["status"] == "finished", summary.get("reason")
    row = pd.read_csv(Path(cfg.run_dir) / "metrics.csv").iloc[-1]
    assert row["actor/num_sequences"] == 4  # one sequence per trajectory, with BPE too
    assert row["actor/optimizer_steps"] == 1 and row["actor/nonfinite_loss_count"] == 0
    assert pd.notna(row["collapse/valid_thinking_rate"])
