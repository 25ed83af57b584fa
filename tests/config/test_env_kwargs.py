"""``env.kwargs`` is typed by each env's dataclass (``config/env_kwargs.py``): composing ``env=<name>``
gives the constructor's defaults as a plain dict, any keyword overrides without ``+``, and a misspelt key
or a wrongly typed value is one clear line at compose."""

from __future__ import annotations

import dataclasses

import pytest

from agentcollapse import envs
from agentcollapse.config import EnvConfig, field_help
from agentcollapse.config.compose import compose
from agentcollapse.config.env_kwargs import ENV_KWARGS, FrozenLakeKwargs
from agentcollapse.errors import UserError

BASE = ["cache_dir=/tmp/unused"]


def _a_new_value(value):
    """A value of the same type that differs from ``value`` (what an override would set)."""
    if isinstance(value, bool):
        return str(not value).lower(), not value
    if isinstance(value, int):
        return str(value + 1), value + 1
    if isinstance(value, float):
        return str(value / 2 + 0.125), value / 2 + 0.125
    if isinstance(value, str):
        return "other", "other"
    return f"[{value[0]}]", value[:1]  # a list: its first item


@pytest.mark.parametrize("name", sorted(ENV_KWARGS))
def test_an_env_composes_its_constructor_defaults_as_a_plain_dict(name):
    cfg = compose([*BASE, f"env={name}"])
    assert type(cfg.env.kwargs) is dict
    assert cfg.env.kwargs == dataclasses.asdict(ENV_KWARGS[name]())


@pytest.mark.parametrize("name", sorted(ENV_KWARGS))
def test_every_keyword_of_an_env_overrides_without_a_plus(name):
    defaults = dataclasses.asdict(ENV_KWARGS[name]())
    overrides, expected = [], dict(defaults)
    for key, value in defaults.items():
        text, new = _a_new_value(value)
        overrides.append(f"env.kwargs.{key}={text}")
        expected[key] = new
    assert compose([*BASE, f"env={name}", *overrides]).env.kwargs == expected


def test_an_override_reaches_the_env():
    cfg = compose([*BASE, "env.kwargs.slip=0.3", "env.kwargs.size=5"])
    env = envs.from_config(cfg.env)
    assert (env.slip, env.size) == (0.3, 5)
    assert compose([*BASE, "env=searchqa", "env.kwargs.top_k=5"]).env.kwargs["top_k"] == 5
    sokoban = envs.from_config(compose([*BASE, "env=sokoban", "env.kwargs.dim_room=[5,7]"]).env)
    sokoban.reset(0)
    assert (sokoban.room.height, sokoban.room.width) == (5, 7)


def test_a_misspelt_keyword_names_the_env_s_keys():
    with pytest.raises(UserError) as err:
        compose([*BASE, "env.kwargs.slipp=0.3"])
    message = str(err.value)
    assert "\n" not in message and "'env.kwargs.slipp'" in message
    assert "valid keys under env.kwargs: size, frozen_prob, slip," in message
    with pytest.raises(UserError, match=r"'env.kwargs.slip'; valid keys under env.kwargs: difficulty \("):
        compose([*BASE, "env=math", "env.kwargs.slip=0.3"])  # another env's keyword
    with pytest.raises(UserError, match=r"'env.kwargs.nope'; valid keys under env.kwargs: num_passages,"):
        compose([*BASE, "env=searchqa", "+env.kwargs.nope=1"])  # a + does not smuggle one in


@pytest.mark.parametrize(
    "override, where",
    [("env.kwargs.size=abc", "Integer"), ("env.kwargs.slip=[1]", "slip"), ("env.kwargs=5", "mapping")],
)
def test_a_wrongly_typed_value_is_one_line(override, where):
    with pytest.raises(UserError) as err:
        compose([*BASE, override])
    assert "\n" not in str(err.value) and where in str(err.value)


def test_a_python_built_env_config_takes_the_dataclass_too():
    cfg = EnvConfig(name="frozenlake", kwargs=FrozenLakeKwargs(slip=0.2))
    assert cfg.kwargs == {**dataclasses.asdict(FrozenLakeKwargs()), "slip": 0.2}
    assert envs.from_config(cfg).slip == 0.2


@pytest.mark.parametrize("name", sorted(ENV_KWARGS))
def test_every_env_keyword_has_a_one_line_help(name):
    for key, _, text in field_help(ENV_KWARGS[name]):
        assert text and "\n" not in text, f"{ENV_KWARGS[name].__name__}.{key} has no one-line help"


def test_train_help_lists_every_env_keyword(capsys):
    from agentcollapse.cli.train import main

    main(["--help"])
    out = capsys.readouterr().out
    for name, schema in ENV_KWARGS.items():
        assert f"env={name}:" in out
        for f in dataclasses.fields(schema):
            assert f"env.kwargs.{f.name} " in out
