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
from agentcollapse.config.env_kwargs import ENV_KWARGS
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

__all__ = ["compose", "env_schema", "hydra_message", "register_configs", "to_run_config", "to_yaml"]

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
    for name in ENV_KWARGS:  # conf/env/<name>.yaml composes env/<name>_schema: its kwargs' one source
        cs.store(group="env", name=f"{name}_schema", node=env_schema(name))
    # your own env (env=custom): its keywords are its constructor's, so env.kwargs stays an open mapping
    cs.store(group="env", name="custom_schema", node=OmegaConf.structured(EnvConfig(name="custom")))


def env_schema(name: str) -> DictConfig:
    """The ``env`` section of a built-in env: ``env.kwargs`` typed by its dataclass (``config.env_kwargs``),
    every constructor default and the type of each key in it."""
    node = OmegaConf.structured(EnvConfig(name=name))
    node.kwargs = OmegaConf.structured(ENV_KWARGS[name])  # EnvConfig.kwargs is Any: the node keeps this type
    return node


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
        raise UserError(f"invalid config: {_omegaconf_message(exc)}") from None
    return to_run_config(composed)


def to_run_config(cfg: DictConfig | RunConfig) -> RunConfig:
    """A composed config as a :class:`RunConfig`: no unknown key, every section's numbers checked."""
    if not isinstance(cfg, RunConfig):
        unknown = _unknown_keys(cfg, RunConfig)
        if unknown:
            raise UserError(_unknown_key_message(unknown[0], cfg))
        try:
            obj = OmegaConf.to_object(cfg)
        except Exception as exc:  # omegaconf raises several types for missing/invalid values
            raise UserError(f"invalid config: {_omegaconf_message(exc)}") from None
        if not isinstance(obj, RunConfig):
            raise UserError("config does not follow the run schema (compose it from conf/config.yaml)")
        cfg = obj
    cfg.validate()
    return cfg


def to_yaml(cfg: RunConfig) -> str:
    """The config as a run stores it in ``config.yaml``: every value resolved."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg), resolve=True)


def _unknown_keys(node: Any, schema: type, prefix: str = "") -> list[str]:
    """Keys of ``node`` that its dataclass schema lacks (a field typed ``Any`` holding a dataclass node,
    as ``env.kwargs``, is checked against that node's dataclass)."""
    if not isinstance(node, DictConfig):
        return []
    hints = typing.get_type_hints(schema)
    out = []
    for key in node.keys():
        child = node._get_node(key)
        if key not in hints:
            out.append(f"{prefix}{key}")
        elif dataclasses.is_dataclass(hints[key]):
            out += _unknown_keys(child, hints[key], f"{prefix}{key}.")
        elif isinstance(child, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(child)):
            out += _unknown_keys(child, OmegaConf.get_type(child), f"{prefix}{key}.")  # type: ignore[arg-type]
    return out


def _schema_keys(path: str, cfg: Any = None) -> list[str] | None:
    """Field names of the schema node holding ``path`` (``trainer.max_stepz`` -> TrainerConfig's), or None.
    ``cfg``: the composed config, where a field typed ``Any`` holds a dataclass node (``env.kwargs``)."""
    schema: Any = RunConfig
    node = cfg
    for part in path.split(".")[:-1]:
        hints = typing.get_type_hints(schema)
        node = node._get_node(part) if isinstance(node, DictConfig) and part in node else None
        if part in hints and dataclasses.is_dataclass(hints[part]):
            schema = hints[part]
        elif isinstance(node, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(node)):
            schema = OmegaConf.get_type(node)
        else:
            return None
    return [f.name for f in dataclasses.fields(schema)]


def _unknown_key_message(key: str, cfg: Any = None, valid: list[str] | None = None) -> str:
    parent = key.rpartition(".")[0]
    valid = valid or _schema_keys(key, cfg)
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
        # OmegaConf's error names the first unknown part (env.kwargz of env.kwargz.slip) and the dataclass
        # that lacks it, which for env.kwargs is the chosen env's keywords (config.env_kwargs)
        unknown = getattr(cause, "full_key", None) or key.group(1)
        return _unknown_key_message(unknown, valid=_fields_of(getattr(cause, "object_type", None)))
    merging = re.match(r"Error merging override (.+)", text)
    if merging and cause is not None:
        return f"invalid override {merging.group(1).strip()!r}: {str(cause).splitlines()[0]}"
    if isinstance(exc, OverrideParseException):
        return f"{' '.join(lines[:2])}; overrides look like key=value (see `agentcollapse train --help`)"
    return " ".join(lines[:2]) or type(exc).__name__


def _fields_of(schema: Any) -> list[str] | None:
    """The field names of a dataclass (an OmegaConf error's ``object_type``), or None."""
    return [f.name for f in dataclasses.fields(schema)] if dataclasses.is_dataclass(schema) else None


def _omegaconf_message(exc: BaseException) -> str:
    """An OmegaConf error's first line, with the key it is about (``env.kwargs.size``) where it names one."""
    first = str(exc).splitlines()[0]
    key = getattr(exc, "full_key", None)
    return f"{key}: {first}" if key and key not in first else first
