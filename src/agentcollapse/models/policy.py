"""Load the policy named by the config (tiny, smollm2-135m, or any local causal LM) and wrap it in LoRA.

The reference policy for KL is the same model with the adapter disabled (``model.disable_adapter()``),
so no second copy of the weights is held.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from peft import LoraConfig as PeftLoraConfig
from peft import PeftModel, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

from agentcollapse.errors import UserError
from agentcollapse.models.hf import FoldedLoRA
from agentcollapse.models.tiny import build_tiny_policy, load_tokenizer

if TYPE_CHECKING:  # models sit below the config layer: configs are read, never imported
    from agentcollapse.config import EnvConfig, ModelConfig

MODEL_NAMES = ("tiny", "smollm2-135m", "hf")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Policy:
    """What a rollout needs of a policy: the model, its tokenizer and when to stop decoding."""

    model: torch.nn.Module
    tokenizer: Any
    fold_lora_for_decoding: bool = True  # decode with a copy whose adapters are folded in (FoldedLoRA)
    reuse_kv_across_turns: bool = True  # keep each trajectory's KV cache from turn to turn (rollout.reuse_kv)
    _folded: Any = field(default=None, init=False, repr=False, compare=False)

    def decoding_model(self) -> torch.nn.Module:
        """The model rollouts decode with: the policy itself, or its folded-LoRA copy brought up to date."""
        if not self.fold_lora_for_decoding:
            return self.model
        if self._folded is None or self._folded.source is not self.model:
            self._folded = FoldedLoRA(self.model)
            return self._folded.model
        return self._folded.refresh()

    @property
    def stop_ids(self) -> set[int]:
        ids = {int(self.tokenizer.eos_token_id)}
        close = self.tokenizer.convert_tokens_to_ids("</answer>")
        if isinstance(close, int) and close != self.tokenizer.unk_token_id:
            ids.add(close)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        text = self.tokenizer.decode(list(ids), skip_special_tokens=False)
        for tok in (self.tokenizer.eos_token, self.tokenizer.pad_token):
            if tok:
                text = text.replace(tok, "")
        return text.strip()


def resolve_model_dir(model_cfg: ModelConfig, env_cfg: EnvConfig, cache_dir: str | os.PathLike) -> Path:
    """The local directory of the base model, building or converting it first when needed."""
    if model_cfg.path:
        return check_causal_lm_dir(model_cfg.path, model_cfg.hub_id)
    if model_cfg.name == "tiny":
        return build_tiny_policy(model_cfg, env_cfg, cache_dir)
    if model_cfg.name == "smollm2-135m":
        from agentcollapse.models.smollm2 import smollm2_dir

        return smollm2_dir(cache_dir)
    if model_cfg.name == "hf":
        raise UserError(hf_path_message(None, model_cfg.hub_id))
    raise UserError(f"unknown model {model_cfg.name!r}; valid models: {', '.join(MODEL_NAMES)} (or set model.path=<dir>)")


def hf_path_message(path: str | os.PathLike | None, hub_id: str | None = None) -> str:
    """The one line for a missing model directory; with a preset's ``hub_id`` it names the download
    command (run by the user: nothing downloads at run time)."""
    if not hub_id:
        if path is None:
            return "model=hf needs model.path=<local Hugging Face model directory>"
        return f"model.path={path} does not exist; give a local Hugging Face model directory"
    target = path or f"/models/{hub_id.split('/')[-1]}"
    head = f"model.path={path} does not exist" if path else "this model preset needs model.path=<dir>"
    return f"{head}; get the weights with `huggingface-cli download {hub_id} --local-dir {target}`, then pass model.path={target}"


def check_causal_lm_dir(path: str | os.PathLike, hub_id: str | None = None) -> Path:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise UserError(hf_path_message(path, hub_id))
    try:
        config = AutoConfig.from_pretrained(str(p), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise UserError(f"model.path={path} has no usable config.json ({str(exc).splitlines()[0]})") from None
    archs = getattr(config, "architectures", None) or []
    if archs and not any(a.endswith("ForCausalLM") for a in archs):
        raise UserError(f"model.path={path} is a {archs[0]}, not a causal LM; give a *ForCausalLM checkpoint")
    return p


def load_policy(model_cfg: ModelConfig, env_cfg: EnvConfig, cache_dir: str | os.PathLike, seed: int = 0) -> Policy:
    model_dir = resolve_model_dir(model_cfg, env_cfg, cache_dir)
    dtype = DTYPES.get(model_cfg.dtype)
    if dtype is None:
        raise UserError(f"model.dtype={model_cfg.dtype!r} is not one of {', '.join(DTYPES)}")
    try:
        tokenizer = load_tokenizer(model_dir)
        base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise UserError(f"could not load a causal LM from {model_dir}: {str(exc).splitlines()[0]}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    for p in base.parameters():
        p.requires_grad_(False)
    torch.manual_seed(seed)  # LoRA init is random: tie it to the run seed
    lora = model_cfg.lora
    model = get_peft_model(
        base,
        PeftLoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=list(lora.target_modules), bias="none"),
    )
    return Policy(model=model, tokenizer=tokenizer)


def is_peft(model: torch.nn.Module) -> bool:
    return isinstance(model, PeftModel)


__all__ = ["DTYPES", "Policy", "load_policy", "resolve_model_dir", "check_causal_lm_dir", "hf_path_message", "MODEL_NAMES"]
