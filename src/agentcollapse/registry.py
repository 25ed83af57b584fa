"""A name -> spec registry filled by decorators, in the style of verl's ``register_adv_est``.

Advantage estimators, loss aggregations and KL estimators (``agentcollapse.algorithms``), filter scores
and strategies (``agentcollapse.filtering``), MI-proxy samplers (``agentcollapse.diagnostics``) and envs
(``agentcollapse.envs``) each keep one :class:`Registry`. Adding an entry is one decorated
function; lookups of an unknown name raise :class:`agentcollapse.errors.UserError` listing the valid
names, in registration order, so the message always matches the code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from agentcollapse.errors import UserError

T = TypeVar("T")

__all__ = ["Registry"]


class Registry(Generic[T]):
    """Ordered ``name -> spec`` map; ``kind`` names the entries in error messages (e.g. "filter metric")."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def add(self, name: str, spec: T) -> T:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} names must be non-empty strings, got {name!r}")
        if name in self._entries:
            # A programming error (two definitions of one name), not a user error.
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = spec
        return spec

    def remove(self, name: str) -> T:
        """Take ``name`` out again (tests and interactive experiments register temporary entries)."""
        return self._entries.pop(name)

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise UserError(f"unknown {self.kind} {name!r}; choose one of {', '.join(self._entries)}") from None

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("name")`` adds the decorated object under ``name``."""

        def wrap(spec: T) -> T:
            return self.add(name, spec)

        return wrap

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._entries
        except TypeError:  # unhashable, e.g. a list from a bad config
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)
