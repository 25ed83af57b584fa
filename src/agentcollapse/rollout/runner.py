"""Multi-turn rollouts: P prompts x G trajectories, the live trajectories of a slice decoded together each turn.

:func:`collect_rollouts` reads as its four jobs: start every trajectory (:func:`_start_trajectories`),
choose who decodes a turn (:func:`_turn_decoder`: the policy's own ``generate``, or a vLLM engine),
then turn by turn decode every live trajectory and play each response in its env
(:func:`_play_turn`), carrying each trajectory's KV cache to its next turn (:class:`_CarriedCaches`).
On the policy's own ``generate`` the trajectories go in slices of ``generation_batch_size``, each
played to its end before the next starts, so the caches held at once are a slice's, not the batch's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import torch

from agentcollapse.envs import TextEnv
from agentcollapse.envs.parsing import parse_response
from agentcollapse.models.context import first_context_ids, history_start, next_user_message, turn_context_ids
from agentcollapse.models.hf import pad_token_id
from agentcollapse.models.policy import Policy
from agentcollapse.rollout.batch import RolloutBatch, Trajectory, Turn
from agentcollapse.rollout.generate import RowCache, generate
from agentcollapse.rollout.vllm_engine import VLLMEngine
from agentcollapse.seeds import trajectory_stream_seed, turn_sample_seed


@dataclasses.dataclass(frozen=True)
class _LiveTrajectory:
    """A trajectory whose episode goes on: where it sits in the batch, its env and its next turn's input."""

    index: int  # into the batch's trajectories
    env: TextEnv
    context_ids: list[int]  # this turn's context
    user_content: str  # this turn's user message (the turn records it as its observation)
    generator: torch.Generator  # its random stream (the policy's decoding draws from it)
    stream_seed: int  # the same stream's seed (the engine derives each turn's seed from it)
    temperature: float
    turn: int = 0  # turns played so far
    window_start: bool = False  # this context was re-rendered at a window start (rollout.context=window)


# responses, caches, engine log-probs: one each per live trajectory
TurnOutput = tuple[list[list[int]], list[RowCache | None], list[list[float] | None]]


def collect_rollouts(
    policy: Policy,
    make_env: Callable[[], TextEnv],
    env_seeds: Sequence[int],
    group_size: int,
    temperature: float | Sequence[float],
    max_new_tokens: int,
    sample_seed: int,
    generation_batch_size: int = 256,
    stream_offset: int = 0,
    engine: VLLMEngine | None = None,
    context: str = "full",
    context_turns: int = 0,
    min_new_tokens: int = 0,
) -> tuple[RolloutBatch, dict[str, float]]:
    """Roll out ``group_size`` trajectories per env seed; returns the batch and timing stats.

    ``temperature`` is one for every trajectory or one per env seed (validation decodes all its
    temperatures in one batch that way). Trajectory ``i`` samples from stream ``stream_offset + i``:
    a DDP rank rolling out groups ``a..b`` of a larger batch passes ``a * group_size`` and draws the
    tokens the whole batch would have drawn for them.

    With an ``engine`` (vLLM) every turn is decoded there, each turn of trajectory ``i`` with its own
    seed derived from stream ``stream_offset + i``; the turns then carry the engine's log-probs.
    Without one the trajectories are decoded in slices of ``generation_batch_size``, each played to its
    end before the next starts: a trajectory draws the same tokens in any slice, and the KV caches held
    at once are one slice's.

    ``context`` (``full`` | ``window`` | ``single_turn``, with ``context_turns`` past turns for the
    window) sets which past turns each context shows (``models.context.turn_context_ids``); a turn
    whose context was re-rendered at a window start is marked ``window_start``. Each response runs at
    least ``min_new_tokens`` tokens before a stop token or the stop text may end it (``max_new_tokens``:
    every response runs to the budget)."""
    started = time.perf_counter()
    history_start(0, context, context_turns)  # an unknown mode or a window without turns: ValueError
    if engine is not None:  # a batch decodes the same whatever the engine served before (vllm_engine's docstring)
        engine.reset_prefix_cache()
    per_seed = _temperatures(temperature, len(env_seeds))
    trajectories, live = _start_trajectories(policy, make_env, env_seeds, group_size, per_seed, sample_seed, stream_offset)
    generated_tokens = 0
    # The trainer's model decodes only without an engine; with one it is left alone (a producer thread
    # decodes while the trainer's thread updates it in train mode).
    was_training = policy.model.training
    if engine is None:
        policy.model.eval()
    decode_turn = _turn_decoder(policy, engine, max_new_tokens, min_new_tokens)
    carried = _CarriedCaches(enabled=policy.reuse_kv_across_turns and engine is None)  # vLLM caches prefixes itself
    env_time = 0.0  # seconds in the envs: submitting answers, then stepping (and waiting for what they submitted)

    # vLLM pages its KV cache within its own budget and batches best when given everything at once.
    slice_size = max(len(live), 1) if engine is not None else generation_batch_size  # a rank may have no rows
    try:
        for start in range(0, len(live), slice_size):
            pending = live[start : start + slice_size]
            while pending:
                responses, caches, logprobs = decode_turn(pending, carried.prefixes(pending))
                t0 = time.perf_counter()
                _submit_answers(policy, pending, responses)
                still_live = []
                for t, response_ids, cache, sample_logprobs in zip(pending, responses, caches, logprobs):
                    generated_tokens += len(response_ids)
                    following = _play_turn(policy, t, trajectories[t.index], response_ids, sample_logprobs, context, context_turns)
                    if following is not None:
                        still_live.append(following)
                        carried.keep(t.index, t.context_ids, response_ids, cache)
                env_time += time.perf_counter() - t0
                pending = still_live
    finally:
        if engine is None:
            policy.model.train(was_training)
    elapsed = time.perf_counter() - started
    batch = RolloutBatch(trajectories=trajectories, num_prompts=len(env_seeds), group_size=group_size)
    return batch, {
        "perf/rollout_time_s": elapsed,
        "perf/rollout_tokens_per_s": generated_tokens / max(elapsed, 1e-9),
        "perf/rollout_env_time_s": env_time,
    }


