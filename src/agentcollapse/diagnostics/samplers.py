"""The MI-proxy samplers of docs/method.md section 3: RolloutBatch -> (contexts, traces, row_col, stats).

Each sampler is one function decorated with ``@register_sampler(name)``, with the signature
``(batch, encode_think, rng, num_samples=None, replace=False) -> ProxySample``; its metrics are
logged as ``collapse_<name>_sample/<metric>`` (:func:`sampler_prefix`).

* ``first_turn`` (:func:`first_turn_sample`): the first turn of every trajectory; columns = the P
  prompts (the first turn's context of the first trajectory of each group that has a turn), rows =
  the trajectories' non-empty first-turn reasoning, optionally ``num_samples`` of them (the
  authors cap this at 64, drawn without replacement).
* ``trajectory`` (:func:`trajectory_sample`): every trajectory (or ``num_samples`` draws of one,
  without or, as the authors do, with replacement), one turn drawn uniformly; each kept (X, Z) pair
  is its own column, so row r's column is r.
* ``first_turn_nocopy``, ``trajectory_nocopy``: the same draws, with ``token_weights`` 0 on the
  reasoning tokens copied from the turn's observation (``Turn.observation``;
  :mod:`agentcollapse.diagnostics.copying`), so the scores and the per-token length count only the
  rest: MI beyond copying. A trace that only copies scores 0 under every context (no information
  beyond copying: chance retrieval) and counts as one token. Registered after the two above, so
  their draws from the shared rng are unchanged.

Rows are the reasoning text ``Turn.think`` re-tokenised with ``encode_think`` (the caller's
tokenizer, no special tokens). Traces with empty reasoning (blank text or no tokens) are dropped;
their share is ``valid_thinking_rate``. Trajectories without any turn are not candidates. Identical
contexts can occur (e.g. two draws of the same turn): pass ``column_equivalence(contexts)`` to
``proxy_metrics``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from agentcollapse.diagnostics.copying import MIN_COPY_WORDS, copied_token_mask
from agentcollapse.registry import Registry
from agentcollapse.rollout.batch import RolloutBatch, Turn

__all__ = [
    "ProxySample",
    "SamplerFn",
    "SamplerSpec",
    "first_turn_nocopy_sample",
    "first_turn_sample",
    "get_sampler",
    "register_sampler",
    "reasoning_ids",
    "sampler_names",
    "sampler_prefix",
    "trajectory_nocopy_sample",
    "trajectory_sample",
]

EncodeFn = Callable[[str], list[int]]


class ProxySample(NamedTuple):
    contexts: list[list[int]]  # columns
    traces: list[list[int]]  # rows
    row_col: list[int]  # column of each row's own context
    # valid_thinking_rate, num_candidates, num_valid (non-empty candidates), num_traces (rows kept),
    # num_contexts, state_grounding (mean Turn.grounding of the rows that make claims; NaN: none);
    # the nocopy samplers add copied_token_frac
    stats: dict[str, float]
    # per row, one weight per trace token for the scores' sums (None: all 1)
    token_weights: list[list[float]] | None = None

    def lengths(self) -> list[float]:
        """Each row's per-token length |Z|: its tokens, or the sum of its weights, at least 1 (a row
        whose every weight is 0 scores 0 under every context, whatever it is divided by)."""
        if self.token_weights is None:
            return [float(len(t)) for t in self.traces]
        return [max(1.0, float(sum(w))) for w in self.token_weights]


class SamplerFn(Protocol):
    def __call__(
        self,
        batch: RolloutBatch,
        encode_think: EncodeFn,
        rng: np.random.Generator | None = ...,
        num_samples: int | None = ...,
        replace: bool = ...,
    ) -> ProxySample: ...


@dataclass(frozen=True)
class SamplerSpec:
    name: str
    fn: SamplerFn
    help: str
    # the sampler whose draw options (diagnostics.<it>_samples, ...) this one takes: its own name but for
    # samplers that draw as another does (the nocopy ones)
    draws_like: str = ""


_SAMPLERS: Registry[SamplerSpec] = Registry("MI-proxy sampler")


def register_sampler(name: str, draws_like: str = "") -> Callable[[SamplerFn], SamplerFn]:
    """Decorator: register ``fn(batch, encode_think, rng, num_samples, replace)`` as sampler ``name``,
    drawing with the options of sampler ``draws_like`` (default: its own)."""

    def deco(fn: SamplerFn) -> SamplerFn:
        doc = (fn.__doc__ or "").strip().splitlines()
        _SAMPLERS.add(name, SamplerSpec(name, fn, doc[0] if doc else "", draws_like or name))
        return fn

    return deco


def sampler_names() -> tuple[str, ...]:
    """Registered sampler names, in registration order (the order they run in)."""
    return _SAMPLERS.names()


def get_sampler(name: str) -> SamplerSpec:
    return _SAMPLERS.get(name)


def sampler_prefix(name: str) -> str:
    """The metric namespace of sampler ``name``: ``collapse_<name>_sample``."""
    return f"collapse_{name}_sample"


def sampler_prefixes() -> tuple[str, ...]:
    """Every registered sampler's metric namespace, in the order they run."""
    return tuple(sampler_prefix(name) for name in sampler_names())


