"""Sweeps (the run layer's neighbour): an Optuna study per sweep directory behind a Hydra sweeper.

``settings`` holds what ``hydra.sweeper`` configures; ``space`` reads Hydra's sweep overrides into a
search space; ``storage`` says where the study lives and keeps its password off the disk; ``study``
keeps the study (``study.db``, resume, ask and tell), ``outcome`` reads a trial's run record,
``report`` writes ``trials.csv`` and the progress lines, and ``optuna_bridge`` holds the only calls
into Optuna's internals; ``runner`` is the sweeper's loop around Hydra's launcher; ``pruning`` has the
collapse-aware pruner and the in-trial reporter; ``workers`` starts JOBS worker processes on one study.
The Hydra plugin itself is ``hydra_plugins.agentcollapse_sweeper``.

Import the modules themselves (``from agentcollapse.sweep.study import SweepStudy``): this package
imports none of them, so the Hydra plugin reads the settings without loading Lightning.
"""
