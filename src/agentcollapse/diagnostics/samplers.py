"""The two MI-proxy samplers of METHOD.md section 3: RolloutBatch -> (contexts, traces, row_col, stats).

* :func:`first_turn_sample`: the first turn of every trajectory; columns = the P prompts (the first
  turn's context of the first trajectory of each group that has a turn), rows = every trajectory's
  first-turn reasoning.
* :func:`trajectory_sample`: every trajectory (or ``num_samples`` of them), one turn drawn uniformly;
  each kept (X, Z) pair is its own column, so row r's column is r.

Rows are the reasoning text ``Turn.think`` re-tokenised with ``encode_think`` (the caller's tokenizer,
no special tokens). Traces with empty reasoning (blank text or no tokens) are dropped; their share is
``valid_thinking_rate``. Trajectories without any turn are not candidates. Identical contexts can occur
(e.g. two trajectory-sampler draws of the same group's first turn): pass
``column_equivalence(contexts)`` to ``proxy_metrics``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from agentcollapse.rollout.batch import RolloutBatch, Turn

__all__ = ["ProxySample", "first_turn_sample", "trajectory_sample"]

EncodeFn = Callable[[str], list[int]]


class ProxySample(NamedTuple):
    contexts: list[list[int]]  # columns
    traces: list[list[int]]  # rows
    row_col: list[int]  # column of each row's own context
    stats: dict[str, float]  # valid_thinking_rate, num_candidates, num_traces, num_contexts


def _encode(turn: Turn, encode_think: EncodeFn) -> list[int]:
    think = (turn.think or "").strip()
    if not think:
        return []
    return [int(t) for t in encode_think(think)]


def _stats(num_candidates: int, num_valid: int, num_contexts: int) -> dict[str, float]:
    return {
        "valid_thinking_rate": num_valid / num_candidates if num_candidates else float("nan"),
        "num_candidates": float(num_candidates),
        "num_traces": float(num_valid),
        "num_contexts": float(num_contexts),
    }


def first_turn_sample(batch: RolloutBatch, encode_think: EncodeFn) -> ProxySample:
    """Columns: one context per prompt group (in group order); rows: first-turn reasoning of each trajectory.

    Groups none of whose trajectories has a turn get no column. Column order follows group index.
    """
    group_ctx: dict[int, list[int]] = {}
    for traj in batch.trajectories:
        if traj.turns and traj.group not in group_ctx:
            group_ctx[traj.group] = list(traj.turns[0].context_ids)
    groups = sorted(group_ctx)
    col_of_group = {g: i for i, g in enumerate(groups)}
    contexts = [group_ctx[g] for g in groups]

    traces: list[list[int]] = []
    row_col: list[int] = []
    candidates = 0
    for traj in batch.trajectories:
        if not traj.turns:
            continue
        candidates += 1
        ids = _encode(traj.turns[0], encode_think)
        if ids:
            traces.append(ids)
            row_col.append(col_of_group[traj.group])
    return ProxySample(contexts, traces, row_col, _stats(candidates, len(traces), len(contexts)))


def trajectory_sample(
    batch: RolloutBatch,
    encode_think: EncodeFn,
    rng: np.random.Generator,
    num_samples: int | None = None,
) -> ProxySample:
    """One uniformly drawn turn per trajectory; each non-empty (X, Z) pair is its own column.

    ``num_samples``: draw that many trajectories without replacement (capped at the number of
    trajectories with turns) instead of using all of them; sampled pairs keep the batch order.
    """
    pool = [i for i, t in enumerate(batch.trajectories) if t.turns]
    if num_samples is not None and num_samples < len(pool):
        if num_samples < 0:
            raise ValueError("num_samples must be >= 0")
        pool = sorted(rng.choice(pool, size=num_samples, replace=False).tolist())

    contexts: list[list[int]] = []
    traces: list[list[int]] = []
    for i in pool:
        turns = batch.trajectories[i].turns
        turn = turns[int(rng.integers(len(turns)))]
        ids = _encode(turn, encode_think)
        if ids:  # drop empty reasoning BEFORE forming columns
            contexts.append(list(turn.context_ids))
            traces.append(ids)
    row_col = list(range(len(traces)))
    return ProxySample(contexts, traces, row_col, _stats(len(pool), len(traces), len(contexts)))
