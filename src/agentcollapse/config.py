"""Typed run configuration. Hydra validates every override against these dataclasses (a typo is an
error), and code reads the same objects, so the YAML files under ``conf/`` only choose values.

Algorithm fields default to ``None`` meaning "the preset's value" (``algorithms.presets``), so the
literature's settings live in one place and any single field can still be overridden.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class EnvConfig:
    name: str = "frozenlake"
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class WarmStartConfig:
    """Supervised warm start of the tiny policy on planner demonstrations (cached by content)."""

    episodes: int = 4000
    # Many small steps: copying facts from the observation emerges after ~300-400 steps of batch 8
    # (measured: held-out position-copy accuracy 0.30 at step 100, 1.00 at step 400).
    steps: int = 1000  # optimizer steps (length-bucketed batches of episodes)
    batch_size: int = 8  # episodes per step, unless batch_tokens is set
    # Fill each batch up to this many tokens instead (padded width x rows): short single-turn
    # episodes then get as many tokens per step as long multi-turn ones. Unset = batch_size.
    batch_tokens: Optional[int] = None
    lr: float = 2e-3
    suboptimal_prob: float = 0.5  # share of turns whose actions are random: RL headroom at T=1
    template_prob: float = 0.1  # share of turns with input-agnostic reasoning: the collapse attractor
    context_loss_weight: float = 1.0  # loss weight of observation tokens relative to response tokens
    seed: int = 0


@dataclass
class LoraConfig:
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


@dataclass
class ModelConfig:
    name: str = "tiny"  # tiny | smollm2-135m | hf (any local causal LM at `path`)
    path: Optional[str] = None
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 384
    dtype: str = "float32"
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class RolloutConfig:
    num_prompts: int = 8  # P
    group_size: int = 16  # G
    temperature: float = 1.0
    max_new_tokens: int = 48
    generation_batch_size: int = 256  # live trajectories decoded together


@dataclass
class AlgorithmConfig:
    name: str = "grpo"  # grpo | dr_grpo | dapo | ppo
    advantage: Optional[str] = None
    loss_agg_mode: Optional[str] = None
    clip_low: Optional[float] = None
    clip_high: Optional[float] = None
    dual_clip: Optional[bool] = None
    clip_ratio_c: Optional[float] = None
    kl_coef: Optional[float] = None
    kl_estimator: Optional[str] = None
    entropy_coef: Optional[float] = None
    gamma: Optional[float] = None
    lam: Optional[float] = None
    lr: float = 1e-3
    critic_lr: float = 1e-3
    ppo_epochs: int = 1
    micro_batch_size: int = 32
    max_grad_norm: float = 1.0
    max_nonfinite_steps: int = 5  # NaN/inf losses in a row before the run stops


@dataclass
class FilterConfig:
    name: str = "none"
    metric: str = "reward_variance"
    strategy: str = "top_p"
    value: Any = 1.0  # rho for top_p; fraction, count, or [lo, hi] per strategy
    include_zero: bool = True
    top_p_mode: str = "linear"
    selection_eps: float = 0.01
    loss_scale: str = "none"  # none | linear | sqrt
    trajectory_k: int = 0  # >0: keep top-k and bottom-k trajectories per group instead
    max_empty_steps: int = 5


@dataclass
class DiagnosticsConfig:
    enabled: bool = True
    compute_freq: int = 5
    score_batch_size: int = 64
    # Trajectory sampler: (X, Z) pairs drawn per step, each its own column, so cost grows with its
    # square; 32 matches the first-turn sampler's P x G x P pairs at P=8, G=16.
    trajectory_samples: int = 32
    grad_buckets_every: int = 0  # 0: off


@dataclass
class TrainerConfig:
    max_steps: int = 20  # RL iterations (one rollout batch and update each)
    val_every: int = 10
    val_episodes: int = 64
    val_temperatures: list[float] = field(default_factory=lambda: [1.0, 0.5, 0.0])
    checkpoint_every: int = 10
    accelerator: str = "cpu"
    devices: int = 1
    strategy: str = "auto"
    num_threads: int = 2
    progress_bar: bool = True


@dataclass
class WandbConfig:
    enabled: bool = True
    mode: str = "offline"  # offline | online | disabled
    project: str = "agentcollapse"


@dataclass
class LoggerConfig:
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class RunConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    seed: int = 0
    run_dir: str = "runs/${env.name}/${algorithm.name}/${now:%Y-%m-%d_%H-%M-%S}"
    resume: bool = False
    cache_dir: str = "${oc.env:AGENTCOLLAPSE_CACHE,${oc.env:HOME}/.cache/agentcollapse}"


def register_configs() -> None:
    """Register the schemas so every YAML under conf/ is validated against them."""
    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    for group, node in (
        ("env", EnvConfig),
        ("model", ModelConfig),
        ("algorithm", AlgorithmConfig),
        ("filter", FilterConfig),
        ("rollout", RolloutConfig),
        ("trainer", TrainerConfig),
        ("logger", LoggerConfig),
    ):
        cs.store(group=group, name=f"{group}_schema", node=node)
