"""``hydra.sweeper.pruner``'s settings, their names and defaults: :class:`PrunerSettings`.

Its own light module (no Optuna, no torch): the Hydra plugin's ``PrunerConf`` is this dataclass, and
:func:`agentcollapse.sweep.pruning.build_pruner` checks a pruner's settings against its fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentcollapse.config.schema import DiagnosticsConfig, opt

__all__ = ["PrunerSettings"]

_RULE = DiagnosticsConfig()  # the collapse rule's defaults: diagnostics.early_stop_* (one source)


@dataclass
class PrunerSettings:
    """``hydra.sweeper.pruner``'s settings: their names and defaults (the Hydra plugin's ``PrunerConf``;
    :func:`agentcollapse.sweep.pruning.build_pruner` reads them)."""

    name: str = opt(
        "none",
        help="none: every trial runs to the end | median: Optuna's median rule on the reported objective | "
        "collapse: pruned once the MI proxy says the reasoning collapsed, else by the median rule",
    )
    report_metric: str | None = opt(None, help="reported after each iteration that logs it (null: the objective)")
    n_startup_trials: int = opt(4, help="median rule: trials that finish before any is pruned")
    n_warmup_steps: int = opt(1, help="median rule: iterations of each trial before it can be pruned")
    metric: str = opt(_RULE.early_stop_metric, help="collapse rule: what it reads")
    threshold: float = opt(_RULE.early_stop_threshold, help="collapse rule: collapsed below this ...")
    patience: int = opt(_RULE.early_stop_patience, help="... for this many proxy steps in a row")
    min_step: int = opt(_RULE.early_stop_min_step, help="collapse rule: readings before this iteration are ignored")
    median: bool = opt(True, help="collapse: also the median rule")
