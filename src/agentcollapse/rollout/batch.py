"""What one rollout batch holds: P prompts x G trajectories, each a list of turns with token spans.

Token spans (X = context, Z/A = response) are kept per turn so diagnostics can re-score them and the
update can compute log-probs without re-tokenising text.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np


@dataclass
class Turn:
    context_ids: list[int]  # X: whole prompt for this turn; ends with the generation prompt + "<think>"
    response_ids: list[int]  # generated tokens: Z </think><answer> A </answer> [eos]
    response_text: str
    think: str  # parsed reasoning Z, stripped ("" when missing)
    answer: str
    format_valid: bool
    action_is_valid: bool
    reward: float  # env reward for this turn, format penalty included
    grounding: float | None = None  # share of true state claims in the reasoning (None: no claims)
    observation: str = ""  # the user message of this turn as the agent read it (copy detection)
    sample_logprobs: list[float] | None = None  # the vLLM engine's log-prob of each response token (hf: None)
    # a later turn whose context was re-rendered from text at a window start (rollout.context=window |
    # single_turn) rather than extended from the last one: it begins a new training sequence
    window_start: bool = False


@dataclass
class Trajectory:
    group: int  # prompt index in [0, P)
    env_seed: int
    turns: list[Turn] = field(default_factory=list)
    success: bool = False
    policy_version: int = 0  # the version (iterations of updates) of the weights it was sampled from

    @property
    def episode_return(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def response_length(self) -> float:
        """Mean generated tokens per turn."""
        return float(np.mean([len(t.response_ids) for t in self.turns])) if self.turns else 0.0


@dataclass
class RolloutBatch:
    trajectories: list[Trajectory]  # group-major: index p * G + g
    num_prompts: int
    group_size: int

    def returns(self) -> np.ndarray:
        """Episode returns as a [P, G] array."""
        r = np.array([t.episode_return for t in self.trajectories], dtype=np.float64)
        return r.reshape(self.num_prompts, self.group_size)

    def successes(self) -> np.ndarray:
        s = np.array([t.success for t in self.trajectories], dtype=np.float64)
        return s.reshape(self.num_prompts, self.group_size)

    @staticmethod
    def concat(batches: list[RolloutBatch]) -> RolloutBatch:
        """One batch holding every group of ``batches`` in order (groups renumbered 0..P-1)."""
        if not batches:
            raise ValueError("concat needs at least one batch")
        size = batches[0].group_size
        if any(b.group_size != size for b in batches):
            raise ValueError("every batch must have the same group size")
        trajs, offset = [], 0
        for b in batches:
            trajs += [replace(t, group=t.group + offset) for t in b.trajectories]
            offset += b.num_prompts
        return RolloutBatch(trajectories=trajs, num_prompts=offset, group_size=size)

    def select_groups(self, groups: list[int] | np.ndarray) -> RolloutBatch:
        """A batch holding only the given prompt groups (renumbered 0..len-1, order kept)."""
        groups = [int(g) for g in groups]
        g = self.group_size
        trajs = []
        for new_p, p in enumerate(groups):
            for t in self.trajectories[p * g : (p + 1) * g]:
                trajs.append(replace(t, group=new_p))
        return RolloutBatch(trajectories=trajs, num_prompts=len(groups), group_size=g)
