"""Jobs around training that benchmarks, ``mi-check`` and tests share: compose a config and load its
policy, collect iteration 1's rollout batch, score held-out success."""

from __future__ import annotations

import time
from typing import Any

from agentcollapse.config import EnvConfig, RunConfig
from agentcollapse.run.checks import compose_run

__all__ = ["config_and_policy", "held_out_rollout", "held_out_success", "rebuild_base_model", "rv_check", "training_batch"]


def config_and_policy(overrides: list[str], report: bool = True) -> tuple[RunConfig, Any]:
    """Compose the config, apply its thread count, and load (or build) its policy: every job's start."""
    import torch

    from agentcollapse.models.policy import load_policy
    from agentcollapse.run.quiet import silence_library_noise

    silence_library_noise()
    cfg = compose_run(overrides)
    torch.set_num_threads(cfg.trainer.num_threads)
    started = time.perf_counter()
    policy = load_policy(cfg.model, cfg.env, cfg.cache_dir, seed=cfg.seed)
    policy.fold_lora_for_decoding = cfg.rollout.fold_lora
    policy.reuse_kv_across_turns = cfg.rollout.reuse_kv
    if report:
        print(f"policy ready in {time.perf_counter() - started:.1f}s (built or loaded from {cfg.cache_dir})")
    return cfg, policy


def training_batch(policy: Any, cfg: RunConfig, iteration: int = 0, engine: Any = None) -> tuple[Any, dict[str, float]]:
    """The P x G rollout batch that training iteration ``iteration`` (0-based) of this config collects
    (decoded by ``engine``, a started vLLM engine, where given)."""
    from agentcollapse import envs, seeds
    from agentcollapse.rollout.runner import collect_rollouts

    return collect_rollouts(
        policy,
        lambda: envs.from_config(cfg.env),
        seeds.train_env_seeds(cfg.seed, iteration, cfg.rollout.num_prompts),
        cfg.rollout.group_size,
        cfg.rollout.temperature,
        cfg.rollout.max_new_tokens,
        sample_seed=seeds.rollout_sample_seed(cfg.seed, iteration),
        generation_batch_size=cfg.rollout.generation_batch_size,
        engine=engine,
        context=cfg.rollout.context,
        context_turns=cfg.rollout.context_turns,
    )


def held_out_success(
    policy: Any, env_cfg: EnvConfig, episodes: int, temperature: float, max_new_tokens: int, run_seed: int = 0
) -> tuple[int, int]:
    """(successes, episodes) on the held-out maps, one trajectory each, as a run's evaluation draws them."""
    batch = held_out_rollout(policy, env_cfg, episodes, temperature, max_new_tokens, run_seed)
    return int(batch.successes().sum()), episodes


def held_out_rollout(
    policy: Any, env_cfg: EnvConfig, episodes: int, temperature: float, max_new_tokens: int, run_seed: int = 0, engine: Any = None
) -> Any:
    """The held-out episodes' RolloutBatch (one trajectory per map), as a run's evaluation draws them (decoded by
    ``engine``, a started vLLM engine, where given)."""
    from agentcollapse import envs, seeds
    from agentcollapse.rollout.runner import collect_rollouts

    batch, _ = collect_rollouts(
        policy,
        lambda: envs.from_config(env_cfg),
        seeds.validation_env_seeds(episodes),
        1,
        temperature,
        max_new_tokens,
        sample_seed=seeds.validation_sample_seed(run_seed),
        engine=engine,
    )
    return batch


def rebuild_base_model(overrides: list[str]) -> tuple[Any, dict[str, Any]] | None:
    """Rebuild the tiny warm-started policy of the config; (its directory, its meta.json) or None for
    a model that is not built here."""
    import json

    from agentcollapse.models.tiny import build_tiny_policy
    from agentcollapse.run.quiet import silence_library_noise

    silence_library_noise()
    cfg = compose_run(overrides)
    if cfg.model.name != "tiny" or cfg.model.path:
        return None
    path = build_tiny_policy(cfg.model, cfg.env, cfg.cache_dir, force=True)
    return path, json.loads((path / "meta.json").read_text())


def rv_check(overrides: list[str]) -> dict[str, Any]:
    """Std(RV)/Mean(RV) of iteration 1's rollout batch (docs/method.md section 5), with the per-group RVs and a reading."""
    from agentcollapse.filtering import group_scores, interpret_rv_ratio, rv_std_over_mean

    cfg, policy = config_and_policy(overrides, report=False)
    batch, _ = training_batch(policy, cfg)
    returns = batch.returns()
    ratio = rv_std_over_mean(returns)
    success = float(batch.successes().mean())
    return {
        "env": cfg.env.name,
        "num_prompts": batch.num_prompts,
        "group_size": batch.group_size,
        "success": success,
        "group_rv": group_scores(returns, "reward_variance").tolist(),
        "ratio": ratio,
        "reading": interpret_rv_ratio(ratio, success),
    }
