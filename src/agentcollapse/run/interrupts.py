"""SIGINT/SIGTERM handlers for a block of code, one way for every process of ours: a run raises
``Interrupted``, the sweep loop a SystemExit it records, ``agentcollapse sweep`` forwards them to its
workers. Light (no torch), so the sweep's parent process imports it at start-up."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["INTERRUPTS", "handling_interrupts", "ignore_interrupts"]

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)
"""The signals a user or a scheduler stops us with: Ctrl+C, and SLURM's or ``kill``'s default."""


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()  # signal handlers live in the main thread only


@contextmanager
def handling_interrupts(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """``handler(signum, frame)`` receives SIGINT/SIGTERM inside the block; the handlers in place before
    are restored after it, however it ends. Off the main thread (a test runner's, an embedding
    application's) nothing is installed and the block runs as it would without."""
    if not _main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in INTERRUPTS}
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)


def ignore_interrupts() -> None:
    """SIGINT/SIGTERM ignored while an interruption is being recorded: a second Ctrl+C must not cut the
    record short (the enclosing :func:`handling_interrupts` restores the handlers afterwards)."""
    if _main_thread():
        for sig in INTERRUPTS:
            signal.signal(sig, signal.SIG_IGN)
