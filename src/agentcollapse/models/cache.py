"""One build per cache entry: processes that share a cold cache (a sweep's workers, the test suite's
workers) build an entry once; the others wait for it and then find it built."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["build_lock"]


@contextmanager
def build_lock(target: Path) -> Iterator[None]:
    """An exclusive lock on building ``target`` (a lock file beside it, released when the block ends
    or the process dies). Check again inside the block whether another process built it meanwhile."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
