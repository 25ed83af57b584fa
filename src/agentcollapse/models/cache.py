"""Cached builds: one build per cache entry, and never a half-built one.

A cache entry (the tiny policy, a warm start, the converted SmolLM2) is a directory built once and then
reused. :func:`cached_build` is the one way to make one: processes that share a cold cache (a sweep's
workers, the test suite's workers) build an entry once (:func:`build_lock`; the others wait, then find
it built), and the build writes into a temporary directory beside the entry that is renamed onto it
only when complete (``os.replace``, atomic), so a crash never leaves a half-built entry under its key.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from agentcollapse.errors import check_writable_dir

__all__ = ["build_lock", "cached_build", "checked_cache_dir"]


def checked_cache_dir(cache_dir: str | os.PathLike) -> Path:
    """The cache root ``cache_dir`` (``~`` expanded), created if missing; a UserError saying how to choose
    another when it is not writable."""
    root = Path(cache_dir).expanduser()
    check_writable_dir(root, "cache directory", "set cache_dir=<a writable dir> or AGENTCOLLAPSE_CACHE")
    return root


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


def cached_build(target: Path, build: Callable[[Path], None], *, marker: str, force: bool = False) -> Path:
    """``target``, built by ``build(tmp)`` unless it holds ``marker`` already (``force``: build anyway).

    ``build`` writes the entry into ``tmp``, a fresh directory beside ``target``; ``marker`` is the file
    a complete entry holds (the build writes it). Under :func:`build_lock` the check runs again, so an
    entry another process built meanwhile is not built twice; the finished ``tmp`` then replaces
    ``target`` in one rename, and a build that fails leaves neither ``tmp`` nor a partial ``target``."""
    if (target / marker).exists() and not force:
        return target
    with build_lock(target):
        if (target / marker).exists() and not force:
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".building-{target.name}-", dir=target.parent))
        try:
            build(tmp)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)  # atomic: a crash never leaves a half-built entry under the key
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target
