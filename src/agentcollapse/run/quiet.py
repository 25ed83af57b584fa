"""Silence library output that says nothing to our users, where it starts; what remains is ours.

Each entry names what it hides and why it does not matter here.
"""

from __future__ import annotations

import logging
import warnings

__all__ = ["silence_library_noise"]

_WARNINGS = (
    # transformers 5 calls its own deprecated alias inside peft's wrapper: nothing the user can change.
    (FutureWarning, r".*is_gradient_checkpointing.*"),
    # lightning 2.6 checks a torch pytree class that torch 2.13 deprecated: internal to Lightning.
    (Warning, r".*isinstance\(treespec, LeafSpec\).*"),
    # one DataLoader item per RL iteration is by design; Lightning's batch-count heuristics misread it.
    (Warning, r".*The number of training batches.*log_every_n_steps.*"),
    (Warning, r".*Total length of .* across ranks is zero.*"),
    (Warning, r".*does not have many workers which may be a bottleneck.*"),
)
# Lightning's start-up banner (GPU/TPU availability, the litlogger advert, weights_only notes).
_QUIET_LOGGERS = ("lightning.pytorch", "lightning.fabric", "lightning_fabric", "pytorch_lightning")


def silence_library_noise() -> None:
    for category, message in _WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights" bars of a 1M-parameter model
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass
