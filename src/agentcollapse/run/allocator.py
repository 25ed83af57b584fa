"""The memory allocator of a process that runs a model: tcmalloc where the machine has it.

PyTorch and vLLM on CPU allocate and free many short-lived tensors; under tcmalloc a SmolLM2 PPO run
on Sokoban took 0.95x the wall time of glibc's malloc and 0.90x its peak memory, every logged number
the same (docs/performance.md). An allocator is chosen when a process starts, so the CLI starts a model command
again with tcmalloc preloaded (:func:`restart_under_tcmalloc`); its child processes (sweep workers, DDP
ranks) inherit it. ``AGENTCOLLAPSE_MALLOC=system`` keeps glibc's. Debian/Ubuntu: ``apt-get install
libtcmalloc-minimal4``. Light on purpose: the CLI imports it before anything heavy.
"""

from __future__ import annotations

import ctypes.util
import os
import sys

__all__ = ["OPT_OUT", "in_use", "restart_under_tcmalloc", "tcmalloc_library"]

OPT_OUT = "AGENTCOLLAPSE_MALLOC"  # =system: keep the C library's malloc
# tcmalloc reports each allocation above this many bytes on stderr (default 1 GiB, which a batch's
# logits or KV caches reach): a run's log is not the place for it.
_QUIET = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 50)}


def tcmalloc_library() -> str | None:
    """The installed tcmalloc's file name as the dynamic linker finds it (None: not installed)."""
    for name in ("tcmalloc_minimal", "tcmalloc"):
        found = ctypes.util.find_library(name)
        if found:
            return found
    return None


def in_use() -> str:
    """``tcmalloc`` when this process runs under it, else ``system``."""
    try:
        with open("/proc/self/maps") as maps:
            return "tcmalloc" if "libtcmalloc" in maps.read() else "system"
    except OSError:  # not Linux
        return "system"


def restart_under_tcmalloc(module: str, argv: list[str]) -> None:
    """Replace this process (same PID, same arguments: ``python -m <module> <argv>``) with one that
    preloads tcmalloc, unless ``AGENTCOLLAPSE_MALLOC=system``, tcmalloc is already preloaded or not
    installed, or the restart fails; returns only then."""
    if os.environ.get(OPT_OUT, "tcmalloc") == "system" or "tcmalloc" in os.environ.get("LD_PRELOAD", ""):
        return
    library = tcmalloc_library()
    if library is None:
        return
    preload = " ".join(p for p in (library, os.environ.get("LD_PRELOAD", "")) if p)
    env = {**os.environ, **_QUIET, "LD_PRELOAD": preload}
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)
    except OSError:  # a Python that cannot be started again as itself: run under the allocator it has
        return
