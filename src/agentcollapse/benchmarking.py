"""Helpers shared by the benchmark scripts: compose a config outside a Hydra app, score held-out
success, and put a confidence interval on it."""

from __future__ import annotations

import math
from typing import Any

from agentcollapse.config import RunConfig


def compose_config(overrides: list[str]) -> RunConfig:
    from hydra import compose, initialize_config_dir

    from agentcollapse.cli.train import CONF_DIR, to_run_config
    from agentcollapse.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["run_dir=unused", *overrides])
    return to_run_config(cfg)


def held_out_success(policy: Any, env_name: str, env_kwargs: dict[str, Any], episodes: int, temperature: float,
                     max_new_tokens: int, sample_seed: int = 12345) -> tuple[int, int]:
    """(successes, episodes) on the held-out seeds 0..episodes-1, one trajectory each."""
    from agentcollapse import envs
    from agentcollapse.rollout.runner import collect_rollouts

    batch, _ = collect_rollouts(policy, lambda: envs.make(env_name, **env_kwargs), list(range(episodes)), 1,
                                temperature, max_new_tokens, sample_seed=sample_seed)
    return int(batch.successes().sum()), episodes


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (float("nan"), float("nan"))
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def attach_to_trainer(module: Any, callbacks: tuple = (), steps: int = 0) -> Any:
    """Attach ``module`` to a real Lightning Trainer by fitting over ``steps`` dummy items (0 only sets up
    the optimizer and strategy), so ``module.update`` can be called directly by benchmarks and tests."""
    import lightning as L
    from torch.utils.data import DataLoader

    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1, callbacks=list(callbacks))
    trainer.fit(module, train_dataloaders=DataLoader(list(range(steps)), batch_size=None))
    return module


def training_batch(policy: Any, cfg: RunConfig, sample_seed: int = 0) -> tuple[Any, dict[str, float]]:
    """One P x G rollout batch on the first training maps, exactly as iteration 1 would collect it."""
    from agentcollapse import envs
    from agentcollapse.lightning.module import TRAIN_SEED_BASE
    from agentcollapse.rollout.runner import collect_rollouts

    seeds = list(range(TRAIN_SEED_BASE, TRAIN_SEED_BASE + cfg.rollout.num_prompts))
    return collect_rollouts(policy, lambda: envs.make(cfg.env.name, **dict(cfg.env.kwargs)), seeds, cfg.rollout.group_size,
                            cfg.rollout.temperature, cfg.rollout.max_new_tokens, sample_seed=sample_seed,
                            generation_batch_size=cfg.rollout.generation_batch_size)


def config_and_policy(overrides: list[str], report: bool = True) -> tuple[RunConfig, Any]:
    """Compose the config, apply its thread count, and load (or build) its policy: every job's start."""
    import time

    import torch

    from agentcollapse.models.policy import load_policy

    cfg = compose_config(overrides)
    torch.set_num_threads(cfg.trainer.num_threads)
    started = time.perf_counter()
    policy = load_policy(cfg.model, cfg.env, cfg.cache_dir, seed=cfg.seed)
    if report:
        print(f"policy ready in {time.perf_counter() - started:.1f}s (built or loaded from {cfg.cache_dir})")
    return cfg, policy
