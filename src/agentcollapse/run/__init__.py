"""The run layer: the run directory and lifecycle (records, signals, resume), building the Trainer and
its callbacks from a config, and the jobs around training. ``train(cfg) -> summary`` is the entry point
that the CLI, the sweeper, the benchmarks and the tests all call."""

from agentcollapse.run.lifecycle import Interrupted, preflight, train

__all__ = ["Interrupted", "preflight", "train"]
