"""``CollapseDiagnostics``: the MI proxy family and reward-variance statistics, logged during training.

A :class:`agentcollapse.lightning.hooks.RolloutHook`: it sees the full rollout batch before filtering.
The proxy is computed at step 1 and every ``compute_freq`` steps, by every registered sampler but
``skip_samplers``; its sigma EMAs and sampler RNG are part of the callback state, so Lightning saves
them in checkpoints.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

import lightning as L
from agentcollapse.config import RunConfig
from agentcollapse.diagnostics import ProxyEMAState, ProxyShare, collapse_metrics, reward_variance_stats, sampler_names, sampler_prefix
from agentcollapse.lightning import distributed
from agentcollapse.lightning.hooks import HookResult
from agentcollapse.rollout.batch import RolloutBatch


class CollapseDiagnostics(L.Callback):
    """Watches: logs the MI proxy family and reward-variance statistics (a :class:`RolloutHook`)."""

    def __init__(
        self,
        compute_freq: int = 5,
        batch_size: int = 64,
        seed: int = 0,
        trajectory_samples: int | None = 32,
        first_turn_samples: int | None = None,
        trajectory_replace: bool = False,
        skip_samplers: tuple[str, ...] = (),
        engine: str = "hf",
        proxy_dtype: str = "float32",
        split: bool = True,
    ) -> None:
        self.compute_freq = compute_freq
        self.engine = engine  # who cross-scores: the trainer's model (hf) or the rollout engine (vllm)
        self.autocast = None if proxy_dtype == "float32" else getattr(torch, proxy_dtype)
        self.batch_size = batch_size
        self.split = split  # data-parallel ranks each cross-score a share of the contexts
        self.trajectory_samples = trajectory_samples
        self.first_turn_samples = first_turn_samples
        self.trajectory_replace = trajectory_replace
        self.skip_samplers = tuple(skip_samplers)
        self.emas = {sampler_prefix(name): ProxyEMAState(decay=0.9) for name in sampler_names()}
        self.rng = np.random.default_rng(seed)

    @classmethod
    def from_run_config(cls, cfg: RunConfig) -> CollapseDiagnostics:
        d = cfg.diagnostics
        return cls(
            compute_freq=d.compute_freq,
            batch_size=d.score_batch_size,
            seed=cfg.seed,
            trajectory_samples=d.trajectory_samples or None,
            first_turn_samples=d.first_turn_samples or None,
            trajectory_replace=d.trajectory_replace,
            skip_samplers=tuple(d.skip_samplers),
            engine=d.proxy_engine,
            proxy_dtype=d.proxy_dtype,
            split=d.proxy_split,
        )

    def due(self, step: int) -> bool:
        return step == 1 or (self.compute_freq > 0 and step % self.compute_freq == 0)

    def on_rollout(self, module: Any, batch: RolloutBatch, step: int) -> HookResult:
        out = reward_variance_stats(batch)
        if self.due(step):
            started = time.perf_counter()
            rank, size = distributed.world()
            share = ProxyShare(rank, size, distributed.gather_objects, distributed.deal_evenly) if self.split and size > 1 else None
            out.update(
                collapse_metrics(
                    module.policy.decoding_model(),  # the folded-LoRA copy: same policy, no adapter overhead
                    module.policy.tokenizer,
                    batch,
                    self.emas,
                    self.rng,
                    self.batch_size,
                    self.trajectory_samples,
                    first_turn_samples=self.first_turn_samples,
                    trajectory_replace=self.trajectory_replace,
                    skip=self.skip_samplers,
                    score=module.rollout_engine().score if self.engine == "vllm" else None,
                    autocast=self.autocast,
                    share=share,
                )
            )
            out["perf/collapse_time_s"] = time.perf_counter() - started
        return HookResult(metrics=out)

    def state_dict(self) -> dict[str, Any]:
        return {"emas": {k: v.state_dict() for k, v in self.emas.items()}, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, v in state["emas"].items():
            self.emas[k].load_state_dict(v)
        self.rng.bit_generator.state = state["rng"]
