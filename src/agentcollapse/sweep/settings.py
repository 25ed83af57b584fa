"""What ``hydra.sweeper`` configures: :class:`SweepSettings`, one field per setting with its help.

These fields are the sweeper's config: the Hydra plugin's ``AgentCollapseSweeperConf`` is this dataclass
plus the pruner's settings (:class:`~agentcollapse.sweep.pruner_settings.PrunerSettings`,
``hydra.sweeper.pruner``) and the search space (``params``), so a setting is added or documented here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentcollapse.config.schema import opt
from agentcollapse.errors import UserError
from agentcollapse.sweep.storage import refuse_password

__all__ = ["SAMPLERS", "SUMMARY_KEYS", "SweepSettings"]

SAMPLERS = ("grid", "tpe", "random")
# how a trial's logged values of the objective become its value (Outcome.from_run)
SUMMARY_KEYS = ("final", "peak_after_update", "peak")


@dataclass
class SweepSettings:
    """``hydra.sweeper``'s settings (``hydra.sweeper.<field>=...``); checked by :meth:`validate`."""

    sampler: str = opt("grid", help="grid: every combination of the params, each once; tpe / random: n_trials draws from the params")
    n_trials: int | None = opt(None, help="trials of a tpe / random search (a grid runs every combination once)")
    storage: str | None = opt(
        None,
        help="Optuna storage URL without a password; null: $AGENTCOLLAPSE_STORAGE, else sqlite:///<hydra.sweep.dir>/study.db "
        "(PostgreSQL to share across machines; the password in PGPASSWORD or ~/.pgpass)",
    )
    study_name: str = opt("sweep", help="the study's name in that storage")
    direction: str = opt("maximize", help="maximize | minimize the objective")
    objective: str = opt("val/success_rate", help="the metric that ranks trials (a column of metrics.csv)")
    summary_key: str = opt(
        "final",
        help="a trial's value: final = the mean of the objective's last three values after the first update (the "
        "tables' final success); peak_after_update / peak = summary.json's best after the first update / best overall",
    )
    seed: int = opt(0, help="the tpe / random sampler's seed (each worker draws from its own stream)")
    batch_size: int = opt(1, help="trials handed to the launcher at once (hydra/launcher=submitit_local runs a batch in parallel)")
    retry_failed: bool = opt(
        False,
        help="on resume, run the failed trials again too (after fixing what crashed them: a code or machine fault); "
        "pruned ones stay pruned",
    )
    heartbeat_s: int = opt(30, help="a running trial's worker proves it is alive this often; 3x silent = lost, run again on resume")
    pruner: dict[str, Any] = opt(
        factory=lambda: {"name": "none"},
        help="hydra.sweeper.pruner.name=collapse hydra.sweeper.pruner.threshold=0.1 ... (PrunerSettings: sweep/pruner_settings.py)",
    )

    def validate(self) -> None:
        if self.sampler not in SAMPLERS:
            raise UserError(f"unknown hydra.sweeper.sampler {self.sampler!r}; valid: {', '.join(SAMPLERS)}")
        if self.direction not in ("maximize", "minimize"):
            raise UserError(f"hydra.sweeper.direction={self.direction!r}; valid: maximize, minimize")
        if self.sampler != "grid" and not (isinstance(self.n_trials, int) and self.n_trials >= 1):
            raise UserError(f"hydra.sweeper.sampler={self.sampler} needs hydra.sweeper.n_trials=<N >= 1>")
        if self.batch_size < 1 or self.heartbeat_s < 1:
            raise UserError("hydra.sweeper.batch_size and hydra.sweeper.heartbeat_s must be >= 1")
        if self.summary_key not in SUMMARY_KEYS:
            raise UserError(f"hydra.sweeper.summary_key={self.summary_key!r}; valid: {', '.join(SUMMARY_KEYS)}")
        if self.storage:
            refuse_password(self.storage, "hydra.sweeper.storage")
        from agentcollapse.sweep.pruning import build_pruner

        build_pruner(self.pruner, self.direction)  # an unknown pruner or bad setting fails here

    def objective_name(self) -> str:
        """The trial's value as the progress lines name it: ``final val/success_rate_t1``."""
        return f"{self.summary_key} {self.objective}"
