"""The step-0 evaluation, shared by the runs that start from the same policy.

Before its first update a run evaluates the warm-start policy. Every trial of a sweep with the same
seed evaluates the same weights on the same held-out maps with the same sampling streams, so all of
them get the same numbers, and the default grid spends about a fifth of its validation time
recomputing them. With ``trainer.shared_eval_dir`` set (the sweeper sets ``<sweep dir>/shared_eval``),
the first run stores its step-0 result there and the others read it back.

The key hashes the policy's weights and every config field except the ones that only act after step 0:
the algorithm, the filter, the diagnostics, the callbacks and the training rollout's sizes. An unknown
new field goes into the key, so a wrongly shared result cannot happen that way; at worst a result is
not shared. Skipping the evaluation changes nothing that follows, because the evaluation draws from
its own sampling streams and not from the global generators (a test checks this).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import torch

from agentcollapse.config import RunConfig
from agentcollapse.models.tiny import weights_hash

__all__ = ["SharedEvaluations", "step0_key"]

# Config fields that cannot change the step-0 evaluation: what trains, what watches, where it writes.
TRAINING_ONLY = {
    "": ("algorithm", "filter", "diagnostics", "callbacks", "logger", "sweep", "run_dir", "resume", "cache_dir"),
    "trainer": ("max_steps", "val_every", "checkpoint_every", "progress_bar", "shared_eval_dir"),
    "rollout": ("num_prompts", "group_size", "temperature", "min_new_tokens"),
}


def step0_key(cfg: RunConfig, model: torch.nn.Module) -> str:
    """What the step-0 evaluation depends on: the weights, the seed, the env, the evaluation settings."""
    fields = dataclasses.asdict(cfg)
    for section, names in TRAINING_ONLY.items():
        node = fields[section] if section else fields
        for name in names:
            node.pop(name, None)
    text = json.dumps({"config": fields, "weights": weights_hash(model)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class SharedEvaluations:
    """Step-0 metrics stored as ``<directory>/<key>.json``; concurrent writers store the same numbers."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def load(self, key: str) -> dict[str, float] | None:
        path = self.directory / f"{key}.json"
        try:
            return {k: float(v) for k, v in json.loads(path.read_text())["metrics"].items()}
        except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError, ValueError):
            return None  # absent, or half-written by a run that died: evaluate again

    def store(self, key: str, metrics: dict[str, float]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"metrics": metrics}, indent=1, sort_keys=True))
        os.replace(tmp, self.directory / f"{key}.json")  # atomic: a reader sees all of it or nothing