def reasoning_ids(turn: Turn, encode_think: EncodeFn) -> list[int]:
    """The turn's reasoning Z re-tokenised; ``[]`` when it is blank (such a trace is not valid)."""
    think = (turn.think or "").strip()
    if not think:
        return []
    return [int(t) for t in encode_think(think)]


def _stats(num_candidates: int, num_valid: int, num_traces: int, num_contexts: int) -> dict[str, float]:
    return {
        "valid_thinking_rate": num_valid / num_candidates if num_candidates else float("nan"),
        "num_candidates": float(num_candidates),
        "num_valid": float(num_valid),
        "num_traces": float(num_traces),
        "num_contexts": float(num_contexts),
    }


def _grounding(turns: list[Turn]) -> float:
    """Mean state grounding of the scored rows: reported beside their MI, as retrieval can stay
    high on restated coordinates while the rest of the reasoning stops being true."""
    known = [t.grounding for t in turns if t.grounding is not None]
    return float(np.mean(known)) if known else float("nan")


def _check_num_samples(num_samples: int | None) -> None:
    if num_samples is not None and (isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples < 0):
        raise ValueError(f"num_samples must be None or an integer >= 0, got {num_samples!r}")


def _draw(pool: list[int], num_samples: int, rng: np.random.Generator | None, replace: bool) -> list[int]:
    """``num_samples`` entries of ``pool`` (with or without replacement), in pool order."""
    if rng is None:
        raise ValueError("sub-sampling needs an rng: pass a numpy Generator")
    picked = rng.choice(len(pool), size=int(num_samples), replace=replace)
    return [pool[i] for i in sorted(int(i) for i in picked)]


def _first_turn(
    batch: RolloutBatch,
    encode_think: EncodeFn,
    rng: np.random.Generator | None,
    num_samples: int | None,
    replace: bool,
) -> tuple[ProxySample, list[Turn]]:
    """:func:`first_turn_sample` and the turn behind each row."""
    _check_num_samples(num_samples)
    group_ctx: dict[int, list[int]] = {}
    for traj in batch.trajectories:
        if traj.turns and traj.group not in group_ctx:
            group_ctx[traj.group] = list(traj.turns[0].context_ids)
    groups = sorted(group_ctx)
    col_of_group = {g: i for i, g in enumerate(groups)}
    contexts = [group_ctx[g] for g in groups]

    valid: list[tuple[list[int], int, Turn]] = []
    candidates = 0
    for traj in batch.trajectories:
        if not traj.turns:
            continue
        candidates += 1
        ids = reasoning_ids(traj.turns[0], encode_think)
        if ids:
            valid.append((ids, col_of_group[traj.group], traj.turns[0]))
    rows = list(range(len(valid)))
    if num_samples is not None and (replace or num_samples < len(valid)) and valid:
        rows = _draw(rows, num_samples, rng, replace)
    traces = [valid[i][0] for i in rows]
    row_col = [valid[i][1] for i in rows]
    turns = [valid[i][2] for i in rows]
    stats = {**_stats(candidates, len(valid), len(traces), len(contexts)), "state_grounding": _grounding(turns)}
    return ProxySample(contexts, traces, row_col, stats), turns


@register_sampler("first_turn")
def first_turn_sample(
    batch: RolloutBatch,
    encode_think: EncodeFn,
    rng: np.random.Generator | None = None,
    num_samples: int | None = None,
    replace: bool = False,
) -> ProxySample:
    """First-turn reasoning of each trajectory scored under the P prompts (one column per prompt).

    Groups none of whose trajectories has a turn get no column; column order follows group index.
    ``num_samples``: keep that many of the valid (non-empty) traces, drawn with ``rng`` (without
    replacement unless ``replace``; capped at the valid ones when drawing without replacement).
    Every prompt keeps its column even if none of its traces is drawn (``docs/parity.md``).
    """
    return _first_turn(batch, encode_think, rng, num_samples, replace)[0]


