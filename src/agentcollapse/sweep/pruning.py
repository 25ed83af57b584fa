"""Pruning sweep trials: a collapse-aware Optuna pruner, and the callback that reports from inside a trial.

``hydra.sweeper.pruner.name`` chooses (every setting and its default:
:class:`~agentcollapse.sweep.settings.PrunerSettings`):

* ``none`` (default): every trial runs to ``trainer.max_steps``;
* ``median`` (``n_startup_trials``, ``n_warmup_steps``): Optuna's median rule on the reported objective;
* ``collapse`` (``metric``, ``threshold``, ``patience``, ``min_step``, ``median``): a trial is
  pruned as soon as :class:`~agentcollapse.diagnostics.early_warning.CollapseRule` says it collapsed
  (its reasoning stopped depending on the input), and otherwise by the median rule (``median: false``
  leaves only the collapse rule).

The sweeper adds :class:`TrialReporter` to every trial's callbacks when a pruner is set. After each
iteration it reports the objective's value (``report_metric``, default the sweep's objective, on the
steps that log it) and the collapse metric's reading to the study, asks the pruner, and stops the run
when told to: the run is recorded as ``finished`` with the reason ``pruned by the sweep: ...`` and the
sweeper tells the study ``PRUNED``. The pruner rebuilds from the study's own record, so a trial in
another process (``hydra/launcher=submitit_local``) prunes as the sweeper would.
"""

from __future__ import annotations

import math
from dataclasses import fields
from functools import cache
from typing import Any

from agentcollapse.config import RunConfig
from agentcollapse.diagnostics.early_warning import CollapseRule
from agentcollapse.errors import UserError
from agentcollapse.sweep.optuna_bridge import attach_trial, quiet_optuna
from agentcollapse.sweep.pruner_settings import PrunerSettings
from agentcollapse.sweep.storage import open_storage

__all__ = ["KEYS", "PRUNERS", "CollapseAwarePruner", "build_pruner", "collapse_rule"]  # and TrialReporter (__getattr__)

PRUNERS = ("none", "median", "collapse")
COLLAPSE_HISTORY = "collapse_history"
KEYS = tuple(f.name for f in fields(PrunerSettings))
_DEFAULT = PrunerSettings()


def collapse_rule(spec: dict[str, Any]) -> CollapseRule:
    """The rule ``hydra.sweeper.pruner`` sets; what it leaves out keeps CollapseRule's defaults."""
    types = {"metric": str, "threshold": float, "patience": int, "min_step": int}
    try:
        return CollapseRule(**{key: cast(spec[key]) for key, cast in types.items() if spec.get(key) is not None})
    except (TypeError, ValueError) as exc:
        raise UserError(f"hydra.sweeper.pruner: {exc}") from None


def _import_optuna_base() -> type:
    from optuna.pruners import BasePruner

    return BasePruner


def build_pruner(spec: dict[str, Any] | None, direction: str = "maximize") -> Any:
    """The Optuna pruner for ``hydra.sweeper.pruner`` (a dict with ``name``)."""
    import optuna

    spec = dict(spec or {"name": _DEFAULT.name})
    name = spec.get("name", _DEFAULT.name)
    if name not in PRUNERS:
        raise UserError(f"unknown hydra.sweeper.pruner.name {name!r}; valid: {', '.join(PRUNERS)}")
    unknown = set(spec) - set(KEYS)
    if unknown:
        raise UserError(f"hydra.sweeper.pruner has no setting(s) {', '.join(sorted(unknown))}; valid: {', '.join(KEYS)}")
    if name == "none":
        return optuna.pruners.NopPruner()
    median = optuna.pruners.MedianPruner(
        n_startup_trials=int(spec.get("n_startup_trials", _DEFAULT.n_startup_trials)),
        n_warmup_steps=int(spec.get("n_warmup_steps", _DEFAULT.n_warmup_steps)),
    )
    if name == "median":
        return median
    return CollapseAwarePruner(collapse_rule(spec), median if spec.get("median", _DEFAULT.median) else None)


