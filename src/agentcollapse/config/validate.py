"""The checks of a run config that need the package's registries: every name (env, model, dtype,
algorithm preset and estimators, filter preset, score and strategy, MI-proxy sampler, bucket mode) is
looked up where it is defined, so an error lists exactly the names that exist; and the checks that span
sections. The schema's own ``validate()`` methods check numbers only (``config.schema``); checks that
touch the disk (a model directory, its chat template) run in ``run.preflight``."""

from __future__ import annotations

from agentcollapse import envs
from agentcollapse.algorithms import ROLLOUT_CORRECTIONS
from agentcollapse.config.conf_files import group_options
from agentcollapse.config.resolve import algorithm_preset
from agentcollapse.config.schema import DiagnosticsConfig, FilterConfig, ModelConfig, RunConfig, _one_of
from agentcollapse.diagnostics.samplers import sampler_names
from agentcollapse.errors import UserError
from agentcollapse.filtering import BUCKET_MODES, check_settings, score_names, strategy_names
from agentcollapse.models.policy import DTYPES, MODEL_NAMES, hf_path_message
from agentcollapse.rollout.vllm_engine import ENGINES

__all__ = ["validate"]


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
    _one_of("algorithm.rollout_correction", cfg.algorithm.rollout_correction, ROLLOUT_CORRECTIONS)
    _one_of("rollout.engine", cfg.rollout.engine, ENGINES)
    _one_of("diagnostics.proxy_engine", cfg.diagnostics.proxy_engine, ENGINES)
    if cfg.diagnostics.proxy_engine == "vllm" and cfg.rollout.engine != "vllm":
        raise UserError("diagnostics.proxy_engine=vllm scores with the rollout engine: set rollout.engine=vllm too, or proxy_engine=hf")
    if cfg.rollout.engine == "vllm" and cfg.trainer.devices * cfg.trainer.num_nodes > 1:
        raise UserError(
            "rollout.engine=vllm runs in one training process for now (one engine per rank is not built); "
            "use trainer.devices=1, or rollout.engine=hf with ddp/fsdp"
        )


def _check_model(model: ModelConfig) -> None:
    _one_of("model.dtype", model.dtype, tuple(DTYPES))
    if model.path:
        return  # the directory itself is checked by run.preflight and load_policy
    _one_of("model", model.name, MODEL_NAMES, "choose with model=<name>, or set model.path=<dir>")
    if model.name == "hf":
        raise UserError(hf_path_message(None, model.hub_id))


def _check_filter(flt: FilterConfig, group_size: int) -> None:
    _one_of("filter", flt.name, group_options("filter"), "choose with filter=<name>")
    if flt.name == "none":
        return
    _one_of("filter.metric", flt.metric, score_names())
    _one_of("filter.strategy", flt.strategy, strategy_names())
    try:
        check_settings(**flt.filter_options(), group_size=group_size)
    except UserError as exc:
        raise UserError(f"filter={flt.name}: {exc}") from None


def _check_diagnostics(diag: DiagnosticsConfig) -> None:
    for name in diag.skip_samplers:
        _one_of("diagnostics.skip_samplers[]", name, sampler_names())
    _one_of("diagnostics.grad_buckets_mode", diag.grad_buckets_mode, tuple(BUCKET_MODES))
