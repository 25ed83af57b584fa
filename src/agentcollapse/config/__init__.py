"""The config layer, at the bottom of the package: typed schemas with per-field help (``schema``, and
each built-in env's constructor keywords in ``env_kwargs``), where the config files are (``conf_files``)
and composition from ``conf/`` into a run config that follows the schema (``config.compose``, imported
by its module path). Nothing in it imports the package above
``errors`` and ``seeds``, nor torch: the checks of names against the registries of the parts above, and
the algorithm preset's resolution, are the run layer's (``agentcollapse.run.checks``).
"""

from agentcollapse.config.conf_files import CONF_DIR, group_options
from agentcollapse.config.env_kwargs import ENV_KWARGS
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
    "ENV_KWARGS",
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
    "group_options",
]
