"""One source for each default: the schema (``config/schema.py``) holds every field's default, so the
option a group composes by default (``conf/config.yaml``'s defaults list) restates none of them; an env's
constructor keywords have theirs in its kwargs dataclass (``config/env_kwargs.py``), which the
constructor takes its defaults from and ``conf/env/<name>.yaml`` composes (``<name>_schema``) instead of
listing them."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentcollapse import envs
from agentcollapse.config.compose import SCHEMAS
from agentcollapse.config.conf_files import CONF_DIR
from agentcollapse.config.env_kwargs import ENV_KWARGS


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
    """The built-in envs' files (custom.yaml is your own env's: its keywords are its constructor's)."""
    return sorted(p for p in (Path(CONF_DIR) / "env").glob("*.yaml") if p.stem != "custom")


def test_the_custom_env_file_composes_an_open_kwargs_schema_and_lists_no_value():
    data = yaml.safe_load((Path(CONF_DIR) / "env" / "custom.yaml").read_text())
    assert data == {"defaults": ["custom_schema"], "name": "custom"}


@pytest.mark.parametrize("path", _env_files(), ids=lambda p: p.stem)
def test_an_env_file_composes_its_kwargs_schema_and_lists_no_value(path):
    data = yaml.safe_load(path.read_text())
    assert data["name"] in ENV_KWARGS, f"{path.name}: {data['name']!r} has no kwargs dataclass in config/env_kwargs.py"
    assert f"{data['name']}_schema" in data["defaults"], f"{path.name}: its defaults must compose {data['name']}_schema"
    assert "kwargs" not in data, f"{path.name} lists kwargs: their defaults live in {ENV_KWARGS[data['name']].__name__}"


@pytest.mark.parametrize("name", sorted(ENV_KWARGS))
def test_a_constructor_takes_its_defaults_from_its_kwargs_dataclass(name):
    envs.available()  # registers the built-in envs
    params = inspect.signature(envs.ENVS.get(name)).parameters
    defaults = {k: p.default for k, p in params.items() if k != "data_path"}
    kwargs = ENV_KWARGS[name]()
    fields = [f.name for f in dataclasses.fields(kwargs)]
    assert list(defaults) == fields, f"{name}: constructor keywords {list(defaults)} != {type(kwargs).__name__} fields {fields}"
    for key, default in defaults.items():
        value = getattr(kwargs, key)
        # a list in the dataclass (OmegaConf has no tuples) is the constructor's tuple
        assert (list(default) if isinstance(default, tuple) else default) == value, f"{name}.{key}: {default!r} != {value!r}"
        assert type(default) is (tuple if isinstance(value, list) else type(value)), f"{name}.{key}: {default!r} vs {value!r}"


def _written_defaults(cls: type) -> dict[str, str]:
    """The source text of each default in ``cls.__init__``'s signature."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    args = tree.body[0].args  # type: ignore[attr-defined]
    positional = args.args[len(args.args) - len(args.defaults) :]
    return {a.arg: ast.unparse(d) for a, d in zip(positional + args.kwonlyargs, args.defaults + args.kw_defaults) if d is not None}


@pytest.mark.parametrize("name", sorted(ENV_KWARGS))
def test_a_constructor_writes_no_default_value_of_its_own(name):
    # equal values could still be written twice; each default must read the dataclass (_D.<key>)
    envs.available()
    written = {k: v for k, v in _written_defaults(envs.ENVS.get(name)).items() if k != "data_path"}
    own = {k: v for k, v in written.items() if f"_D.{k}" not in v}
    assert not own, f"{name}: defaults written in the constructor, not read from {ENV_KWARGS[name].__name__}: {own}"
