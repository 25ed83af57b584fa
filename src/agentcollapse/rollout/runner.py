"""Multi-turn rollouts: P prompts x G trajectories, all live trajectories decoded together each turn."""

from __future__ import annotations

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
) -> tuple[RolloutBatch, dict[str, float]]:
    """Roll out ``group_size`` trajectories per env seed; returns the batch and timing stats.

    ``temperature`` is one for every trajectory or one per env seed (validation decodes all its
    temperatures in one batch that way). Trajectory ``i`` samples from stream ``stream_offset + i``:
    a DDP rank rolling out groups ``a..b`` of a larger batch passes ``a * group_size`` and draws the
    tokens the whole batch would have drawn for them.

    With an ``engine`` (vLLM) every turn is decoded there, each turn of trajectory ``i`` with its own
    seed derived from stream ``stream_offset + i``; the turns then carry the engine's log-probs.

    ``context`` (``full`` | ``window`` | ``single_turn``, with ``context_turns`` past turns for the
    window) sets which past turns each context shows (``models.context.turn_context_ids``); a turn
    whose context was re-rendered at a window start is marked ``window_start``."""
    started = time.perf_counter()
    mode = context  # ``context`` names each trajectory's context ids below
    history_start(0, mode, context_turns)  # an unknown mode or a window without turns: ValueError
    per_seed = [float(temperature)] * len(env_seeds) if isinstance(temperature, (int, float)) else [float(t) for t in temperature]
    if len(per_seed) != len(env_seeds):
        raise ValueError(f"{len(per_seed)} temperatures for {len(env_seeds)} env seeds")
    tok = policy.tokenizer
    pad_id = pad_token_id(tok)
    # live: (trajectory index, env, this turn's context ids, its user message, random stream)
    trajectories, live, temps, stream_seeds = [], [], [], []  # temps, stream seeds: one per trajectory
    for p, seed in enumerate(env_seeds):
        for _ in range(group_size):
            env = make_env()
            obs = env.reset(int(seed))
            context, messages = first_context_ids(tok, env.system_prompt, obs)
            traj = Trajectory(group=p, env_seed=int(seed))
            stream_seeds.append(trajectory_stream_seed(sample_seed, stream_offset + len(trajectories)))
            generator = torch.Generator().manual_seed(stream_seeds[-1])
            live.append((len(trajectories), env, context, messages[-1]["content"], generator))
            temps.append(per_seed[p])
            trajectories.append(traj)
    generated_tokens = 0
    was_training = policy.model.training
    policy.model.eval()
    decoder = policy.decoding_model() if engine is None else None
    reuse = policy.reuse_kv_across_turns and engine is None
    stop_string = policy.stop_text.text if policy.stop_text is not None else None
    # Per live trajectory: the tokens its cache covers (last context + response but its last token)
    # and that cache; the next context starts with those tokens, so only the rest is encoded.
    cached: dict[int, tuple[list[int], RowCache]] = {}
    window_start: dict[int, bool] = {}  # live trajectory -> was its current context re-rendered
    try:
        while live:
            contexts = [context for _, _, context, _, _ in live]
            prefixes = [reusable_prefix(cached.get(index), ids) for (index, *_), ids in zip(live, contexts)]
            responses: list[list[int]] = []
            caches: list[RowCache | None] = []
            logprobs: list[list[float] | None] = [None] * len(live)
            if engine is not None:  # vLLM batches and caches prefixes itself
                turn_seeds = [turn_sample_seed(stream_seeds[index], len(trajectories[index].turns)) for index, *_ in live]
                responses, logprobs = engine.generate(
                    contexts, turn_seeds, [temps[index] for index, *_ in live], max_new_tokens, policy.stop_ids, stop_string
                )
                caches = [None] * len(live)
            for start in range(0, len(live) if engine is None else 0, generation_batch_size):
                chunk = slice(start, start + generation_batch_size)
                new_tokens, new_caches = generate(
                    decoder,
                    contexts[chunk],
                    [g for *_, g in live[chunk]],
                    [temps[index] for index, *_ in live[chunk]],
                    max_new_tokens,
                    policy.stop_ids,
                    pad_id,
                    stop_text=policy.stop_text,
                    prefixes=prefixes[chunk] if reuse else None,
                    keep_cache=reuse,
                )
                responses += new_tokens
                caches += new_caches
            cached.clear()
            still_live = []
            for (index, env, context_ids, user_content, gen), response_ids, cache, sample_logprobs in zip(
                live, responses, caches, logprobs
            ):
                generated_tokens += len(response_ids)
                text = policy.response_text(response_ids)
                parsed = parse_response(text)
                grounding = env.grounding(parsed.think) if parsed.think else None  # before the state moves
                obs, reward, done, info = env.step(parsed.answer if parsed.format_valid else "")
                traj = trajectories[index]
                traj.turns.append(
                    Turn(
                        context_ids=context_ids,
                        response_ids=list(response_ids),
                        response_text=text,
                        think=parsed.think,
                        answer=parsed.answer,
                        format_valid=parsed.format_valid,
                        action_is_valid=bool(info["action_is_valid"]),
                        reward=reward,
                        grounding=grounding,
                        observation=user_content,
                        sample_logprobs=sample_logprobs,
                        window_start=window_start.pop(index, False),
                    )
                )
                traj.success = bool(info["success"])
                if not done:
                    user_next = next_user_message(env.turn + 1, reward, obs)
                    past = [(t.observation, t.response_text) for t in traj.turns]
                    ids, window_start[index] = turn_context_ids(
                        tok, mode, context_turns, env.system_prompt, past, context_ids, list(response_ids), user_next
                    )
                    still_live.append((index, env, ids, user_next, gen))
                    if cache is not None:
                        cached[index] = (context_ids + list(response_ids[:-1]), cache)
            live = still_live
    finally:
        policy.model.train(was_training)
    elapsed = time.perf_counter() - started
    batch = RolloutBatch(trajectories=trajectories, num_prompts=len(env_seeds), group_size=group_size)
    return batch, {"perf/rollout_time_s": elapsed, "perf/rollout_tokens_per_s": generated_tokens / max(elapsed, 1e-9)}


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
