"""The run configuration's schema: one typed dataclass per config group, every field with a one-line
help (``agentcollapse train --help`` prints them per group).

Hydra validates every override against these dataclasses (a typo or a wrong type is an error), and code
reads the same objects, so the YAML files under ``conf/`` only choose values. This module is pure data at
the bottom of the package's layers: each section checks its own numbers in ``validate()`` (as TRL's
``__post_init__``), and it imports nothing of the package above ``errors`` and ``seeds``. Names (envs, filter scores and
strategies, algorithms, estimators, samplers) are checked against the registries that define them by the
run layer (:mod:`agentcollapse.run.checks`), as are the checks that touch the disk (a model directory, its
chat template: the run's preflight).

Algorithm fields left ``None`` in YAML mean "the preset's value" (``algorithms.presets``);
:func:`agentcollapse.run.checks.resolve_presets` fills them once, so a run's ``config.yaml`` says
which coefficients it used.
"""

from __future__ import annotations

import math
import os
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any, Optional

from agentcollapse.errors import UserError, one_of
from agentcollapse.seeds import MAX_RESAMPLE_ROUNDS

__all__ = [
    "FSDP_PARAM_DTYPES",
    "TRAINER_STRATEGIES",
    "VLLMConfig",
    "AlgorithmConfig",
    "DiagnosticsConfig",
    "EnvConfig",
    "FilterConfig",
    "LoggerConfig",
    "LoraConfig",
    "ModelConfig",
    "RolloutConfig",
    "RunConfig",
    "SweepTrialConfig",
    "TrainerConfig",
    "WandbConfig",
    "WarmStartConfig",
    "field_help",
]


def opt(default: Any = MISSING, *, help: str, factory: Any = MISSING) -> Any:
    """A dataclass field with a one-line ``help`` (TRL's ``field(metadata={"help": ...})`` style)."""
    if factory is not MISSING:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


def field_help(schema: type) -> list[tuple[str, str, str]]:
    """(name, default, help) for each field of a schema dataclass."""
    out = []
    for f in fields(schema):
        if f.default is not MISSING:
            default = repr(f.default)
        elif f.default_factory is not MISSING:  # type: ignore[misc]
            value = f.default_factory()  # type: ignore[misc]
            default = type(value).__name__ if hasattr(value, "__dataclass_fields__") else repr(value)
        else:
            default = "???"
        out.append((f.name, default, f.metadata.get("help", "")))
    return out


def _finite(name: str, value: Any, minimum: float = 0.0) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum:
        raise UserError(f"{name}={value} must be a finite number >= {minimum:g}")


def _at_least(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"{name}={value} must be an integer >= {minimum}")


_one_of = one_of  # the schema's own name for the check (errors.one_of owns its message)


