"""Resolve the algorithm preset once: ``algorithm.name`` picks the literature's settings
(``algorithms.presets``) and every non-null field of the config is laid over them."""

from __future__ import annotations

from dataclasses import fields

from agentcollapse.algorithms.losses import POLICY_LOSSES
from agentcollapse.algorithms.presets import PRESETS, AlgorithmPreset, with_overrides
from agentcollapse.config.schema import AlgorithmConfig, RunConfig, _one_of
from agentcollapse.errors import UserError

__all__ = ["algorithm_preset", "resolve_presets"]


def algorithm_preset(cfg: AlgorithmConfig) -> AlgorithmPreset:
    """The preset named by ``cfg.name`` with every non-null field of ``cfg`` laid over it (and the chosen
    ``policy_loss``'s own defaults under them)."""
    if cfg.name not in PRESETS:
        raise UserError(f"unknown algorithm {cfg.name!r}; valid algorithms: {', '.join(sorted(PRESETS))} (choose with algorithm=<name>)")
    if cfg.policy_loss is not None and cfg.policy_loss not in POLICY_LOSSES:
        _one_of("algorithm.policy_loss", cfg.policy_loss, POLICY_LOSSES.names())
    preset = PRESETS[cfg.name]
    overrides = {f.name: getattr(cfg, f.name) for f in fields(preset) if f.name != "name" and getattr(cfg, f.name, None) is not None}
    try:
        return with_overrides(preset, **overrides)
    except (ValueError, TypeError) as exc:
        raise UserError(f"bad algorithm settings: {exc}") from None


def resolve_presets(cfg: RunConfig) -> RunConfig:
    """Fill every null preset field of ``cfg.algorithm`` in place, so the stored config says what ran."""
    preset = algorithm_preset(cfg.algorithm)
    for f in fields(cfg.algorithm):
        if getattr(cfg.algorithm, f.name) is None and hasattr(preset, f.name):
            setattr(cfg.algorithm, f.name, getattr(preset, f.name))
    return cfg
