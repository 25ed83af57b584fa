"""LoRA adapters on a causal LM (peft), with a clear error when the target modules do not exist."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from peft import LoraConfig as PeftLoraConfig
from peft import get_peft_model

from agentcollapse.errors import UserError

__all__ = ["add_lora"]


def add_lora(base: torch.nn.Module, r: int, alpha: int, dropout: float, target_modules: Sequence[str]) -> torch.nn.Module:
    """``base`` wrapped in a fresh LoRA adapter on every module named in ``target_modules``."""
    names = {name.rsplit(".", 1)[-1] for name, module in base.named_modules() if isinstance(module, torch.nn.Linear)}
    missing = sorted(set(target_modules) - names)
    if missing:
        raise UserError(
            f"model.lora.target_modules: {', '.join(missing)} not found in this {type(base).__name__}; "
            f"its linear layers are named {', '.join(sorted(names))}"
        )
    config = PeftLoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(target_modules), bias="none")
    return get_peft_model(base, config)
