"""Load the policy named by the config (tiny, smollm2-135m, or any local causal LM) and wrap it in LoRA.

The reference policy for KL is the same model with the adapter disabled (``model.disable_adapter()``),
so no second copy of the weights is held.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from peft import PeftModel
from transformers import AutoConfig, AutoModelForCausalLM

from agentcollapse.errors import UserError
from agentcollapse.models.context import after_response_text
from agentcollapse.models.hf import FoldedLoRA, enable_activation_checkpointing, pad_on_the_left, quiet_loading
from agentcollapse.models.lora import add_lora
from agentcollapse.models.tiny import build_tiny_policy, load_tokenizer
from agentcollapse.models.warm_start import warm_started_dir
from agentcollapse.models.weights import DTYPE_NAMES, MODEL_NAMES, download_steps, hf_path_message, weights_advice

if TYPE_CHECKING:  # models sit below the config layer: configs are read, never imported
    from agentcollapse.config import EnvConfig, ModelConfig

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}
ANSWER_CLOSE = "</answer>"  # a response ends here (docs/method.md section 1)


@dataclass(frozen=True)
class StopText:
    """Stop decoding once the response's text contains ``text``, which a BPE tokenizer splits over
    several tokens (``</``, ``answer``, ``>``). Only a token holding the text's last character can
    complete it (``trigger_ids``), so the tail is decoded only after one of those."""

    text: str
    trigger_ids: frozenset[int]
    decode: Callable[[list[int]], str]

    def hit(self, ids: Sequence[int]) -> bool:
        # every token decodes to at least one character, so the last len(text) tokens cover it
        return self.text in self.decode(list(ids[-len(self.text) :]))

    @staticmethod
    def for_tokenizer(tokenizer: Any, text: str) -> StopText:
        pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        last = text[-1]
        trigger = frozenset(i for i, piece in enumerate(pieces) if piece and last in piece)
        return StopText(text, trigger, lambda ids: tokenizer.decode(ids, skip_special_tokens=False))


@dataclass
class Policy:
    """What a rollout needs of a policy: the model, its tokenizer and when to stop decoding."""

    model: torch.nn.Module
    tokenizer: Any
    fold_lora_for_decoding: bool = True  # decode with a copy whose adapters are folded in (FoldedLoRA)
    reuse_kv_across_turns: bool = True  # keep each trajectory's KV cache from turn to turn (rollout.reuse_kv)
    source_dir: Path | None = None  # the directory the base weights were loaded from (an inference engine loads it too)
    _folded: Any = field(default=None, init=False, repr=False, compare=False)
    _stop_text: Any = field(default=None, init=False, repr=False, compare=False)

    def decoding_model(self) -> torch.nn.Module:
        """The model rollouts decode with: the policy itself, or its folded-LoRA copy brought up to date."""
        if not self.fold_lora_for_decoding:
            return self.model
        if self._folded is None or self._folded.source is not self.model:
            self._folded = FoldedLoRA(self.model)
            return self._folded.model
        return self._folded.refresh()

    def _answer_close_id(self) -> int | None:
        close = self.tokenizer.convert_tokens_to_ids(ANSWER_CLOSE)
        return close if isinstance(close, int) and close != self.tokenizer.unk_token_id else None

    @property
    def stop_ids(self) -> set[int]:
        """EOS, and ``</answer>`` where it is one token (the tiny tokenizer)."""
        close = self._answer_close_id()
        return {int(self.tokenizer.eos_token_id)} | ({close} if close is not None else set())

    @property
    def stop_text(self) -> StopText | None:
        """``</answer>`` as text, where the tokenizer splits it over several tokens (BPE)."""
        if self._answer_close_id() is not None:
            return None
        if self._stop_text is None:
            self._stop_text = StopText.for_tokenizer(self.tokenizer, ANSWER_CLOSE)
        return self._stop_text

    def response_text(self, ids: Sequence[int]) -> str:
        """The response's text, cut after its first ``</answer>`` (a BPE token may run past it), without EOS/padding."""
        text = self.tokenizer.decode(list(ids), skip_special_tokens=False)
        end = text.find(ANSWER_CLOSE)
        if end >= 0:
            text = text[: end + len(ANSWER_CLOSE)]
        for tok in (self.tokenizer.eos_token, self.tokenizer.pad_token):
            if tok:
                text = text.replace(tok, "")
        return text.strip()