def _submit_answers(policy: Policy, live: list[_LiveTrajectory], responses: list[list[int]]) -> None:
    """Start each env's work for its response before the envs are stepped one by one
    (``TextEnv.submit``: DeepCoder queues the program on its sandbox's workers, which then run beside
    each other), with the text ``_play_turn`` will step it with."""
    for t, response_ids in zip(live, responses):
        parsed = parse_response(policy.response_text(response_ids))
        t.env.submit(parsed.answer if parsed.format_valid else "")


def _temperatures(temperature: float | Sequence[float], num_seeds: int) -> list[float]:
    """One sampling temperature per env seed."""
    per_seed = [float(temperature)] * num_seeds if isinstance(temperature, (int, float)) else [float(t) for t in temperature]
    if len(per_seed) != num_seeds:
        raise ValueError(f"{len(per_seed)} temperatures for {num_seeds} env seeds")
    return per_seed


def _start_trajectories(
    policy: Policy,
    make_env: Callable[[], TextEnv],
    env_seeds: Sequence[int],
    group_size: int,
    per_seed: list[float],
    sample_seed: int,
    stream_offset: int,
) -> tuple[list[Trajectory], list[_LiveTrajectory]]:
    """Every trajectory, empty, and its first turn's input: a fresh env reset to its group's seed, in
    batch order (group by group), trajectory ``i`` on random stream ``stream_offset + i``."""
    trajectories: list[Trajectory] = []
    live: list[_LiveTrajectory] = []
    for p, seed in enumerate(env_seeds):
        for _ in range(group_size):
            env = make_env()
            obs = env.reset(int(seed))
            context_ids, messages = first_context_ids(policy.tokenizer, env.system_prompt, obs)
            stream_seed = trajectory_stream_seed(sample_seed, stream_offset + len(trajectories))
            generator = torch.Generator().manual_seed(stream_seed)
            live.append(_LiveTrajectory(len(trajectories), env, context_ids, messages[-1]["content"], generator, stream_seed, per_seed[p]))
            trajectories.append(Trajectory(group=p, env_seed=int(seed)))
    return trajectories, live


def _turn_decoder(
    policy: Policy, engine: VLLMEngine | None, max_new_tokens: int, min_new_tokens: int = 0
) -> Callable[[list[_LiveTrajectory], list[RowCache | None] | None], TurnOutput]:
    """What decodes one turn of every live trajectory: the vLLM ``engine`` where given (its own
    batching and prefix cache; each trajectory's turn seeded from its stream and turn number, log-probs
    returned), else the policy's decoding model, each trajectory drawing from its own generator and,
    with ``prefixes``, encoding only what its carried cache does not cover."""
    stop_string = policy.stop_text.text if policy.stop_text is not None else None
    if engine is not None:

        def decode_with_engine(live: list[_LiveTrajectory], prefixes: object) -> TurnOutput:
            contexts = [t.context_ids for t in live]
            turn_seeds = [turn_sample_seed(t.stream_seed, t.turn) for t in live]
            responses, logprobs = engine.generate(
                contexts,
                turn_seeds,
                [t.temperature for t in live],
                max_new_tokens,
                policy.stop_ids,
                stop_string,
                min_new_tokens=min_new_tokens,
            )
            return responses, [None] * len(live), logprobs

        return decode_with_engine
    decoder = policy.decoding_model()
    pad_id = pad_token_id(policy.tokenizer)

    def decode_with_policy(live: list[_LiveTrajectory], prefixes: list[RowCache | None] | None) -> TurnOutput:
        responses, caches = generate(
            decoder,
            [t.context_ids for t in live],
            [t.generator for t in live],
            [t.temperature for t in live],
            max_new_tokens,
            policy.stop_ids,
            pad_id,
            stop_text=policy.stop_text,
            prefixes=prefixes,
            keep_cache=prefixes is not None,
            min_new_tokens=min_new_tokens,
        )
        return responses, caches, [None] * len(live)

    return decode_with_policy


