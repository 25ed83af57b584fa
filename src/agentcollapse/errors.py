"""One exception type for problems the user can fix (the CLI prints its message without a traceback), the
one check that a setting names one of a list of choices, and the one check that a directory is writable."""

from __future__ import annotations

import tempfile
from pathlib import Path

__all__ = ["UserError", "check_writable_dir", "one_of"]


class UserError(ValueError):
    """Bad input or environment: the message says what is wrong and how to fix it.

    A ValueError, so pure functions that reject a bad value raise it and callers that only know
    ``ValueError`` still catch it.
    """


def one_of(name: str, value: object, valid: list[str] | tuple[str, ...], how: str = "") -> None:
    """Raise a one-line :class:`UserError` listing ``valid`` when ``value`` (the setting ``name``) is not one of them."""
    if value not in valid:
        raise UserError(f"unknown {name} {value!r}; valid: {', '.join(valid)}{f' ({how})' if how else ''}")


def check_writable_dir(path: Path, what: str, fix: str) -> None:
    """Create ``path`` if missing and raise a one-line :class:`UserError` (``what`` is not writable; ``fix``)
    when a file cannot be made in it. The probe file's name is unique, so processes that share a directory
    (a sweep's workers, the test suite's) can check it at the same moment."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UserError(f"{what} {path} is not writable ({exc.strerror or type(exc).__name__}); {fix}") from None
