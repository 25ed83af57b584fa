"""Hugging Face model, tokenizer and KV-cache helpers shared by decoding (``rollout``), cross-scoring
(``diagnostics``) and training: one place that knows how this transformers version names and lays out
the cache, and which id pads a batch and on which side (:func:`pad_token_id`, :func:`pad_on_the_left`).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = [
    "FoldedLoRA",
    "KVLayers",
    "RowCache",
    "base_model",
    "cache_from_layers",
    "cache_kwarg",
    "eval_no_grad",
    "folded_lora_weights",
    "forward_params",
    "growing_cache",
    "layer_tensors",
    "model_device",
    "output_cache",
    "PADDING_SIDE",
    "pad_on_the_left",
    "pad_token_id",
    "quiet_loading",
    "stack_row_caches",
]

KVLayers = list[tuple[torch.Tensor, torch.Tensor]]
"""Per-layer (keys, values), each ``[batch, heads, len, head_dim]``."""

RowCache = list[tuple[torch.Tensor, torch.Tensor]]
"""One sequence's per-layer (keys, values), each ``[heads, len, head_dim]``."""


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The underlying transformers model (unwraps a peft PeftModel)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def forward_params(model: torch.nn.Module) -> set[str]:
    """Names of the keyword arguments the model's ``forward`` accepts."""
    try:
        return set(inspect.signature(base_model(model).forward).parameters)
    except (TypeError, ValueError):  # pragma: no cover - exotic wrappers
        return set()


def cache_kwarg(params: set[str]) -> str:
    """transformers >= 5.x calls the cache argument ``cache``; older versions ``past_key_values``."""
    return "cache" if "cache" in params else "past_key_values"


def enable_activation_checkpointing(model: torch.nn.Module) -> None:
    """Recompute each decoder layer's activations in the backward instead of keeping them (non-reentrant:
    frozen embeddings need no requires_grad trick). Recomputation gives the same values, so the same
    gradients; the forward's cache is turned off (decoding passes ``use_cache=True`` itself)."""
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.20's name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:  # the release vLLM accepts (< 5.20)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False


