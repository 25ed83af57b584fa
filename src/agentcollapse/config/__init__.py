"""The config layer, at the bottom of the package: typed schemas with per-field help (``schema``) and
where the config files are (``conf_files``). Importing it pulls in nothing else of the package.

Above the registries sit composition from ``conf/`` into a checked run config (``config.compose``), the
checks of names against the registries (``config.validate``) and preset resolution (``config.resolve``):
import them by their module path.
"""

from agentcollapse.config.conf_files import CONF_DIR, group_options
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
    "field_help",
    "group_options",
]