class CollapseAwarePruner(_import_optuna_base()):  # type: ignore[misc]
    """Prune a trial whose reasoning collapsed (the trial's ``collapse_history`` user attribute, written
    by :class:`TrialReporter`), otherwise ask ``wrapped`` (the median rule), if any."""

    def __init__(self, rule: CollapseRule, wrapped: Any = None) -> None:
        self.rule = rule
        self.wrapped = wrapped

    def prune(self, study: Any, trial: Any) -> bool:
        if self.rule.verdict(trial.user_attrs.get(COLLAPSE_HISTORY, [])):
            return True
        return bool(self.wrapped.prune(study, trial)) if self.wrapped is not None else False


def __getattr__(name: str) -> Any:
    # TrialReporter is built on first use: Lightning (~12 s of imports on a busy 2-core machine) is then
    # loaded only by the trials, never by the sweep's own process or its storage workers.
    if name == "TrialReporter":
        return _trial_reporter_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@cache
def _trial_reporter_class() -> type:
    import lightning as L

    class TrialReporter(L.Callback):
        """Inside a sweep trial: report to the study after each iteration and stop when pruned."""

        def __init__(self, storage: str, study_name: str, trial_number: int) -> None:
            self.storage_url = storage
            self.study_name = study_name
            self.trial_number = trial_number
            self.trial: Any = None
            self.spec: dict[str, Any] = {}
            self.report_metric = ""
            self.history: list[list[float]] = []

        @classmethod
        def from_run_config(cls, cfg: RunConfig) -> TrialReporter:
            if cfg.sweep.trial < 0 or not cfg.sweep.storage:
                raise UserError(
                    "callbacks.sweep_trial reports to a sweep's study: it needs sweep.storage and sweep.trial (the sweeper sets them)"
                )
            return cls(cfg.sweep.storage, cfg.sweep.study_name, cfg.sweep.trial)

        def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
            import optuna

            if not trainer.is_global_zero:
                return
            quiet_optuna()
            storage = open_storage(self.storage_url)  # sweep.storage has no password: the environment gives it back
            probe = optuna.load_study(study_name=self.study_name, storage=storage)
            self.spec = dict(probe.user_attrs.get("pruner", {"name": "none"}))
            settings = probe.user_attrs.get("settings", {})
            self.report_metric = str(self.spec.get("report_metric") or settings.get("objective", "val/success_rate"))
            direction = settings.get("direction", "maximize")
            study = optuna.load_study(study_name=self.study_name, storage=storage, pruner=build_pruner(self.spec, direction))
            self.trial = attach_trial(study, self.trial_number)

        def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if self.trial is None or self.spec.get("name", "none") == "none":
                return
            step = int(pl_module.iteration)
            metrics = pl_module.last_metrics
            value = metrics.get(self.report_metric)
            if value is not None and math.isfinite(float(value)):
                self.trial.report(float(value), step)
            if self.spec.get("name") == "collapse":
                reading = metrics.get(collapse_rule(self.spec).metric)
                if reading is not None and (not self.history or self.history[-1][0] != step):
                    self.history.append([step, float(reading)])
                    self.trial.set_user_attr(COLLAPSE_HISTORY, self.history)
            if self.trial.should_prune():
                why = collapse_rule(self.spec).verdict(self.history) if self.spec.get("name") == "collapse" else ""
                why = why or f"{self.report_metric} below the median of earlier trials at step {step}"
                self.trial.set_user_attr("pruned_at", step)
                self.trial.set_user_attr("pruned_because", why)
                pl_module.request_stop(f"pruned by the sweep at iteration {step}: {why}")

        def state_dict(self) -> dict[str, Any]:
            return {"history": self.history}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.history = [[int(s), float(v)] for s, v in state_dict.get("history", [])]

    TrialReporter.__qualname__ = "TrialReporter"  # Lightning keys its checkpointed state by this name
    return TrialReporter