def resolve_model_dir(model_cfg: ModelConfig, env_cfg: EnvConfig, cache_dir: str | os.PathLike) -> Path:
    """The local directory of the policy RL starts from: the tiny model built here, or a pretrained
    model (converted first where needed), warm-started on the env when ``model.warm_start.enabled``."""
    return _resolve(model_cfg, env_cfg, cache_dir)[0]


def _resolve(model_cfg: ModelConfig, env_cfg: EnvConfig, cache_dir: str | os.PathLike) -> tuple[Path, Any | None]:
    """:func:`resolve_model_dir`, with the tokenizer it loaded on the way (a pretrained model's, checked),
    so a run loads its tokenizer once: the warm start keeps the base model's tokenizer as it is (it only
    saves it beside the tuned weights), so the base's is the warm-started model's too. None for the tiny
    model, whose directory holds the tokenizer built with it."""
    if model_cfg.name == "tiny" and not model_cfg.path:
        return build_tiny_policy(model_cfg, env_cfg, cache_dir), None
    base = pretrained_dir(model_cfg, cache_dir)
    tokenizer = check_tokenizer(base)
    if not model_cfg.warm_start.enabled:
        return base, tokenizer
    return warm_started_dir(base, model_cfg, env_cfg, cache_dir, tokenizer=tokenizer), tokenizer


def built_weights_sha256(model_dir: Path | None) -> str | None:
    """The SHA-256 of the weights this project built into ``model_dir`` (the tiny model, a warm start), as
    its ``meta.json`` records it; None for a directory it did not build. Two runs that should start from
    the same policy (a pair's arms, a run rebuilt on another machine) can then be checked to."""
    meta = Path(model_dir) / "meta.json" if model_dir is not None else None
    if meta is None or not meta.is_file():
        return None
    return json.loads(meta.read_text()).get("weights_sha256")


def pretrained_dir(model_cfg: ModelConfig, cache_dir: str | os.PathLike) -> Path:
    """The pretrained model's own directory (``model.path``, or the converted SmolLM2)."""
    if model_cfg.path:
        return check_causal_lm_dir(model_cfg.path, model_cfg.hub_id)
    if model_cfg.name == "smollm2-135m":
        from agentcollapse.models.smollm2 import smollm2_dir

        return smollm2_dir(cache_dir)
    if model_cfg.name == "hf":
        raise UserError(hf_path_message(None, model_cfg.hub_id))
    raise UserError(f"unknown model {model_cfg.name!r}; valid models: {', '.join(MODEL_NAMES)} (or set model.path=<dir>)")


def check_tokenizer(model_dir: Path) -> Any:
    """A pretrained model's tokenizer, checked for what rollouts need of it: an EOS token and a chat
    template that writes message contents verbatim (contexts are rendered with it)."""
    try:
        tokenizer = load_tokenizer(model_dir)
    except (OSError, ValueError) as exc:
        raise UserError(f"could not load a tokenizer from {model_dir}: {str(exc).splitlines()[0]}") from None
    if tokenizer.eos_token_id is None:
        raise UserError(
            f"the tokenizer in {model_dir} has no EOS token (decoding must know where a response ends); set eos_token in its tokenizer_config.json"
        )
    if not getattr(tokenizer, "chat_template", None):
        raise UserError(
            f"{model_dir} has no chat template (multi-turn contexts are rendered with it); use the model's chat/Instruct "
            "version, or add a chat_template.jinja to the directory"
        )
    try:
        after_response_text(tokenizer, "observation")
    except Exception as exc:  # a template that raises on our messages (e.g. strict role order) or drops the content
        raise UserError(f"the chat template in {model_dir} cannot render a multi-turn episode: {str(exc).splitlines()[0]}") from None
    return tokenizer


