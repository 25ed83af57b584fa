"""A run config checked against the package's registries, with its algorithm preset resolved: the run
layer's half of turning overrides into the config a run uses.

``agentcollapse.config`` sits at the bottom and knows only its own schema: :func:`config.compose.compose`
composes ``conf/``, refuses unknown keys and checks every section's numbers, importing nothing above it
(no torch). The names a config holds (env and its settings, model, dtype, algorithm preset and
estimators, filter preset, score and strategy, MI-proxy sampler, bucket mode, rollout correction and
engine) are defined by the parts above, so they are checked here, where every part may be imported: each
is looked up where it is defined, so an error lists exactly the names that exist. The checks that touch
the disk (a model directory, the cache, the run directory) are the run's preflight
(:func:`agentcollapse.run.lifecycle.preflight`).

:func:`compose_run` is ``compose`` plus these checks (benchmarks, tests, the jobs); :func:`load_run_config`
is the same for a config Hydra composed (``train``). Every failure is a one-line :class:`UserError` that
names the fix.
"""

from __future__ import annotations

import os
from dataclasses import fields

import torch
from omegaconf import DictConfig

from agentcollapse import envs
from agentcollapse.algorithms import ROLLOUT_CORRECTIONS
from agentcollapse.algorithms.presets import algorithm_preset
from agentcollapse.config import DiagnosticsConfig, FilterConfig, ModelConfig, RunConfig, group_options
from agentcollapse.config.compose import compose, to_run_config
from agentcollapse.diagnostics.samplers import sampler_names
from agentcollapse.errors import UserError, one_of
from agentcollapse.filtering import BUCKET_MODES, check_settings, score_names, strategy_names
from agentcollapse.models.weights import DTYPE_NAMES, MODEL_NAMES, hf_path_message
from agentcollapse.rollout.vllm_engine import ENGINES, check_cpu_head_size

__all__ = ["check", "compose_run", "load_run_config", "resolve_presets", "validate"]


def compose_run(overrides: list[str], config_dir: str | None = None, config_name: str = "config") -> RunConfig:
    """The checked, resolved run config for ``overrides``, composed outside a Hydra app."""
    return check(compose(overrides, config_dir=config_dir, config_name=config_name))


def load_run_config(cfg: DictConfig | RunConfig) -> RunConfig:
    """A composed config as a checked :class:`RunConfig` with its presets resolved."""
    return check(to_run_config(cfg))


def check(cfg: RunConfig) -> RunConfig:
    """``cfg`` checked (:func:`validate`) with its algorithm preset resolved in place."""
    validate(cfg)
    return resolve_presets(cfg)


def validate(cfg: RunConfig) -> None:
    """Every section's own checks, then names against the registries and the checks that span sections.
    Raises a one-line :class:`UserError` naming the fix."""
    cfg.validate()
    envs.from_config(cfg.env)  # unknown env or bad env.kwargs -> UserError
    _check_model(cfg.model)
    algo = algorithm_preset(cfg.algorithm)  # unknown preset or estimator, or settings the preset rejects
    if cfg.rollout.group_size < 2 and algo.advantage in ("grpo", "dr_grpo"):
        raise UserError(
            f"algorithm={cfg.algorithm.name} normalises rewards within a group: set rollout.group_size>=2 (got {cfg.rollout.group_size})"
        )
    if cfg.rollout.context != "full" and algo.use_critic:
        raise UserError(
            f"rollout.context={cfg.rollout.context} splits a trajectory into several training sequences, which GAE (algorithm={cfg.algorithm.name}) would end as terminal: use rollout.context=full or a critic-free algorithm (grpo, dr_grpo, dapo)"
        )
    _check_filter(cfg.filter, group_size=cfg.rollout.group_size)  # some scores need >= 2 rollouts per prompt
    _check_diagnostics(cfg.diagnostics)
    one_of("algorithm.rollout_correction", cfg.algorithm.rollout_correction, ROLLOUT_CORRECTIONS)
    one_of("rollout.engine", cfg.rollout.engine, ENGINES)
    one_of("diagnostics.proxy_engine", cfg.diagnostics.proxy_engine, ENGINES)
    if cfg.diagnostics.proxy_engine == "vllm" and cfg.rollout.engine != "vllm":
        raise UserError("diagnostics.proxy_engine=vllm scores with the rollout engine: set rollout.engine=vllm too, or proxy_engine=hf")
    if cfg.rollout.engine == "vllm" and cfg.trainer.devices > 1:
        _check_engines_per_node(cfg)
    if cfg.rollout.max_staleness > 0:
        _check_async_rollouts(cfg, algo.dynamic_sampling)
    if cfg.rollout.engine == "vllm" and cfg.model.name == "tiny" and not cfg.model.path and not torch.cuda.is_available():
        m = cfg.model  # the tiny policy is built after these checks: its head size is known now, its engine's failure later
        check_cpu_head_size(
            m.hidden_size // m.num_heads,
            f"model=tiny (model.hidden_size={m.hidden_size} / model.num_heads={m.num_heads})",
            ": choose model.num_heads so that hidden_size / num_heads is one of them",
        )


