"""``SNRFilter``: the callback that intervenes. It scores the rollout's prompt groups (reward std by
default) and returns the groups the update trains on (docs/method.md section 5); the math is
:func:`agentcollapse.filtering.decide`. A run of consecutive iterations where nothing is kept stops the
run (``filter.max_empty_steps``): no group carried task signal for that long.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import lightning as L
from agentcollapse.config import FilterConfig, RunConfig
from agentcollapse.filtering import decide, required_feature
from agentcollapse.lightning.hooks import HookResult, Selection
from agentcollapse.rollout.batch import RolloutBatch

__all__ = ["SNRFilter"]


class SNRFilter(L.Callback):
    def __init__(self, settings: FilterConfig) -> None:
        self.settings = settings
        self.empty_steps = 0  # consecutive iterations whose selection was empty

    @classmethod
    def from_run_config(cls, cfg: RunConfig) -> SNRFilter:
        return cls(cfg.filter)

    def features(self, module: Any, batch: RolloutBatch) -> dict[str, np.ndarray]:
        """The per-trajectory ``[P, G]`` values the score needs besides the returns (entropy, length)."""
        f = self.settings
        need = required_feature(f.metric) if f.name != "none" and f.trajectory_k == 0 else None
        shape = (batch.num_prompts, batch.group_size)
        if need == "length":
            return {need: np.asarray([t.response_length for t in batch.trajectories], dtype=np.float64).reshape(shape)}
        if need == "entropy":  # sequence-mean token entropy of the policy on its own samples
            return {need: np.asarray(module.trajectory_entropies(batch), dtype=np.float64).reshape(shape)}
        return {}

    def on_rollout(self, module: Any, batch: RolloutBatch, step: int) -> HookResult:
        decision = decide(batch.returns(), batch.successes(), self.features(module, batch), **self.settings.filter_options())
        selection = Selection(decision.kept_groups, decision.trajectory_mask, decision.loss_scale)
        self.empty_steps = self.empty_steps + 1 if selection.is_empty else 0
        if self.empty_steps >= self.settings.max_empty_steps:
            module.request_stop(f"filter kept no group for {self.empty_steps} consecutive steps (filter={self.settings.name})")
        return HookResult(metrics=dict(decision.metrics), selection=selection)

    def state_dict(self) -> dict[str, Any]:
        return {"empty_steps": self.empty_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.empty_steps = int(state.get("empty_steps", 0))
