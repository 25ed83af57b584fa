"""Sweeps (the run layer's neighbour): an Optuna study per sweep directory behind a Hydra sweeper.

``settings`` holds what ``hydra.sweeper`` configures; ``space`` reads Hydra's sweep overrides into a
search space; ``storage`` says where the study lives and keeps its password off the disk; ``study``
keeps the study (``study.db``, resume, ask and tell), ``outcome`` reads a trial's run record,
``report`` writes ``trials.csv`` and the progress lines, and ``optuna_bridge`` holds the only calls
into Optuna's internals; ``runner`` is the sweeper's loop around Hydra's launcher; ``pruning`` has the
collapse-aware pruner and the in-trial reporter; ``workers`` starts JOBS worker processes on one study.
The Hydra plugin itself is ``hydra_plugins.agentcollapse_sweeper``.

Import the modules themselves (``from agentcollapse.sweep.study import SweepStudy``): this package
loads none of them up front, so the Hydra plugin reads the settings without loading Lightning.
"""


def __getattr__(name: str) -> object:
    if name == "TrialReporter":  # the callback's path in the config.yaml of trials run before it moved
        from agentcollapse.sweep.pruning import TrialReporter

        return TrialReporter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
