"""Text environments behind one contract (see ``base.TextEnv``); ``make(name, **cfg)`` builds one,
``from_config(cfg.env)`` the one a run config names."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentcollapse.envs.base import TextEnv
from agentcollapse.errors import UserError
from agentcollapse.registry import Registry

if TYPE_CHECKING:
    from agentcollapse.config import EnvConfig

ENVS: Registry[Callable[..., TextEnv]] = Registry("env")
"""name -> env class; add one with ``@register("name")`` on a :class:`TextEnv` subclass."""
register = ENVS.register


def available() -> list[str]:
    _load_builtin()
    return sorted(ENVS)


def make(name: str, **cfg: Any) -> TextEnv:
    _load_builtin()
    if name not in ENVS:
        raise UserError(f"unknown env {name!r}; valid envs: {', '.join(sorted(ENVS))} (e.g. ENV=frozenlake)")
    try:
        return ENVS.get(name)(**cfg)
    except TypeError as exc:
        raise UserError(f"bad settings for env {name!r}: {exc}") from None


def from_config(cfg: EnvConfig) -> TextEnv:
    """The env of a run config's ``env`` section (``env.name`` with ``env.kwargs``, and ``env.data_path``
    when set: an env that loads real data takes it as its ``data_path`` argument)."""
    kwargs = dict(cfg.kwargs)
    if cfg.data_path is not None:
        kwargs["data_path"] = cfg.data_path
    return make(cfg.name, **kwargs)


def episode_kwargs(cfg: EnvConfig) -> dict[str, Any]:
    """``env.kwargs`` less the env's ``runtime_kwargs``: what shapes its episodes, so what a cache key of
    something built from them (a warm start) holds."""
    _load_builtin()
    runtime = ENVS.get(cfg.name).runtime_kwargs if cfg.name in ENVS else frozenset()  # type: ignore[attr-defined]
    return {k: v for k, v in dict(cfg.kwargs).items() if k not in runtime}


def _load_builtin() -> None:
    # Imported lazily so a missing optional env never breaks the others.
    import importlib

    for module in ("frozenlake", "sokoban", "countdown", "math_env", "webshop", "deepcoder", "searchqa"):
        try:
            importlib.import_module(f"agentcollapse.envs.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"agentcollapse.envs.{module}":
                raise


__all__ = ["ENVS", "TextEnv", "available", "episode_kwargs", "from_config", "make", "register"]