def _trajectory(
    batch: RolloutBatch,
    encode_think: EncodeFn,
    rng: np.random.Generator | None,
    num_samples: int | None,
    replace: bool,
) -> tuple[ProxySample, list[Turn]]:
    """:func:`trajectory_sample` and the turn behind each row."""
    _check_num_samples(num_samples)
    pool = [i for i, t in enumerate(batch.trajectories) if t.turns]
    if pool and rng is None:
        raise ValueError("the trajectory sampler draws a turn per trajectory: pass a numpy Generator")
    if replace and pool:
        draws = len(pool) if num_samples is None else int(num_samples)
        cap = sum(1 for i in pool for turn in batch.trajectories[i].turns if (turn.think or "").strip())
        # no valid pair at all: draw anyway, so valid_thinking_rate reads 0 rather than undefined
        pool = _draw(pool, min(draws, cap) if cap else draws, rng, True)
    elif num_samples is not None and num_samples < len(pool):
        pool = _draw(pool, num_samples, rng, False)

    contexts: list[list[int]] = []
    traces: list[list[int]] = []
    kept: list[Turn] = []
    for i in pool:
        turns = batch.trajectories[i].turns
        turn = turns[int(rng.integers(len(turns)))]  # type: ignore[union-attr]
        ids = reasoning_ids(turn, encode_think)
        if ids:  # drop empty reasoning BEFORE forming columns
            contexts.append(list(turn.context_ids))
            traces.append(ids)
            kept.append(turn)
    row_col = list(range(len(traces)))
    stats = {**_stats(len(pool), len(traces), len(traces), len(contexts)), "state_grounding": _grounding(kept)}
    return ProxySample(contexts, traces, row_col, stats), kept


@register_sampler("trajectory")
def trajectory_sample(
    batch: RolloutBatch,
    encode_think: EncodeFn,
    rng: np.random.Generator | None = None,
    num_samples: int | None = None,
    replace: bool = False,
) -> ProxySample:
    """One uniformly drawn turn per drawn trajectory; each non-empty (X, Z) pair is its own column.

    Without ``num_samples`` every trajectory with turns is drawn once. ``num_samples`` without
    ``replace``: that many distinct trajectories (capped at the number with turns). With
    ``replace`` (the authors' sampler): ``num_samples`` independent uniform draws (default: one per
    trajectory), capped at the number of turns with non-blank reasoning (when there is any), as
    theirs caps at the number of valid (trajectory, turn) pairs; a trajectory drawn twice may yield
    the same pair twice (equivalent columns). Drawn pairs keep the batch order.
    """
    return _trajectory(batch, encode_think, rng, num_samples, replace)[0]


def _without_copies(sample: ProxySample, turns: list[Turn], encode_think: EncodeFn, min_words: int) -> ProxySample:
    """``sample`` with token weights 0 on the reasoning copied from each row's observation."""
    weights: list[list[float]] = []
    for ids, turn in zip(sample.traces, turns):
        mask = copied_token_mask(turn.observation, (turn.think or "").strip(), encode_think, ids, min_words)
        weights.append([0.0 if copied else 1.0 for copied in mask])
    n_tokens = sum(len(t) for t in sample.traces)
    n_copied = sum(len(w) - sum(w) for w in weights)
    stats = {**sample.stats, "copied_token_frac": n_copied / n_tokens if n_tokens else float("nan")}
    return sample._replace(stats=stats, token_weights=weights)


@register_sampler("first_turn_nocopy", draws_like="first_turn")
def first_turn_nocopy_sample(
    batch: RolloutBatch,
    encode_think: EncodeFn,
    rng: np.random.Generator | None = None,
    num_samples: int | None = None,
    replace: bool = False,
    *,
    min_words: int = MIN_COPY_WORDS,
) -> ProxySample:
    """``first_turn`` scoring only the reasoning not copied from the observation (MI beyond copying).

    Its own draw (with ``num_samples``) from ``rng``; ``min_words``: the shortest copied run.
    """
    sample, turns = _first_turn(batch, encode_think, rng, num_samples, replace)
    return _without_copies(sample, turns, encode_think, min_words)


@register_sampler("trajectory_nocopy", draws_like="trajectory")
def trajectory_nocopy_sample(
    batch: RolloutBatch,
    encode_think: EncodeFn,
    rng: np.random.Generator | None = None,
    num_samples: int | None = None,
    replace: bool = False,
    *,
    min_words: int = MIN_COPY_WORDS,
) -> ProxySample:
    """``trajectory`` scoring only the reasoning not copied from each turn's observation.

    Its own draw from ``rng``; ``min_words``: the shortest copied run.
    """
    sample, turns = _trajectory(batch, encode_think, rng, num_samples, replace)
    return _without_copies(sample, turns, encode_think, min_words)
