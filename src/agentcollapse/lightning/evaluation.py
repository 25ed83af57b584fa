"""Held-out evaluation of the module's policy: every temperature in one rollout on the same held-out
maps (``seeds.validation_env_seeds``), and step 0's evaluation shared between runs of one policy
(``lightning.shared_eval``)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from agentcollapse import seeds
from agentcollapse.lightning import distributed
from agentcollapse.lightning.shared_eval import SharedEvaluations, step0_key
from agentcollapse.rollout.runner import rollout_metrics

if TYPE_CHECKING:  # the module is lightning.module's AgentRLModule, which imports this file
    from lightning import LightningModule

__all__ = ["evaluate", "evaluate_warm_start", "validation_metric_name"]


def evaluate_warm_start(module: LightningModule) -> dict[str, float]:
    """Step 0's evaluation, read from ``trainer.shared_eval_dir`` when a run of the same policy, seed
    and evaluation settings stored it there (``lightning.shared_eval``), else run (and stored)."""
    if not module.cfg.trainer.shared_eval_dir:
        return evaluate(module)
    shared = SharedEvaluations(module.cfg.trainer.shared_eval_dir)
    rank, _ = distributed.world()
    key = step0_key(module.cfg, module.model) if rank == 0 else ""  # only rank 0 reads and writes; hashing the weights is not free
    found = distributed.broadcast_object(shared.load(key) if rank == 0 else None)  # every rank takes one path
    if found is not None:
        return {**found, "perf/val_time_s": 0.0, "perf/val_shared": 1.0}
    out = evaluate(module)
    if rank == 0:
        shared.store(key, {k: v for k, v in out.items() if not k.startswith("perf/")})
    return {**out, "perf/val_shared": 0.0}


@torch.no_grad()
def evaluate(module: LightningModule) -> dict[str, float]:
    t0 = time.perf_counter()
    held_out = seeds.validation_env_seeds(module.cfg.trainer.val_episodes)
    temps = list(module.cfg.trainer.val_temperatures)
    n = len(held_out)
    # Every temperature in one rollout: one decode loop instead of one per temperature.
    batch, _ = module.sharded_rollout(
        held_out * len(temps), 1, [t for t in temps for _ in held_out], seeds.validation_sample_seed(module.cfg.seed)
    )
    out: dict[str, float] = {}
    for k, temp in enumerate(temps):
        part = batch.select_groups(range(k * n, (k + 1) * n))
        out[validation_metric_name(temp)] = float(part.successes().mean())
        if temp == 0.5:
            out["val/format_valid_rate"] = rollout_metrics(part)["rollout/format_valid_rate"]
    out["perf/val_time_s"] = time.perf_counter() - t0
    return out


def validation_metric_name(temperature: float) -> str:
    if temperature == 0.5:
        return "val/success_rate"  # the paper's evaluation temperature
    if temperature == 0:
        return "val/success_rate_greedy"
    return f"val/success_rate_t{temperature:g}"