def model_device(model: torch.nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:  # pragma: no cover
        return torch.device("cpu")


def output_cache(out: Any) -> Any:
    """The key/value cache a forward with ``use_cache=True`` returned."""
    cache = getattr(out, "cache", None)
    if cache is None:
        cache = getattr(out, "past_key_values", None)
    if cache is None:
        raise RuntimeError("model returned no key/value cache although use_cache=True was passed")
    return cache


@contextmanager
def eval_no_grad(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode + no_grad for the duration; every submodule's training flag is restored after."""
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, was_training in flags:
            m.training = was_training


def pad_token_id(tokenizer: Any) -> int:
    """The id that pads a batch: the tokenizer's pad token, else its EOS (causal LMs often have no pad;
    padded positions are masked out, so which id fills them does not matter beyond being a real one)."""
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id)


PADDING_SIDE = "left"  # a batch of prompts ends where generation starts


def pad_on_the_left(tokenizer: Any) -> Any:
    """``tokenizer`` (changed in place) as every policy's tokenizer is set up: a pad token (its own, else
    EOS: causal LMs often have none, and a padded position is masked out) and padding on the left, so
    a batch of prompts ends where generation starts. Returns it."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = PADDING_SIDE
    return tokenizer


@contextmanager
def quiet_loading() -> Iterator[None]:
    """No progress bars while loading, converting or saving weights: transformers' own bars, and the
    plain tqdm its GGUF reader imports (which ignores transformers' switch). Runs print their own progress."""
    import functools

    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # pragma: no cover - no GGUF support in this transformers
        gguf_utils = None
    gguf_tqdm = getattr(gguf_utils, "tqdm", None)
    if gguf_tqdm is not None:
        gguf_utils.tqdm = functools.partial(gguf_tqdm, disable=True)
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
        if gguf_tqdm is not None:
            gguf_utils.tqdm = gguf_tqdm


def layer_tensors(cache: Any) -> KVLayers:
    """Per-layer (keys, values) of a filled cache."""
    if hasattr(cache, "layers"):  # transformers >= 4.56 / 5.x
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "key_cache"):  # pragma: no cover - older DynamicCache
        return list(zip(cache.key_cache, cache.value_cache))
    return [(k, v) for k, v, *_ in cache]  # pragma: no cover - legacy tuples


def _growing_layer_class() -> type:
    """``DynamicLayer`` with its keys/values in buffers that have room to grow (built lazily: transformers
    is imported only when a cache is made)."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """Appends by writing into spare room instead of ``torch.cat``, which copies the whole cache at
        every decoded token (measured: a quarter of the tiny policy's rollout). ``keys``/``values`` are
        views of the first ``length`` positions of the buffers; the same values as ``DynamicLayer``'s.
        Whoever replaces ``keys``/``values`` (crop, ``cache_from_layers``) just makes the next update
        adopt the new tensors into fresh buffers."""

        def __init__(self, room: int) -> None:
            super().__init__()
            self.room = room  # positions reserved past each growth
            self._bufs: tuple[torch.Tensor, torch.Tensor] | None = None

        def _owns(self) -> bool:
            if self._bufs is None or self.keys is None or self.keys.dim() != 4:
                return False
            k, _ = self._bufs
            return self.keys.data_ptr() == k.data_ptr() and self.keys.shape[0] == k.shape[0]

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            old = self.get_seq_length() if self.keys is not None and self.keys.dim() == 4 else 0
            need = old + key_states.shape[-2]
            if not self._owns() or self._bufs[0].shape[-2] < need:
                shape = (*key_states.shape[:2], need + self.room, key_states.shape[-1])
                bufs = (key_states.new_empty(shape), value_states.new_empty(shape))
                if old:
                    bufs[0][:, :, :old] = self.keys
                    bufs[1][:, :, :old] = self.values
                self._bufs = bufs
            k, v = self._bufs
            k[:, :, old:need] = key_states
            v[:, :, old:need] = value_states
            self.keys, self.values = k[:, :, :need], v[:, :, :need]
            return self.keys, self.values

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self._owns():  # select rows of the buffers (one copy, as DynamicLayer's), room kept
                n = self.keys.shape[-2]
                self._bufs = (self._bufs[0][indices], self._bufs[1][indices])
                self.keys, self.values = self._bufs[0][:, :, :n], self._bufs[1][:, :, :n]
            else:
                super().batch_select_indices(indices)

    return GrowingLayer


def _cache_holding(config: Any, layers: KVLayers | None, layer: Any = None) -> Any:
    """A ``DynamicCache(config=config)`` whose layers hold ``layers`` (when given) without a copy, its
    plain ``DynamicLayer``s replaced by ``layer()`` ones when ``layer`` is given; None where this
    transformers version lays the cache out otherwise (no config, sliding windows, a layer count that
    differs from ``layers``')."""
    from transformers import DynamicCache

    if config is None:
        return None
    try:
        cache = DynamicCache(config=config)
    except (TypeError, ValueError, AttributeError):  # pragma: no cover - config-less fallback
        return None
    kinds = getattr(cache, "layers", None)
    if kinds is None or any(type(k).__name__ != "DynamicLayer" for k in kinds):
        return None
    if layers is not None and len(kinds) != len(layers):
        return None
    if layer is not None:
        cache.layers = [layer() for _ in kinds]
    try:
        for held, (k, v) in zip(cache.layers, layers or []):
            held.lazy_initialization(k, v)
            held.keys, held.values = k, v
    except (TypeError, AttributeError):  # pragma: no cover - other transformers versions
        return None
    return cache


def growing_cache(config: Any, room: int, layers: KVLayers | None = None) -> Any:
    """A DynamicCache for decoding: each layer keeps ``room`` spare positions so that appending a token
    writes in place (``GrowingLayer``), optionally starting from ``layers`` (not copied until the first
    append). Falls back to :func:`cache_from_layers`' plain cache where this transformers version lays
    the cache out differently (sliding windows, older versions)."""
    grow = _growing_layer_class()
    cache = _cache_holding(config, layers, lambda: grow(room))
    if cache is None and layers is not None:
        return cache_from_layers(layers, config)
    return cache


def cache_from_layers(layers: KVLayers, config: Any) -> Any:
    """A DynamicCache whose layers hold the given keys/values without a copy.

    The forward grows each layer with ``torch.cat`` (new storage), so the given tensors are never
    written to. Where the cache layout is not the expected one, falls back to the public constructor
    (which copies the tensors once).
    """
    from transformers import DynamicCache

    cache = _cache_holding(config, layers)
    if cache is not None:
        return cache
    if config is not None:
        try:
            return DynamicCache(layers, config=config)
        except (TypeError, ValueError, AttributeError):  # pragma: no cover
            pass
    return DynamicCache(layers)


def stack_row_caches(rows: list[RowCache | None], left: bool) -> tuple[KVLayers, torch.Tensor]:
    """Per-row caches (None: no prefix) as one batch: per layer ``[rows, heads, width, head_dim]`` zero-padded
    to the longest row, on the left (``left``: decoding continues every row at the same position) or on the
    right, and the mask ``[rows, width]`` of the real positions. At least one row must be given."""
    lengths = [0 if r is None else int(r[0][0].shape[1]) for r in rows]
    width, ref = max(lengths), next(r for r in rows if r is not None)
    spans = [slice(width - n, width) if left else slice(0, n) for n in lengths]
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=ref[0][0].device)
    for i, span in enumerate(spans):
        mask[i, span] = 1
    layers = []
    for layer, (k_ref, v_ref) in enumerate(ref):
        keys = k_ref.new_zeros((len(rows), k_ref.shape[0], width, k_ref.shape[2]))
        values = v_ref.new_zeros((len(rows), v_ref.shape[0], width, v_ref.shape[2]))
        for i, (r, span) in enumerate(zip(rows, spans)):
            if r is not None:
                keys[i, :, span], values[i, :, span] = r[layer]
        layers.append((keys, values))
    return layers, mask


class FoldedLoRA:
    """A decoding copy of a LoRA model with every active adapter folded into its weights.

    Decoding needs no gradients, and a LoRA linear costs two extra small matmuls, a scale and an add
    per call (measured: peft's LoRA forward was a third of the tiny policy's decode time). The copy is
    a plain model (``W' = W + scale * B @ A``, peft's own ``get_delta_weight``) that :meth:`refresh`
    brings up to date in place after each update. It holds one more copy of the weights; outputs
    match the adapter model up to float rounding. A model without adapters is used as it is.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        import copy

        from peft.tuners.lora import LoraLayer

        self.source = model
        self.pairs: list[tuple[Any, torch.nn.Module]] = []
        base = base_model(model)
        if not any(isinstance(m, LoraLayer) for m in base.modules()):
            self.model = model
            return
        self.model = copy.deepcopy(base)
        live = dict(base.named_modules())
        for name, module in list(self.model.named_modules()):
            if isinstance(module, LoraLayer):
                parent_name, _, child = name.rpartition(".")
                plain = module.base_layer
                setattr(self.model.get_submodule(parent_name) if parent_name else self.model, child, plain)
                self.pairs.append((live[name], plain))
        self.model.requires_grad_(False)
        self.model.eval()
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> torch.nn.Module:
        """Fold the source's current adapter weights in; returns the decoding model."""
        for lora, plain in self.pairs:
            plain.weight.copy_(_folded_weight(lora))
        return self.model


@torch.no_grad()
def _folded_weight(lora: Any) -> torch.Tensor:
    """A peft LoRA layer's base weight with its active adapters folded in (peft's ``get_delta_weight``)."""
    weight = lora.base_layer.weight.detach().clone()
    for adapter in lora.active_adapters:
        if adapter in lora.lora_A:
            weight += lora.get_delta_weight(adapter).to(weight.dtype)
    return weight


def folded_lora_weights(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``(checkpoint name, weight)`` of every LoRA-wrapped linear with its adapters folded in: the
    only weights LoRA training changes, named as in the model's own checkpoint (``model.layers.0.
    self_attn.q_proj.weight``), which is what an inference engine's ``load_weights`` reads."""
    from peft.tuners.lora import LoraLayer

    return [(f"{name}.weight", _folded_weight(m)) for name, m in base_model(model).named_modules() if isinstance(m, LoraLayer)]
