"""One exception type for problems the user can fix (the CLI prints its message without a traceback), and
the one check that a setting names one of a list of choices."""

from __future__ import annotations

__all__ = ["UserError", "one_of"]


class UserError(ValueError):
    """Bad input or environment: the message says what is wrong and how to fix it.

    A ValueError, so pure functions that reject a bad value raise it and callers that only know
    ``ValueError`` still catch it.
    """


def one_of(name: str, value: object, valid: list[str] | tuple[str, ...], how: str = "") -> None:
    """Raise a one-line :class:`UserError` listing ``valid`` when ``value`` (the setting ``name``) is not one of them."""
    if value not in valid:
        raise UserError(f"unknown {name} {value!r}; valid: {', '.join(valid)}{f' ({how})' if how else ''}")
