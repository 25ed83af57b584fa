"""Sweeps (the run layer's neighbour): an Optuna study per sweep directory behind a Hydra sweeper.

``space`` reads Hydra's sweep overrides into a search space; ``study`` keeps the study (``study.db``,
``trials.csv``, resume, progress lines); ``runner`` is the sweeper's loop around Hydra's launcher;
``pruning`` has the collapse-aware pruner and the in-trial reporter; ``workers`` starts JOBS worker
processes on one study. The Hydra plugin itself is ``hydra_plugins.agentcollapse_sweeper``.
"""

from agentcollapse.sweep.pruning import CollapseAwarePruner, TrialReporter, build_pruner
from agentcollapse.sweep.space import Axis, SearchSpace, parse_space
from agentcollapse.sweep.study import Outcome, SweepSettings, SweepStudy

__all__ = [
    "Axis",
    "CollapseAwarePruner",
    "Outcome",
    "SearchSpace",
    "SweepSettings",
    "SweepStudy",
    "TrialReporter",
    "build_pruner",
    "parse_space",
]
