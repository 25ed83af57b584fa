"""Compose a run's config from ``conf/`` (``config.conf_files`` finds it in a checkout and in a wheel)
and turn it into a :class:`RunConfig` that follows the schema.

:func:`to_run_config` is the one way from a Hydra ``DictConfig`` to a run config: unknown keys are
errors (``+trainer.max_stepz=3`` would otherwise be dropped silently) and every section checks its own
numbers. :func:`compose` does the same outside a Hydra app. Every failure is a one-line
:class:`UserError` that names the fix.

Like the rest of ``agentcollapse.config`` this imports nothing of the package above it (nor torch): the
names a config holds (env, model, algorithm, filter, sampler, ...) are defined by the parts above and
checked by the run layer, which also resolves the algorithm preset (``agentcollapse.run.checks``:
``compose_run`` is this plus those checks).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentcollapse.config.conf_files import CONF_DIR, group_options
from agentcollapse.config.schema import (
    AlgorithmConfig,
    DiagnosticsConfig,
    EnvConfig,
    FilterConfig,
    LoggerConfig,
    ModelConfig,
    RolloutConfig,
    RunConfig,
    TrainerConfig,
)
from agentcollapse.errors import UserError

__all__ = ["compose", "hydra_message", "register_configs", "to_run_config", "to_yaml"]

SCHEMAS: dict[str, type] = {
    "env": EnvConfig,
    "model": ModelConfig,
    "algorithm": AlgorithmConfig,
    "filter": FilterConfig,
    "rollout": RolloutConfig,
    "diagnostics": DiagnosticsConfig,
    "trainer": TrainerConfig,
    "logger": LoggerConfig,
}


def register_configs() -> None:
    """Register the schemas so every YAML under conf/ is validated against them."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    for group, node in SCHEMAS.items():
        cs.store(group=group, name=f"{group}_schema", node=node)


def compose(overrides: list[str], config_dir: str | None = None, config_name: str = "config") -> RunConfig:
    """The run config for ``overrides``, composed outside a Hydra app: schema and numbers checked, names
    not (``run.checks.compose_run`` checks them and resolves the algorithm preset)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    register_configs()
    if not any(o.startswith("run_dir=") for o in overrides):
        overrides = ["run_dir=unused", *overrides]  # the default run_dir is Hydra's output dir
    try:
        with initialize_config_dir(config_dir=config_dir or CONF_DIR, version_base="1.3"):
            composed = hydra_compose(config_name, overrides=overrides)
    except HydraException as exc:
        raise UserError(hydra_message(exc)) from None
    except OmegaConfBaseException as exc:
        raise UserError(f"invalid config: {str(exc).splitlines()[0]}") from None
    return to_run_config(composed)


def to_run_config(cfg: DictConfig | RunConfig) -> RunConfig:
    """A composed config as a :class:`RunConfig`: no unknown key, every section's numbers checked."""
    if not isinstance(cfg, RunConfig):
        unknown = _unknown_keys(cfg, RunConfig)
        if unknown:
            raise UserError(_unknown_key_message(unknown[0]))
        try:
            obj = OmegaConf.to_object(cfg)
        except Exception as exc:  # omegaconf raises several types for missing/invalid values
            raise UserError(f"invalid config: {str(exc).splitlines()[0]}") from None
        if not isinstance(obj, RunConfig):
            raise UserError("config does not follow the run schema (compose it from conf/config.yaml)")
        cfg = obj
    cfg.validate()
    return cfg


def to_yaml(cfg: RunConfig) -> str:
    """The config as a run stores it in ``config.yaml``: every value resolved."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg), resolve=True)


def _unknown_keys(node: Any, schema: type, prefix: str = "") -> list[str]:
    """Keys of ``node`` that its dataclass schema lacks."""
    if not isinstance(node, DictConfig):
        return []
    hints = typing.get_type_hints(schema)
    out = []
    for key in node.keys():
        if key not in hints:
            out.append(f"{prefix}{key}")
        elif dataclasses.is_dataclass(hints[key]):
            out += _unknown_keys(node._get_node(key), hints[key], f"{prefix}{key}.")
    return out


def _schema_keys(path: str) -> list[str] | None:
    """Field names of the schema node holding ``path`` (``trainer.max_stepz`` -> TrainerConfig's), or None."""
    schema: Any = RunConfig
    for part in path.split(".")[:-1]:
        hints = typing.get_type_hints(schema)
        if part not in hints or not dataclasses.is_dataclass(hints[part]):
            return None
        schema = hints[part]
    return [f.name for f in dataclasses.fields(schema)]


def _unknown_key_message(key: str) -> str:
    parent = key.rpartition(".")[0]
    valid = _schema_keys(key)
    where = f"under {parent}" if parent else "at the top level"
    hint = f"; valid keys {where}: {', '.join(valid)}" if valid else ""
    return f"unknown config key {key!r}{hint} (check the spelling; `agentcollapse train --help` lists every key, `--cfg job` prints the config)"


def hydra_message(exc: BaseException) -> str:
    """One line, naming the fix, for a Hydra composition error."""
    from hydra.errors import MissingConfigException, OverrideParseException

    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    found = re.search(r"Could not find '([^'/]+)/([^']+)'", text)
    if isinstance(exc, MissingConfigException) and found:
        group, name = found.groups()
        options = group_options(group)
        valid = f"valid {group}s: {', '.join(options)}" if options else f"no {group} is defined under conf/{group}/"
        how = f"choose with {group}=<name>" + (", or `make train ENV=<name>`" if group == "env" else "")
        return f"unknown {group} {name!r}; {valid} ({how})"
    key = re.match(r"Could not override '([^']+)'", text)
    cause = exc.__cause__
    if key and cause is not None and type(cause).__name__ in ("ConfigAttributeError", "ConfigKeyError"):
        return _unknown_key_message(key.group(1))
    merging = re.match(r"Error merging override (.+)", text)
    if merging and cause is not None:
        return f"invalid override {merging.group(1).strip()!r}: {str(cause).splitlines()[0]}"
    if isinstance(exc, OverrideParseException):
        return f"{' '.join(lines[:2])}; overrides look like key=value (see `agentcollapse train --help`)"
    return " ".join(lines[:2]) or type(exc).__name__
