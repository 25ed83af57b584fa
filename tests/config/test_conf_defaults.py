"""One source for each default: the schema (``config/schema.py``) holds every field's default, so the
option a group composes by default (``conf/config.yaml``'s defaults list) restates none of them; an env's
``conf/env/<name>.yaml`` lists every constructor keyword (they are what ``env.kwargs.<key>=`` can
override: Hydra refuses a key the file does not hold) with the constructor's own default."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentcollapse import envs
from agentcollapse.config.compose import SCHEMAS
from agentcollapse.config.conf_files import CONF_DIR


def _schema_defaults(schema: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(schema):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _repeated(node: dict[str, Any], schema: type, where: str = "") -> list[str]:
    """The keys of a YAML mapping whose value equals the schema's default (nested sections too)."""
    defaults, hints, out = _schema_defaults(schema), typing.get_type_hints(schema), []
    for key, value in node.items():
        if key in ("defaults", "name") or key not in defaults:  # an option names itself
            continue
        if dataclasses.is_dataclass(hints[key]) and isinstance(value, dict):
            out += _repeated(value, hints[key], f"{where}{key}.")
        elif value == defaults[key]:
            out.append(f"{where}{key}={value!r}")
    return out


def _default_options() -> list[tuple[str, str]]:
    """(group, option) of every group with a schema that conf/config.yaml composes by default."""
    main = yaml.safe_load((Path(CONF_DIR) / "config.yaml").read_text())
    picked = [entry for entry in main["defaults"] if isinstance(entry, dict)]
    return [(group, option) for entry in picked for group, option in entry.items() if group in SCHEMAS]


def test_the_default_options_are_the_ones_the_main_config_composes():
    assert dict(_default_options()) == {
        "model": "tiny",
        "env": "frozenlake",
        "algorithm": "grpo",
        "filter": "none",
        "trainer": "default",
        "logger": "wandb",
    }


@pytest.mark.parametrize("group, option", _default_options())
def test_a_default_option_repeats_no_schema_default(group, option):
    data = yaml.safe_load((Path(CONF_DIR) / group / f"{option}.yaml").read_text()) or {}
    repeated = _repeated(data, SCHEMAS[group])
    assert not repeated, f"conf/{group}/{option}.yaml repeats the schema's defaults {repeated}: the schema is their one source"


def test_the_check_finds_a_repeated_default():
    assert _repeated({"max_steps": 20, "val_every": 3}, SCHEMAS["trainer"]) == ["max_steps=20"]
    assert _repeated({"wandb": {"mode": "offline", "enabled": False}}, SCHEMAS["logger"]) == ["wandb.mode='offline'"]


def _env_files() -> list[Path]:
    return sorted((Path(CONF_DIR) / "env").glob("*.yaml"))


@pytest.mark.parametrize("path", _env_files(), ids=lambda p: p.stem)
def test_an_env_file_lists_its_constructor_defaults(path):
    data = yaml.safe_load(path.read_text())
    envs.available()  # registers the built-in envs
    params = inspect.signature(envs.ENVS.get(data["name"])).parameters
    defaults = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty and k != "data_path"}
    listed = data.get("kwargs") or {}
    # tuples in Python are lists in YAML
    normalised = {k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items()}
    assert sorted(listed) == sorted(normalised), f"{path.name}: kwargs must list every constructor keyword once"
    differ = {k: (listed[k], normalised[k]) for k in listed if listed[k] != normalised[k]}
    assert not differ, f"{path.name}: kwargs differ from the constructor's defaults (yaml, constructor): {differ}"
