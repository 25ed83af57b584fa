"""The config layer: typed schemas with per-field help (``schema``), composition from ``conf/`` and
the one path to a checked run config (``compose``), and preset resolution (``resolve``)."""

from agentcollapse.config.compose import CONF_DIR, compose, group_options, hydra_message, load_run_config, register_configs, to_yaml
from agentcollapse.config.resolve import algorithm_preset, resolve_presets
from agentcollapse.config.schema import (
    AlgorithmConfig,
    DiagnosticsConfig,
    EnvConfig,
    FilterConfig,
    LoggerConfig,
    LoraConfig,
    ModelConfig,
    RolloutConfig,
    RunConfig,
    SweepTrialConfig,
    TrainerConfig,
    WandbConfig,
    WarmStartConfig,
    field_help,
)

__all__ = [
    "CONF_DIR",
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
    "algorithm_preset",
    "compose",
    "field_help",
    "group_options",
    "hydra_message",
    "load_run_config",
    "register_configs",
    "resolve_presets",
    "to_yaml",
]
