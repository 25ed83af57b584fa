"""Text environments behind one contract (see ``base.TextEnv``); ``make(name, **cfg)`` builds one,
``from_config(cfg.env)`` the one a run config names: a built-in one by ``env.name``, or with ``env=custom``
the user's own ``TextEnv`` subclass that ``env.target`` names (``path/to/my_env.py:MyEnv`` or
``my_pkg.my_env:MyEnv``), imported from outside the package."""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
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
        raise UserError(f"unknown env {name!r}; valid envs: {', '.join(sorted(ENVS))}, or custom (e.g. ENV=frozenlake)")
    return _construct(ENVS.get(name), name, cfg)


def from_config(cfg: EnvConfig) -> TextEnv:
    """The env of a run config's ``env`` section (``env.name`` with ``env.kwargs``, and ``env.data_path``
    when set: an env that loads real data takes it as its ``data_path`` argument)."""
    kwargs = dict(cfg.kwargs)
    if cfg.data_path is not None:
        kwargs["data_path"] = cfg.data_path
    if getattr(cfg, "target", None):
        return _construct(load_target(cfg.target), cfg.target, kwargs)
    return make(cfg.name, **kwargs)


def _construct(cls: Callable[..., TextEnv], label: str, kwargs: dict[str, Any]) -> TextEnv:
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise UserError(f"bad settings for env {label!r}: {exc}") from None


@functools.cache
def load_target(target: str) -> type[TextEnv]:
    """The ``TextEnv`` subclass ``env.target`` names: ``path/to/file.py:Class`` (loaded from that file) or
    ``package.module:Class`` (imported). Anything else is one line saying what is wrong and how to fix it.
    Found once per process: a rollout makes an env per trajectory, and none should repeat the checks."""
    where, _, name = target.rpartition(":")
    if where.endswith(".py"):
        module = _load_file(target, Path(where))
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            raise UserError(
                f"env.target={target!r}: no module {exc.name!r} to import; put its folder on PYTHONPATH, or name the file: "
                "env.target=path/to/my_env.py:MyEnv"
            ) from None
        except Exception as exc:
            raise UserError(f"env.target={target!r}: importing it raised {_where_it_failed(exc)}") from None
    cls = getattr(module, name, None)
    if cls is None:
        defined = sorted(k for k, v in vars(module).items() if inspect.isclass(v) and issubclass(v, TextEnv) and v is not TextEnv)
        raise UserError(f"env.target={target!r}: {where} defines no {name!r} (its TextEnv classes: {', '.join(defined) or 'none'})")
    if not (inspect.isclass(cls) and issubclass(cls, TextEnv)):
        raise UserError(f"env.target={target!r}: {name} is not a subclass of agentcollapse.envs.TextEnv (README: 'Your own environment')")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise UserError(f"env.target={target!r}: {name} leaves TextEnv's {missing} to write (README: 'Your own environment')")
    return cls


def _load_file(target: str, path: Path) -> Any:
    if not path.is_file():
        raise UserError(f"env.target={target!r}: no file {path} (a path from where the command runs, or an absolute one)")
    module_name = f"agentcollapse_user_env_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]}"
    if module_name in sys.modules:  # one class per file per process: a run makes many envs
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as exc:
        del sys.modules[module_name]
        raise UserError(f"env.target={target!r}: loading {path} raised {_where_it_failed(exc)}") from None
    return module


def _where_it_failed(exc: BaseException) -> str:
    """``Error: message`` and the innermost line of the user's file it came from, for one line of error."""
    frames = (
        [f for f in inspect.getinnerframes(exc.__traceback__) if "agentcollapse/envs/__init__" not in f.filename]
        if exc.__traceback__
        else []
    )
    at = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{at}"


def env_class(cfg: EnvConfig) -> type[TextEnv] | None:
    """The class ``cfg`` names (None: an unknown built-in name, which ``from_config`` reports)."""
    if getattr(cfg, "target", None):
        return load_target(cfg.target)
    _load_builtin()
    return ENVS.get(cfg.name) if cfg.name in ENVS else None  # type: ignore[return-value]


def episode_kwargs(cfg: EnvConfig) -> dict[str, Any]:
    """``env.kwargs`` less the env's ``runtime_kwargs``: what shapes its episodes, so what a cache key of
    something built from them (a warm start) holds."""
    cls = env_class(cfg)
    runtime = cls.runtime_kwargs if cls is not None else frozenset()
    return {k: v for k, v in dict(cfg.kwargs).items() if k not in runtime}


def episode_identity(cfg: EnvConfig) -> dict[str, Any]:
    """What makes the env's episodes what they are, for the cache key of something built from them: the name
    and episode keywords, and for your own env its target and its source file's hash (an edit rebuilds)."""
    identity: dict[str, Any] = {"name": cfg.name, "kwargs": episode_kwargs(cfg)}
    if getattr(cfg, "target", None):
        source = inspect.getsourcefile(load_target(cfg.target))
        identity["target"] = cfg.target
        identity["source"] = hashlib.sha256(Path(source).read_bytes()).hexdigest()[:16] if source else None
    return identity


def _load_builtin() -> None:
    # Imported lazily so a missing optional env never breaks the others.
    import importlib

    for module in ("frozenlake", "sokoban", "countdown", "math", "webshop", "deepcoder", "searchqa"):
        try:
            importlib.import_module(f"agentcollapse.envs.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"agentcollapse.envs.{module}":
                raise


__all__ = [
    "ENVS",
    "TextEnv",
    "available",
    "env_class",
    "episode_identity",
    "episode_kwargs",
    "from_config",
    "load_target",
    "make",
    "register",
]