WEIGHT_SUFFIXES = (".safetensors", ".bin")
LFS_POINTER = b"version https://git-lfs"


def check_causal_lm_dir(path: str | os.PathLike, hub_id: str | None = None) -> Path:
    """``model.path`` as a directory a causal LM loads from, checked before anything heavy: it exists,
    has a config.json of a *ForCausalLM and weight files that are not Git LFS pointers. Each failure is
    one line that says how to bring the weights (:func:`weights_advice`)."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise UserError(f"model.path={path} is a file, not a model directory; {weights_advice(hub_id)}")
    if not p.is_dir():
        raise UserError(hf_path_message(path, hub_id))
    if not (p / "config.json").is_file():
        raise UserError(
            f"model.path={path} has no config.json: not a Hugging Face model directory, or an unfinished copy; {weights_advice(hub_id, path)}"
        )
    try:
        config = AutoConfig.from_pretrained(str(p), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise UserError(
            f"model.path={path} has no usable config.json ({str(exc).splitlines()[0]}); {weights_advice(hub_id, path)}"
        ) from None
    archs = getattr(config, "architectures", None) or []
    if archs and not any(a.endswith("ForCausalLM") for a in archs):
        raise UserError(f"model.path={path} is a {archs[0]}, not a causal LM; give a *ForCausalLM checkpoint")
    weights = sorted(f for f in p.iterdir() if f.suffix in WEIGHT_SUFFIXES and f.is_file())
    if not weights:
        raise UserError(
            f"model.path={path} has no weight files (*.safetensors or *.bin): an unfinished download or copy; {weights_advice(hub_id, path)}"
        )
    for f in weights:
        with f.open("rb") as fh:
            if fh.read(len(LFS_POINTER)) == LFS_POINTER:
                raise UserError(
                    f"model.path={path} holds Git LFS pointers, not weights ({f.name}: cloned without git-lfs); nothing downloads at run time: "
                    f"run `git lfs pull` in the clone on a machine with network and copy it here again, or {download_steps(hub_id, path)}"
                )
    return p


def load_policy(model_cfg: ModelConfig, env_cfg: EnvConfig, cache_dir: str | os.PathLike, seed: int = 0) -> Policy:
    model_dir, tokenizer = _resolve(model_cfg, env_cfg, cache_dir)
    dtype = DTYPES.get(model_cfg.dtype)
    if dtype is None:
        raise UserError(f"model.dtype={model_cfg.dtype!r} is not one of {', '.join(DTYPES)}")
    try:
        if tokenizer is None:
            tokenizer = load_tokenizer(model_dir)
        with quiet_loading():
            base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise UserError(f"could not load a causal LM from {model_dir}: {str(exc).splitlines()[0]}") from None
    pad_on_the_left(tokenizer)
    for p in base.parameters():
        p.requires_grad_(False)
    if model_cfg.gradient_checkpointing:
        enable_activation_checkpointing(base)
    torch.manual_seed(seed)  # LoRA init is random: tie it to the run seed
    lora = model_cfg.lora
    model = add_lora(base, lora.r, lora.alpha, lora.dropout, lora.target_modules)
    return Policy(model=model, tokenizer=tokenizer, source_dir=model_dir)


def is_peft(model: torch.nn.Module) -> bool:
    return isinstance(model, PeftModel)


__all__ = [
    "ANSWER_CLOSE",
    "DTYPES",
    "Policy",
    "StopText",
    "load_policy",
    "resolve_model_dir",
    "check_causal_lm_dir",
]
