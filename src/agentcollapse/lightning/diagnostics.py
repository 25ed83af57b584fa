"""``CollapseDiagnostics``: the MI proxy family and reward-variance statistics, logged during training.

Runs on the full rollout batch before filtering (the module calls ``on_rollout`` on every callback
that has it). The proxy is computed at step 1 and every ``compute_freq`` steps; its sigma EMAs and
sampler RNG are part of the callback state, so Lightning saves them in checkpoints.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import numpy as np
import torch

from agentcollapse.diagnostics import (
    ProxyEMAState,
    column_equivalence,
    cross_score,
    first_turn_sample,
    proxy_metrics,
    trajectory_sample,
)
from agentcollapse.filtering import group_scores, rv_std_over_mean
from agentcollapse.rollout.batch import RolloutBatch
from agentcollapse.rollout.context import encode

SAMPLERS = ("collapse_first_turn_sample", "collapse_trajectory_sample")


def reward_variance_stats(batch: RolloutBatch) -> dict[str, float]:
    returns = batch.returns()
    if batch.group_size < 2:
        return {}
    rv = group_scores(returns, "reward_variance")
    return {"collapse/rv_std_over_mean": rv_std_over_mean(returns), "collapse/zero_rv_group_frac": float(np.mean(rv <= 1e-12))}


def collapse_metrics(model: torch.nn.Module, tokenizer: Any, batch: RolloutBatch, emas: dict[str, ProxyEMAState],
                     rng: np.random.Generator, batch_size: int = 64, trajectory_samples: int | None = None) -> dict[str, float]:
    """Both samplers' proxy metrics for one batch, named ``<sampler>/<metric>``."""
    out: dict[str, float] = {}
    encode_think = lambda text: encode(tokenizer, text)  # noqa: E731
    samples = {
        "collapse_first_turn_sample": first_turn_sample(batch, encode_think),
        "collapse_trajectory_sample": trajectory_sample(batch, encode_think, rng, num_samples=trajectory_samples),
    }
    for name, sample in samples.items():
        out[f"{name}/valid_thinking_rate"] = float(sample.stats["valid_thinking_rate"])
        if not sample.traces or len(sample.contexts) < 2:
            continue  # nothing to retrieve among: the metrics are undefined this step
        logp = cross_score(model, sample.contexts, sample.traces, batch_size=batch_size)
        z_len = torch.tensor([len(t) for t in sample.traces], dtype=torch.float32)
        row_col = torch.tensor(sample.row_col, dtype=torch.long)
        equiv = column_equivalence(sample.contexts)
        metrics = proxy_metrics(logp, z_len, row_col, equiv)
        metrics = emas[name].update(logp, z_len, row_col, metrics, equiv)
        out.update({f"{name}/{k}": float(v) for k, v in metrics.items()})
    out["collapse/valid_thinking_rate"] = out["collapse_first_turn_sample/valid_thinking_rate"]
    return out


class CollapseDiagnostics(L.Callback):
    def __init__(self, compute_freq: int = 5, batch_size: int = 64, seed: int = 0, trajectory_samples: int | None = 32) -> None:
        self.compute_freq = compute_freq
        self.batch_size = batch_size
        self.trajectory_samples = trajectory_samples
        self.emas = {name: ProxyEMAState(decay=0.9) for name in SAMPLERS}
        self.rng = np.random.default_rng(seed)

    def due(self, step: int) -> bool:
        return step == 1 or (self.compute_freq > 0 and step % self.compute_freq == 0)

    def on_rollout(self, module: Any, batch: RolloutBatch, step: int) -> dict[str, float]:
        out = reward_variance_stats(batch)
        if self.due(step):
            started = time.perf_counter()
            out.update(collapse_metrics(
                module.model, module.policy.tokenizer, batch, self.emas, self.rng, self.batch_size, self.trajectory_samples
            ))
            out["perf/collapse_time_s"] = time.perf_counter() - started
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"emas": {k: v.state_dict() for k, v in self.emas.items()}, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, v in state["emas"].items():
            self.emas[k].load_state_dict(v)
        self.rng.bit_generator.state = state["rng"]