class _CarriedCaches:
    """Per live trajectory, the KV cache its last turn left and the tokens it covers (last context +
    response but its last token). The next context starts with those tokens, so only the rest is
    encoded. Disabled (``rollout.reuse_kv=false``, or a vLLM engine): no prefixes, nothing kept."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._by_trajectory: dict[int, tuple[list[int], RowCache]] = {}

    def prefixes(self, live: list[_LiveTrajectory]) -> list[RowCache | None] | None:
        """Each live trajectory's reusable prefix for this turn (None: encode it all); the carried
        caches are handed over, so a trajectory that ends this turn frees its cache."""
        if not self.enabled:
            return None
        out = [reusable_prefix(self._by_trajectory.get(t.index), t.context_ids) for t in live]
        self._by_trajectory.clear()
        return out

    def keep(self, index: int, context_ids: list[int], response_ids: Sequence[int], cache: RowCache | None) -> None:
        """Carry a continuing trajectory's cache of this turn to its next turn."""
        if cache is not None:
            self._by_trajectory[index] = (context_ids + list(response_ids[:-1]), cache)


def _play_turn(
    policy: Policy,
    live: _LiveTrajectory,
    traj: Trajectory,
    response_ids: Sequence[int],
    sample_logprobs: list[float] | None,
    mode: str,
    context_turns: int,
) -> _LiveTrajectory | None:
    """Play one response: parse it, step the env with its answer and record the turn in ``traj``.
    Returns the trajectory's next turn (its context per ``mode``), or None when the episode ended."""
    env = live.env
    text = policy.response_text(response_ids)
    parsed = parse_response(text)
    grounding = env.grounding(parsed.think) if parsed.think else None  # before the state moves
    obs, reward, done, info = env.step(parsed.answer if parsed.format_valid else "")
    traj.turns.append(
        Turn(
            context_ids=live.context_ids,
            response_ids=list(response_ids),
            response_text=text,
            think=parsed.think,
            answer=parsed.answer,
            format_valid=parsed.format_valid,
            action_is_valid=bool(info["action_is_valid"]),
            reward=reward,
            grounding=grounding,
            observation=live.user_content,
            sample_logprobs=sample_logprobs,
            window_start=live.window_start,
        )
    )
    traj.success = bool(info["success"])
    if done:
        return None
    user_next = next_user_message(env.turn + 1, reward, obs)
    past = [(t.observation, t.response_text) for t in traj.turns]
    ids, window_start = turn_context_ids(
        policy.tokenizer, mode, context_turns, env.system_prompt, past, live.context_ids, list(response_ids), user_next
    )
    return dataclasses.replace(live, context_ids=ids, user_content=user_next, turn=live.turn + 1, window_start=window_start)


def reusable_prefix(cached: tuple[list[int], RowCache] | None, context_ids: list[int]) -> RowCache | None:
    """The part of a trajectory's cache that the new context begins with (at least its last token
    is left to encode, for the logits); None when nothing matches. Contexts extend each other token
    for token (``models.context``), so this is the whole cache; the match is still checked."""
    if cached is None:
        return None
    ids, cache = cached
    n = 0
    limit = min(len(ids), len(context_ids) - 1)
    while n < limit and ids[n] == context_ids[n]:
        n += 1
    return [(k[:, :n], v[:, :n]) for k, v in cache] if n else None


def rollout_metrics(batch: RolloutBatch, prefix: str = "rollout") -> dict[str, float]:
    """Success, return, format and length statistics of a batch (names documented in docs/metrics.md)."""
    import numpy as np

    turns = [t for traj in batch.trajectories for t in traj.turns]
    returns = batch.returns()
    group_std = returns.std(axis=1, ddof=1) if batch.group_size > 1 else np.zeros(batch.num_prompts)
    grounded = [t.grounding for t in turns if t.grounding is not None]
    return {
        f"{prefix}/state_grounding": float(np.mean(grounded)) if grounded else float("nan"),
        f"{prefix}/success_rate": float(batch.successes().mean()),
        f"{prefix}/return_mean": float(returns.mean()),
        f"{prefix}/format_valid_rate": float(np.mean([t.format_valid for t in turns])) if turns else 0.0,
        f"{prefix}/action_valid_rate": float(np.mean([t.action_is_valid for t in turns])) if turns else 0.0,
        f"{prefix}/response_length": float(np.mean([len(t.response_ids) for t in turns])) if turns else 0.0,
        f"{prefix}/num_turns": float(np.mean([len(traj.turns) for traj in batch.trajectories])),
        f"{prefix}/in_group_reward_std_mean": float(group_std.mean()),
        f"{prefix}/zero_variance_group_frac": float(np.mean(group_std <= 1e-12)),
    }