def _check_engines_per_node(cfg: RunConfig) -> None:
    """``trainer.devices`` ranks on a node each start a vLLM engine: on CPU each needs cores of its own and
    its KV cache (``rollout.vllm.kv_cache_gib``) beside its trainer. (On GPUs each rank has its device, and
    ``gpu_memory_utilization`` is a share of that one; Lightning refuses more ranks than devices.)"""
    import torch

    if cfg.trainer.accelerator not in ("cpu", "auto") or (cfg.trainer.accelerator == "auto" and torch.cuda.is_available()):
        return
    n, cores = cfg.trainer.devices, len(os.sched_getaffinity(0))
    if n > cores:
        raise UserError(
            f"trainer.devices={n} ranks with rollout.engine=vllm on {cores} CPU cores: each rank's engine needs a core of its own; "
            f"use trainer.devices<={cores}, or rollout.engine=hf"
        )
    ram_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    if n * cfg.rollout.vllm.kv_cache_gib > ram_gib / 2:
        raise UserError(
            f"{n} vLLM engines x rollout.vllm.kv_cache_gib={cfg.rollout.vllm.kv_cache_gib} = {n * cfg.rollout.vllm.kv_cache_gib:g} GiB of KV cache "
            f"leaves under half of this machine's {ram_gib:.0f} GiB to the {n} trainers: lower rollout.vllm.kv_cache_gib "
            f"(<= {ram_gib / 2 / n:.1f}) or trainer.devices"
        )


def resolve_presets(cfg: RunConfig) -> RunConfig:
    """Fill every null preset field of ``cfg.algorithm`` in place, so the stored config says what ran."""
    preset = algorithm_preset(cfg.algorithm)
    for f in fields(cfg.algorithm):
        if getattr(cfg.algorithm, f.name) is None and hasattr(preset, f.name):
            setattr(cfg.algorithm, f.name, getattr(preset, f.name))
    return cfg


def _check_model(model: ModelConfig) -> None:
    one_of("model.dtype", model.dtype, DTYPE_NAMES)
    if model.path:
        return  # the directory itself is checked by run.preflight and load_policy
    one_of("model", model.name, MODEL_NAMES, "choose with model=<name>, or set model.path=<dir>")
    if model.name == "hf":
        raise UserError(hf_path_message(None, model.hub_id))


def _check_filter(flt: FilterConfig, group_size: int) -> None:
    one_of("filter", flt.name, group_options("filter"), "choose with filter=<name>")
    if flt.name == "none":
        return
    one_of("filter.metric", flt.metric, score_names())
    one_of("filter.strategy", flt.strategy, strategy_names())
    try:
        check_settings(**flt.filter_options(), group_size=group_size)
    except UserError as exc:
        raise UserError(f"filter={flt.name}: {exc}") from None


def _check_diagnostics(diag: DiagnosticsConfig) -> None:
    for name in diag.skip_samplers:
        one_of("diagnostics.skip_samplers[]", name, sampler_names())
    one_of("diagnostics.grad_buckets_mode", diag.grad_buckets_mode, tuple(BUCKET_MODES))


def _check_async_rollouts(cfg: RunConfig, dynamic_sampling: bool) -> None:
    """``rollout.max_staleness`` > 0 overlaps the engine's decoding with the update (``rollout.producer``)."""
    s = cfg.rollout.max_staleness
    if cfg.rollout.engine != "vllm":
        raise UserError(
            f"rollout.max_staleness={s} decodes beside the update on an engine of its own, but with rollout.engine={cfg.rollout.engine} "
            "the trainer's model decodes, so nothing can overlap: set rollout.engine=vllm, or rollout.max_staleness=0"
        )
    if dynamic_sampling:
        raise UserError(
            f"algorithm={cfg.algorithm.name}'s dynamic sampling draws extra batches inside an iteration, which rollout.max_staleness={s} "
            "has decoded ahead: set algorithm.dynamic_sampling=false, or rollout.max_staleness=0"
        )