@dataclass
class EnvConfig:
    name: str = opt(
        "frozenlake",
        help="environment: frozenlake | sokoban | countdown | math | webshop | searchqa | deepcoder (registered in agentcollapse.envs)",
    )
    # Any, not dict: conf/env/<name>.yaml composes the env's typed kwargs dataclass here (config.env_kwargs),
    # which __post_init__ turns into the plain dict every reader (and the env's constructor) gets.
    kwargs: Any = opt(
        factory=dict,
        help="keyword arguments of the env's constructor, typed per env (config/env_kwargs.py), e.g. env.kwargs.slip=0.3",
    )
    data_path: str | None = opt(
        None, help="a local copy of the env's real data set (webshop, searchqa, deepcoder); unset: the generated data in the package"
    )
    target: str | None = opt(
        None,
        help="with env=custom: your TextEnv subclass, 'path/to/my_env.py:MyEnv' or 'my_pkg.my_env:MyEnv' (its keywords: +env.kwargs.<key>=<value>)",
    )

    def __post_init__(self) -> None:
        if is_dataclass(self.kwargs) and not isinstance(self.kwargs, type):
            self.kwargs = {f.name: getattr(self.kwargs, f.name) for f in fields(self.kwargs)}
        # a file target is read from where the command ran: absolute from here on (sweep workers, config.yaml)
        if isinstance(self.target, str) and ":" in self.target:
            path, _, cls = self.target.rpartition(":")
            if path.endswith(".py") and not os.path.isabs(path):
                self.target = f"{os.path.abspath(path)}:{cls}"

    def validate(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise UserError("env.name is empty; choose with env=<name> (e.g. env=frozenlake)")
        if not isinstance(self.kwargs, dict):
            raise UserError(f"env.kwargs={self.kwargs!r} must be a mapping of the env's keywords, e.g. {{slip: 0.1}}")
        if self.name == "custom" and not self.target:
            raise UserError("env=custom needs env.target=<path/to/my_env.py:MyEnv or my_pkg.my_env:MyEnv>, a TextEnv subclass of yours")
        if self.target is not None and self.name != "custom":
            raise UserError(f"env.target={self.target!r} is for your own env: use it with env=custom, not env={self.name}")
        if self.target is not None and (not isinstance(self.target, str) or ":" not in self.target or self.target.endswith(":")):
            raise UserError(f"env.target={self.target!r} must name a class: 'path/to/my_env.py:MyEnv' or 'my_pkg.my_env:MyEnv'")


@dataclass
class WarmStartConfig:
    """Supervised warm start on planner demonstrations (cached by content): the tiny policy's whole
    training, or, with ``enabled``, LoRA fine-tuning of a pretrained model merged into its weights."""

    enabled: bool = opt(False, help="pretrained models: fine-tune on the env's demonstrations before RL (the tiny model always is)")
    episodes: int = opt(4000, help="planner-played demonstration episodes")
    # Many small steps: copying facts from the observation emerges after ~300-400 steps of batch 8
    # (measured: held-out position-copy accuracy 0.30 at step 100, 1.00 at step 400).
    steps: int = opt(1000, help="optimizer steps (length-bucketed batches of episodes)")
    batch_size: int = opt(8, help="episodes per step, unless batch_tokens is set")
    batch_tokens: Optional[int] = opt(None, help="fill each batch up to this many tokens instead (short single-turn episodes)")
    lr: float = opt(2e-3, help="AdamW learning rate of the warm start")
    suboptimal_prob: float = opt(0.5, help="share of turns whose actions are random: RL headroom at T=1")
    template_prob: float = opt(0.1, help="share of turns with input-agnostic reasoning: the collapse attractor")
    context_loss_weight: float = opt(1.0, help="loss weight of observation tokens relative to response tokens")
    seed: int = opt(0, help="seed of the demonstrations and the initial weights")

    def validate(self) -> None:
        for key in ("episodes", "steps", "batch_size"):
            _at_least(f"model.warm_start.{key}", getattr(self, key), 1)
        if self.batch_tokens is not None:
            _at_least("model.warm_start.batch_tokens", self.batch_tokens, 1)
        for key in ("lr", "context_loss_weight"):
            _finite(f"model.warm_start.{key}", getattr(self, key))
        for key in ("suboptimal_prob", "template_prob"):
            value = getattr(self, key)
            _finite(f"model.warm_start.{key}", value)
            if value > 1:
                raise UserError(f"model.warm_start.{key}={value} is a probability: give a value in [0, 1]")


@dataclass
class LoraConfig:
    r: int = opt(8, help="LoRA rank")
    alpha: int = opt(16, help="LoRA alpha (scale = alpha / r)")
    dropout: float = opt(0.0, help="LoRA dropout (0 keeps the forward deterministic)")
    target_modules: list[str] = opt(
        factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        help="module names that get adapters",
    )

    def validate(self) -> None:
        _at_least("model.lora.r", self.r, 1)
        _at_least("model.lora.alpha", self.alpha, 1)
        _finite("model.lora.dropout", self.dropout)
        if not self.target_modules:
            raise UserError("model.lora.target_modules is empty; name at least one module, e.g. [q_proj, v_proj]")


@dataclass
class ModelConfig:
    name: str = opt(
        "tiny", help="tiny (built here) | smollm2-135m | hf (any local causal LM at model.path; the qwen*/llama* presets are hf)"
    )
    path: Optional[str] = opt(None, help="local Hugging Face model directory (overrides name)")
    hub_id: Optional[str] = opt(
        None, help="Hugging Face repo of the weights, named in the download hint only (nothing downloads at run time)"
    )
    hidden_size: int = opt(128, help="tiny model: hidden size")
    num_layers: int = opt(4, help="tiny model: transformer layers")
    num_heads: int = opt(4, help="tiny model: attention heads")
    intermediate_size: int = opt(384, help="tiny model: MLP width")
    dtype: str = opt("float32", help="weights dtype: float32 | bfloat16 | float16")
    gradient_checkpointing: bool = opt(
        False,
        help="recompute each decoder layer's activations in the update's and the warm start's backward: about a third more compute, a fraction of the memory",
    )
    warm_start: WarmStartConfig = opt(factory=WarmStartConfig, help="supervised warm start (tiny: always; others: when enabled)")
    lora: LoraConfig = opt(factory=LoraConfig, help="LoRA adapter settings")

    def validate(self) -> None:
        self.lora.validate()
        if self.name == "tiny" or self.warm_start.enabled:
            self.warm_start.validate()
        if self.name == "tiny" and not self.path:
            for key in ("hidden_size", "num_layers", "num_heads", "intermediate_size"):
                _at_least(f"model.{key}", getattr(self, key), 1)
            if self.hidden_size % self.num_heads:
                raise UserError(f"model.hidden_size={self.hidden_size} must be a multiple of model.num_heads={self.num_heads}")


@dataclass
class VLLMConfig:
    """The vLLM engine (``rollout.engine=vllm``), started in the training process."""

    dtype: str = opt("bfloat16", help="weights and activations in the engine: bfloat16 | float16 | float32 | auto")
    max_model_len: int = opt(4096, help="longest context + response one request may reach (tokens)")
    kv_cache_gib: float = opt(2.0, help="CPU: memory for the engine's KV cache in GiB (vLLM would otherwise take most of the RAM)")
    gpu_memory_utilization: float = opt(0.3, help="CUDA: share of GPU memory the engine may take (weights + KV cache); the rest trains")
    enforce_eager: Optional[bool] = opt(
        None, help="no torch.compile / CUDA graphs; null: eager on CPU (start-up in seconds), compiled on CUDA (faster decoding)"
    )
    sleep_during_update: bool = opt(True, help="CUDA: release the engine's memory while the trainer updates (vLLM sleep mode)")

    def validate(self) -> None:
        _one_of("rollout.vllm.dtype", self.dtype, ("bfloat16", "float16", "float32", "auto"))
        _at_least("rollout.vllm.max_model_len", self.max_model_len, 16)
        _finite("rollout.vllm.kv_cache_gib", self.kv_cache_gib)
        if not 0 < self.gpu_memory_utilization <= 1:
            raise UserError(f"rollout.vllm.gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]")
        if self.kv_cache_gib <= 0:
            raise UserError(f"rollout.vllm.kv_cache_gib={self.kv_cache_gib} must be > 0")


@dataclass
class RolloutConfig:
    num_prompts: int = opt(8, help="P: prompts (groups) per iteration")
    group_size: int = opt(16, help="G: trajectories per prompt")
    temperature: float = opt(1.0, help="sampling temperature of training rollouts")
    max_new_tokens: int = opt(48, help="token budget of one response (one turn)")
    min_new_tokens: int = opt(
        0,
        help="training rollouts: tokens each response runs before EOS or </answer> may end it (vLLM's min_tokens; max_new_tokens: every response runs to the budget, as a benchmark of equal work needs); evaluation always stops at the first",
    )
    generation_batch_size: int = opt(
        256,
        help="rollout.engine=hf: trajectories decoded together, each slice played to its end before the next starts (bounds the KV caches held at once); vLLM takes every trajectory at once",
    )
    fold_lora: bool = opt(
        True, help="decode with a copy of the policy whose LoRA adapters are folded into its weights (faster; one more copy of the weights)"
    )
    reuse_kv: bool = opt(
        True,
        help="keep each trajectory's KV cache from turn to turn and encode only the new tokens (faster; holds one cache per live trajectory)",
    )
    engine: str = opt(
        "hf", help="decoding engine: hf (transformers generate; the tiny policy's) | vllm (vLLM in this process, weights synced each step)"
    )
    vllm: VLLMConfig = opt(factory=VLLMConfig, help="the vLLM engine's settings (rollout.engine=vllm)")
    context: str = opt(
        "full",
        help="what each turn's context shows: full (every past turn; one training sequence per trajectory) | window (the last rollout.context_turns past turns; re-rendered once where the window moves, which starts a new training sequence) | single_turn (the system prompt and the current user message only; one sequence per turn)",
    )
    context_turns: int = opt(0, help="rollout.context=window: how many past turns (observation and response) each context shows (>= 1)")
    max_staleness: int = opt(
        0,
        help="rollout.engine=vllm: decode the next iterations' batches while the trainer updates, each from weights exactly this many updates behind the one that trains on it; a reward- or length-scored filter then refills each update to P kept groups (0: synchronous)",
    )

    def validate(self) -> None:
        for key in ("num_prompts", "group_size", "max_new_tokens", "generation_batch_size"):
            _at_least(f"rollout.{key}", getattr(self, key), 1)
        _at_least("rollout.max_staleness", self.max_staleness, 0)
        _at_least("rollout.min_new_tokens", self.min_new_tokens, 0)
        if self.min_new_tokens > self.max_new_tokens:
            raise UserError(
                f"rollout.min_new_tokens={self.min_new_tokens} is above rollout.max_new_tokens={self.max_new_tokens}: set it at most the budget (the budget itself: every response runs to it)"
            )
        _one_of("rollout.context", self.context, ("full", "window", "single_turn"))
        if self.context == "window" and (
            isinstance(self.context_turns, bool) or not isinstance(self.context_turns, int) or self.context_turns < 1
        ):
            raise UserError(
                f"rollout.context=window needs rollout.context_turns=k >= 1 past turns (got {self.context_turns}); no past turn is rollout.context=single_turn"
            )
        _at_least("rollout.context_turns", self.context_turns, 0)
        _finite("rollout.temperature", self.temperature)
        self.vllm.validate()


AUTOCAST_DTYPES = ("float32", "bfloat16")  # float32: no autocast


@dataclass
class AlgorithmConfig:
    name: str = opt("grpo", help="preset: grpo | dr_grpo | dapo | ppo (null fields below take the preset's value)")
    advantage: Optional[str] = opt(None, help="advantage estimator: grpo | dr_grpo | gae")
    loss_agg_mode: Optional[str] = opt(
        None,
        help="loss aggregation: token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm (policy_loss=gspo: only seq-mean-token-mean is GSPO, the others weight a sequence by its length; docs/method.md 6.9)",
    )
    policy_loss: Optional[str] = opt(
        None,
        help="policy loss (null: clipped): clipped (PPO, any aggregation) | gspo (Zheng et al. 2025, verl compute_policy_loss_gspo: sequence ratio; sets clip 3e-4/4e-4, seq-mean-token-mean) | cispo (MiniMax-M1 2025, TRL loss_type=cispo: sg[min(r, 1+clip_high)]*A*logp; sets clip_high 4.0, token-mean) | sapo (Qwen 2025, verl/TRL: sigmoid gate; sets seq-mean-token-mean); each takes any loss_agg_mode, explicit settings win",
    )
    clip_low: Optional[float] = opt(None, help="PPO clip epsilon below 1 (gspo: its lower clip, default 3e-4; unused by cispo and sapo)")
    clip_high: Optional[float] = opt(
        None,
        help="PPO clip epsilon above 1 (DAPO clip-higher: 0.28; gspo: default 4e-4; cispo: weight cap 1 + clip_high, default 4.0; unused by sapo)",
    )
    dual_clip: Optional[bool] = opt(None, help="dual clip for negative advantages (verl's default; policy_loss=clipped only)")
    clip_ratio_c: Optional[float] = opt(None, help="dual-clip bound (> 1)")
    sapo_tau_pos: Optional[float] = opt(None, help="policy_loss=sapo: gate temperature where A > 0 (TRL/verl default 1.0)")
    sapo_tau_neg: Optional[float] = opt(None, help="policy_loss=sapo: gate temperature where A <= 0 (TRL/verl default 1.05)")
    kl_coef: Optional[float] = opt(None, help="weight of KL(pi || reference) in the loss (0: off)")
    kl_estimator: Optional[str] = opt(None, help="KL estimator: k1 | k2 | k3 (= low_var_kl) | abs")
    entropy_coef: Optional[float] = opt(None, help="weight of the entropy bonus")
    gamma: Optional[float] = opt(None, help="GAE discount (PPO)")
    lam: Optional[float] = opt(None, help="GAE lambda (PPO)")
    dynamic_sampling: Optional[bool] = opt(
        None, help="DAPO dynamic sampling: train on groups whose rewards vary, refilled by extra rollouts"
    )
    max_resample_rounds: int = opt(3, help="dynamic sampling: extra rollout batches per iteration at most (verl's max_num_gen_batches - 1)")
    lr: float = opt(1e-3, help="policy (LoRA) learning rate")
    critic_lr: float = opt(1e-3, help="value-head learning rate (PPO)")
    ppo_epochs: int = opt(1, help="passes over each rollout batch")
    mini_batch_size: int = opt(
        0,
        help="trajectories per optimizer step, in batch order (verl's ppo_mini_batch_size; the authors': a quarter of the batch); 0: one step on the whole kept batch",
    )
    # 8, not 32: the tiny model's activations then stay in cache (measured 1.5-2x faster updates on CPU)
    micro_batch_size: int = opt(8, help="sequences per forward/backward (the loss is the same for any size)")
    reference_batch_size: int = opt(
        16, help="sequences per reference-policy forward (kl_coef > 0; no grad, each runs only its tokens after its group's shared prompt)"
    )
    update_dtype: str = opt(
        "float32",
        help="what the update's forwards and backward (behaviour, reference and trained log-probs) compute in: float32 | bfloat16 (autocast; weights, adapter, optimizer and the LM head's log-normaliser stay float32)",
    )
    max_grad_norm: float = opt(1.0, help="gradient clipping norm")
    max_nonfinite_steps: int = opt(5, help="NaN/inf losses in a row before the run stops")
    rollout_correction: str = opt(
        "token_tis",
        help="rollout.engine=vllm: correct for the engine's log-probs differing from the trainer's: none | token_tis (weight min(ratio, cap)) | sequence_mask (drop sequences whose mean ratio leaves [1/cap, cap])",
    )
    rollout_correction_cap: float = opt(2.0, help="the rollout correction's cap on the importance ratio (> 1)")

    def validate(self) -> None:
        for key in (
            "kl_coef",
            "entropy_coef",
            "clip_low",
            "clip_high",
            "clip_ratio_c",
            "sapo_tau_pos",
            "sapo_tau_neg",
            "gamma",
            "lam",
            "lr",
            "critic_lr",
            "max_grad_norm",
        ):
            _finite(f"algorithm.{key}", getattr(self, key))
        for key in ("ppo_epochs", "micro_batch_size", "reference_batch_size", "max_nonfinite_steps"):
            _at_least(f"algorithm.{key}", getattr(self, key), 1)
        _at_least("algorithm.max_resample_rounds", self.max_resample_rounds, 0)
        _one_of("algorithm.update_dtype", self.update_dtype, AUTOCAST_DTYPES)
        _at_least("algorithm.mini_batch_size", self.mini_batch_size, 0)
        if not self.rollout_correction_cap > 1:
            raise UserError(f"algorithm.rollout_correction_cap={self.rollout_correction_cap} must be > 1")
        if self.max_resample_rounds > MAX_RESAMPLE_ROUNDS:
            raise UserError(f"algorithm.max_resample_rounds={self.max_resample_rounds} must be <= {MAX_RESAMPLE_ROUNDS}")


@dataclass
class FilterConfig:
    """SNR-aware filtering (docs/method.md section 5), applied by the ``snr_filter`` callback before each update."""

    name: str = opt("none", help="preset (a file under conf/filter/); none trains on every group")
    metric: str = opt(
        "reward_std",
        help="group score (registered in agentcollapse.filtering): reward_std (the authors' 'reward_variance') | reward_variance (true variance) | reward | reward_sum | entropy | entropy_variance | entropy_std | length",
    )
    strategy: str = opt(
        "top_p",
        help="selection rule (registered in agentcollapse.filtering): top_p | top_k | top_k_abs | min_p | percentile_range | within_group",
    )
    value: Any = opt(
        1.0,
        help="rho for top_p; a fraction for top_k; a count for top_k_abs; [lo, hi] for percentile_range; the keep ratio per group for within_group",
    )
    include_zero: bool = opt(True, help="rank groups whose score is zero (|score| <= 1e-10) too; false drops them first")
    top_p_mode: str = opt("linear", help="top_p over the score mass (linear) or over softmax(scores)")
    selection_eps: float = opt(0.01, help="linear top_p: threshold = rho * total - eps; nothing is kept when rho * total <= eps")
    loss_scale: str = opt("none", help="scale the loss by the kept fraction: none | linear | sqrt")
    trajectory_k: int = opt(0, help=">0: keep the top-k and bottom-k trajectories of every group instead (the paper's baseline)")
    filter_type: str = opt("largest", help="largest keeps the highest scores, smallest the lowest (every strategy)")
    max_empty_steps: int = opt(5, help="stop the run after this many consecutive iterations with nothing kept")

    def filter_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`agentcollapse.filtering.decide`."""
        options = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "max_empty_steps"}
        value = options["value"]
        options["value"] = tuple(value) if isinstance(value, (list, tuple)) else value
        return options

    def validate(self) -> None:
        _at_least("filter.max_empty_steps", self.max_empty_steps, 1)
        _at_least("filter.trajectory_k", self.trajectory_k, 0)


@dataclass
class DiagnosticsConfig:
    """Settings of the watching callbacks (``collapse_diagnostics``, ``grad_buckets``)."""

    compute_freq: int = opt(5, help="MI proxy at step 1 and every N steps (0: step 1 only)")
    score_batch_size: int = opt(64, help="(context, trace) pairs per cross-scoring forward")
    proxy_engine: str = opt(
        "hf",
        help="who cross-scores for the MI proxy: hf (the trainer's model, cached contexts) | vllm (the rollout engine's prompt log-probs; needs rollout.engine=vllm)",
    )
    proxy_dtype: str = opt(
        "float32",
        help="what the hf cross-scoring computes in: float32 | bfloat16 (autocast: ~0.5x the forward's time at SmolLM2's size on this AMX CPU; docs/performance.md gives what it costs in accuracy)",
    )
    proxy_split: bool = opt(
        True,
        help="trainer=ddp|fsdp: each rank cross-scores its share of the distinct contexts and the scores are gathered (false: every rank scores the whole batch)",
    )
    # Each (X, Z) pair is its own column, so cost grows with its square; 32 matches the first-turn
    # sampler's P x G x P pairs at P=8, G=16.
    trajectory_samples: int = opt(32, help="(context, trace) pairs the trajectory sampler draws per proxy step")
    first_turn_samples: int = opt(64, help="first-turn traces scored per proxy step (the authors: 64; 0 = all)")
    trajectory_replace: bool = opt(False, help="the trajectory sampler draws with replacement (the authors' sampler)")
    # first_turn_nocopy reweights first_turn's pairs (no forward of its own); trajectory_nocopy draws its
    # own turns, ~+2.4 s on a ~2.1 s proxy (tiny policy, P=8 x G=16, one thread), so it is opt-in.
    skip_samplers: list[str] = opt(
        factory=lambda: ["trajectory_nocopy"],
        help="registered MI-proxy samplers not to run (first_turn, trajectory, first_turn_nocopy, trajectory_nocopy; [] runs all)",
    )
    grad_buckets_every: int = opt(10, help="grad_buckets callback: at step 1 and every N steps")
    grad_buckets_mode: str = opt("quantile", help="RV buckets: quantile (6 equal-count) | fixed_rv (the authors' fixed reward-std edges)")
    early_stop_metric: str = opt(
        "collapse_first_turn_sample/retrieval_above_chance",
        help="collapse_early_stopping callback and the sweep's collapse pruner: the input-dependence metric they watch",
    )
    early_stop_threshold: float = opt(0.05, help="collapsed when the metric stays below this (retrieval above chance: 0 = chance)")
    early_stop_patience: int = opt(2, help="consecutive proxy steps below the threshold before the run stops")
    early_stop_min_step: int = opt(1, help="readings before this iteration are ignored")

    def validate(self) -> None:
        _at_least("diagnostics.first_turn_samples", self.first_turn_samples, 0)
        _one_of("diagnostics.proxy_dtype", self.proxy_dtype, AUTOCAST_DTYPES)
        _at_least("diagnostics.compute_freq", self.compute_freq, 0)
        _at_least("diagnostics.early_stop_patience", self.early_stop_patience, 1)
        _at_least("diagnostics.early_stop_min_step", self.early_stop_min_step, 0)
        if isinstance(self.early_stop_threshold, bool) or not math.isfinite(float(self.early_stop_threshold)):
            raise UserError(f"diagnostics.early_stop_threshold={self.early_stop_threshold} must be a finite number")
        _at_least("diagnostics.score_batch_size", self.score_batch_size, 1)
        _at_least("diagnostics.trajectory_samples", self.trajectory_samples, 0)
        _at_least("diagnostics.grad_buckets_every", self.grad_buckets_every, 1)


TRAINER_STRATEGIES = ("auto", "ddp", "fsdp")
FSDP_PARAM_DTYPES = ("auto", "bfloat16", "float32", "none")


@dataclass
class TrainerConfig:
    max_steps: int = opt(20, help="RL iterations (one rollout batch and update each)")
    val_every: int = opt(10, help="held-out evaluation every N iterations, at step 0 and at the end (0: never)")
    val_episodes: int = opt(64, help="held-out maps per evaluation (seeds 0..N-1, the same for every run)")
    val_temperatures: list[float] = opt(factory=lambda: [1.0, 0.5, 0.0], help="evaluation temperatures (0 = greedy; 0.5 is the paper's)")
    shared_eval_dir: Optional[str] = opt(
        None, help="where runs of the same policy, seed and evaluation settings share their step-0 evaluation (the sweeper sets it)"
    )
    checkpoint_every: int = opt(10, help="write checkpoints/last.ckpt every N iterations (0: never)")
    accelerator: str = opt(
        "auto",
        help="Lightning accelerator: auto (the GPU where CUDA sees one, else the CPU; never MPS) | gpu | cpu | another Lightning name",
    )
    devices: int = opt(1, help="processes (GPUs) per node")
    num_nodes: int = opt(1, help="nodes (machines); each starts trainer.devices processes")
    strategy: str = opt("auto", help="Lightning strategy: auto (one process) | ddp (whole model per rank) | fsdp (FSDP2, weights sharded)")
    fsdp_param_dtype: str = opt(
        "auto",
        help="fsdp: dtype weights are gathered and computed in: auto (bf16 on a CUDA GPU that has it, else the weights') | bfloat16 | float32 | none",
    )
    num_threads: int = opt(2, help="torch CPU threads of this run")
    progress_bar: bool = opt(True, help="live progress on a terminal (a line every few percent otherwise)")

    def validate(self) -> None:
        _at_least("trainer.max_steps", self.max_steps, 1)
        _at_least("trainer.val_every", self.val_every, 0)
        _at_least("trainer.checkpoint_every", self.checkpoint_every, 0)
        _at_least("trainer.num_threads", self.num_threads, 1)
        _at_least("trainer.devices", self.devices, 1)
        _at_least("trainer.num_nodes", self.num_nodes, 1)
        if self.strategy not in TRAINER_STRATEGIES:
            # Lightning's other names (FSDP1's "fsdp_*", "deepspeed", "ddp_spawn", ...) would start
            # and then break the update: it needs every rank in step at each backward, and FSDP2.
            raise UserError(
                f"trainer.strategy={self.strategy!r} is not supported: use auto, ddp or fsdp (FSDP2 through "
                "Lightning's ModelParallelStrategy); FSDP1, DeepSpeed and spawned processes are not"
            )
        _one_of("trainer.fsdp_param_dtype", self.fsdp_param_dtype, FSDP_PARAM_DTYPES)
        if self.val_every > 0:
            _at_least("trainer.val_episodes", self.val_episodes, 1)
            if not self.val_temperatures:
                raise UserError("trainer.val_temperatures is empty; give at least one, e.g. [0.5]")
        for t in self.val_temperatures:
            _finite("trainer.val_temperatures[]", t)


@dataclass
class WandbConfig:
    enabled: bool = opt(True, help="log to wandb too (run records are always written)")
    mode: str = opt("offline", help="offline | online | disabled")
    project: str = opt("agentcollapse", help="wandb project")

    def validate(self) -> None:
        _one_of("logger.wandb.mode", self.mode, ("offline", "online", "disabled"))


@dataclass
class LoggerConfig:
    wandb: WandbConfig = opt(factory=WandbConfig, help="wandb settings")

    def validate(self) -> None:
        self.wandb.validate()


@dataclass
class SweepTrialConfig:
    """Set by the sweeper for each trial it launches (``hydra.sweeper``); a plain run leaves it empty."""

    storage: Optional[str] = opt(None, help="the sweep's Optuna storage URL (sqlite:///<sweep dir>/study.db by default)")
    study_name: str = opt("sweep", help="the sweep's study in that storage")
    trial: int = opt(-1, help="this run's trial number in the study (-1: not a sweep trial)")

    def validate(self) -> None:
        if self.trial >= 0 and not self.storage:
            raise UserError(f"sweep.trial={self.trial} needs sweep.storage=<the study's storage URL>")


@dataclass
class RunConfig:
    env: EnvConfig = opt(factory=EnvConfig, help="the environment")
    model: ModelConfig = opt(factory=ModelConfig, help="the policy")
    algorithm: AlgorithmConfig = opt(factory=AlgorithmConfig, help="the RL algorithm")
    filter: FilterConfig = opt(factory=FilterConfig, help="SNR-aware filtering")
    rollout: RolloutConfig = opt(factory=RolloutConfig, help="rollout sizes and sampling")
    diagnostics: DiagnosticsConfig = opt(factory=DiagnosticsConfig, help="collapse diagnostics")
    trainer: TrainerConfig = opt(factory=TrainerConfig, help="iterations, evaluation, devices")
    logger: LoggerConfig = opt(factory=LoggerConfig, help="loggers besides the run record")
    callbacks: dict[str, Any] = opt(factory=dict, help="what watches and what intervenes: {name: {_target_: class}} (callbacks=<preset>)")
    sweep: SweepTrialConfig = opt(factory=SweepTrialConfig, help="the trial's place in a sweep (set by the sweeper)")
    seed: int = opt(0, help="run seed: training maps, sampling streams, LoRA init")
    run_dir: str = opt("runs/${env.name}/${algorithm.name}/${now:%Y-%m-%d_%H-%M-%S}", help="the run's record directory")
    resume: bool = opt(False, help="continue the run in run_dir from its last checkpoint")
    cache_dir: str = opt("${oc.env:AGENTCOLLAPSE_CACHE,${oc.env:HOME}/.cache/agentcollapse}", help="where built base models are cached")

    def validate(self) -> None:
        """Every section's own checks (names against the registries: ``run.checks``). Raises UserError."""
        if not 0 <= self.seed <= 2**32 - 1:
            raise UserError(f"seed={self.seed} must be in [0, 2**32 - 1]")
        for section in (
            self.env,
            self.model,
            self.algorithm,
            self.filter,
            self.rollout,
            self.diagnostics,
            self.trainer,
            self.logger,
            self.sweep,
        ):
            section.validate()
        for name, spec in self.callbacks.items():
            if spec is None:
                continue  # callbacks.<name>=null removes one
            if not isinstance(spec, dict) or "_target_" not in spec:
                raise UserError(f"callbacks.{name} must be {{_target_: <class>}}; see conf/callbacks/")
