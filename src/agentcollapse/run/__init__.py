"""The run layer: the run directory and lifecycle (records, signals, resume), building the Trainer and
its callbacks from a config, and the jobs around training. ``train(cfg) -> summary`` is the entry point
that the CLI, the sweeper, the benchmarks and the tests all call.

Its names load ``run.lifecycle`` (torch, Lightning) when first used, so a light module of this layer
(``run.doctor``'s first lines, the CLI's config errors) does not wait for them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentcollapse.run.lifecycle import Interrupted, preflight, train

__all__ = ["Interrupted", "preflight", "train"]


def __getattr__(name: str) -> Any:
    """``run.train`` and the other names above, and ``run.<module>`` (``run.trainer``), on first use."""
    if name in __all__:
        from agentcollapse.run import lifecycle

        return getattr(lifecycle, name)
    import importlib

    if name.startswith("__"):  # a tool probing for a dunder (``__wrapped__``, ...): not a module of ours
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
