"""Text environments behind one contract (see ``base.TextEnv``); ``make(name, **cfg)`` builds one."""

from __future__ import annotations

from typing import Any, Callable

from agentcollapse.envs.base import TextEnv
from agentcollapse.errors import UserError

_REGISTRY: dict[str, Callable[..., TextEnv]] = {}


def register(name: str) -> Callable[[type[TextEnv]], type[TextEnv]]:
    def wrap(cls: type[TextEnv]) -> type[TextEnv]:
        _REGISTRY[name] = cls
        return cls

    return wrap


def available() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def make(name: str, **cfg: Any) -> TextEnv:
    _load_builtin()
    if name not in _REGISTRY:
        raise UserError(f"unknown env {name!r}; valid envs: {', '.join(sorted(_REGISTRY))} (e.g. ENV=frozenlake)")
    try:
        return _REGISTRY[name](**cfg)
    except TypeError as exc:
        raise UserError(f"bad settings for env {name!r}: {exc}") from None


def _load_builtin() -> None:
    # Imported lazily so a missing optional env never breaks the others.
    import importlib

    for module in ("frozenlake", "sokoban", "countdown", "math_env"):
        try:
            importlib.import_module(f"agentcollapse.envs.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"agentcollapse.envs.{module}":
                raise


__all__ = ["TextEnv", "make", "register", "available"]
