"""The rollout hook: how callbacks watch a rollout batch and how one of them chooses what trains.

Contract (each RL iteration, in ``AgentRLModule.training_step``):

1. after the rollout and before the update, every callback that implements :class:`RolloutHook` is
   called once, in the order the run's ``callbacks`` lists them, with the pre-update policy;
2. every hook sees the whole batch: nothing is filtered before all hooks have run;
3. a hook returns :class:`HookResult`: the metrics it logs this step and, for a filter only, the
   :class:`Selection` the update trains on. At most one hook may return a selection; with none, the
   update trains on every group;
4. hooks must not change the batch or the policy's weights (read-only; their own state, such as an EMA
   or an RNG, goes into the checkpoint through Lightning's callback ``state_dict``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from agentcollapse.rollout.batch import RolloutBatch

if TYPE_CHECKING:  # the hooks' module is lightning.module's AgentRLModule, which imports this file
    from lightning import LightningModule

__all__ = ["HookResult", "RolloutHook", "Selection"]


@dataclass(frozen=True)
class Selection:
    """What the update trains on: prompt groups, optionally some trajectories of them, a loss scale."""

    groups: np.ndarray  # int64 indices into the batch's P groups
    trajectory_mask: np.ndarray | None = None  # [P, G] bool; None = every trajectory of a kept group
    loss_scale: float = 1.0

    @classmethod
    def everything(cls, num_prompts: int) -> Selection:
        return cls(groups=np.arange(num_prompts, dtype=np.int64))

    @property
    def is_empty(self) -> bool:
        return len(self.groups) == 0


@dataclass
class HookResult:
    metrics: dict[str, float] = field(default_factory=dict)
    selection: Selection | None = None


@runtime_checkable
class RolloutHook(Protocol):
    """A callback that sees each rollout batch before the update (see the module docstring)."""

    def on_rollout(self, module: LightningModule, batch: RolloutBatch, step: int) -> HookResult: ...
