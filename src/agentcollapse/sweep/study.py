"""A sweep as an Optuna study: ``study.db`` holds every trial, ``trials.csv`` is its table for people.

One study per sweep directory. Its storage is ``sqlite:///<sweep dir>/study.db`` unless
``hydra.sweeper.storage`` or ``AGENTCOLLAPSE_STORAGE`` names another database (PostgreSQL for workers
on several machines; :mod:`.storage`). Any number of worker processes may serve one study; each asks for
a trial, runs it, and tells the outcome:

* ``sampler=grid``: every combination is enqueued once, when the study is created; workers pop them
  (a popped trial belongs to one worker, so none runs twice);
* ``sampler=tpe|random``: workers ask the sampler until ``n_trials`` trials are counted.

Every trial's outcome comes from its run record (``summary.json``, :mod:`.outcome`), so a crashed trial
is a ``FAIL`` with the run's own reason, a pruned one a ``PRUNED``. Resuming (the same sweep directory
again) skips every trial that finished, failed (``hydra.sweeper.retry_failed=true`` runs those again too) or was
pruned, and runs again the ones that were
interrupted (Ctrl+C, SIGTERM) or whose worker vanished (no heartbeat for ``3 * heartbeat_s``, or no
status recorded at all: :func:`agentcollapse.records.runs_again`). A trial run again continues from the
interrupted run's last checkpoint, in its directory, when it wrote one (an hour-long run interrupted at
the end of a session loses only the iterations since its last checkpoint); otherwise it starts afresh. The
table and the progress lines are the study's :class:`~.report.StudyReport` (``SweepStudy.report``, made
when the study opens); Optuna's internals are only touched in :mod:`.optuna_bridge`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agentcollapse.errors import UserError
from agentcollapse.records import REASON, RESUMES, RUN_DIR, STATUS, STRAY, runs_again
from agentcollapse.run.directory import last_checkpoint
from agentcollapse.sweep import optuna_bridge
from agentcollapse.sweep.outcome import Outcome
from agentcollapse.sweep.report import StudyReport
from agentcollapse.sweep.settings import SweepSettings
from agentcollapse.sweep.space import SearchSpace
from agentcollapse.sweep.storage import open_storage, sweep_storage

__all__ = ["SweepStudy"]

# settings a resumed sweep must keep: how it draws its trials and how it ranks them
KEPT_SETTINGS = ("sampler", "objective", "summary_key", "direction")


class SweepStudy:
    """One sweep directory's study: setup and resume, asking for trials, recording outcomes. What it
    says about itself (counts, ``trials.csv``, the lines) is its :attr:`report`, once opened."""

    report: StudyReport

    def __init__(self, settings: SweepSettings, sweep_dir: str | Path, space: SearchSpace, worker: str = "") -> None:
        settings.validate()
        self.settings = settings
        self.sweep_dir = Path(sweep_dir)
        self.space = space
        self.worker = worker or os.environ.get("AGENTCOLLAPSE_SWEEP_WORKER") or f"pid{os.getpid()}"
        self.storage_url = sweep_storage(settings.storage, self.sweep_dir)  # may hold a password: never written down
        self.started = time.time()
        self.study: Any = None
        self.resumed = False
        self.requeued_now = 0
        self.grid: list[dict[str, str]] = space.grid() if settings.sampler == "grid" else []

    # -- setup ----------------------------------------------------------------------------------
    def open(self) -> SweepStudy:
        """Create the study, or load it and prepare a resume. Workers take turns (a lock file)."""
        import optuna

        optuna_bridge.quiet_optuna()
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        with self._lock():
            sampler = self._sampler()
            storage = open_storage(self.storage_url, self.settings.heartbeat_s)
            try:
                study = optuna.load_study(study_name=self.settings.study_name, storage=storage, sampler=sampler)
                self.resumed = True
                self._wait_prepared(study)
            except KeyError:
                try:
                    study = optuna.create_study(
                        study_name=self.settings.study_name, storage=storage, sampler=sampler, direction=self.settings.direction
                    )
                except optuna.exceptions.DuplicatedStudyError:  # a worker elsewhere (shared storage) was first
                    study = optuna.load_study(study_name=self.settings.study_name, storage=storage, sampler=sampler)
                    self._wait_prepared(study)
            self.study = study
            if "space" not in study.user_attrs:
                self._prepare()
            else:
                self._check_same_sweep()
                self._requeue_lost_and_interrupted()
        self.report = StudyReport(
            study,
            self.settings,
            self.sweep_dir,
            self.space,
            self.worker,
            self.storage_url,
            self.grid,
            self.started,
            self.resumed,
            self.requeued_now,
        )
        return self

    @staticmethod
    def _wait_prepared(study: Any, timeout_s: float = 120.0) -> None:
        """A study another worker has just created: wait until it has enqueued the grid."""
        deadline = time.time() + timeout_s
        while "space" not in study.user_attrs and time.time() < deadline:
            time.sleep(0.5)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        with open(self.sweep_dir / ".study.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _sampler(self) -> Any:
        import optuna

        seed = self.settings.seed + os.getpid() % 100_000 * 7919  # workers must not draw the same points
        if self.settings.sampler == "tpe":
            return optuna.samplers.TPESampler(seed=seed, constant_liar=True)
        return optuna.samplers.RandomSampler(seed=seed)

    def _space_record(self) -> dict[str, Any]:
        return {a.key: list(a.choices) if a.discrete else [a.low, a.high, a.log, a.integer] for a in self.space.axes}

    def _prepare(self) -> None:
        study = self.study
        for params in self.grid:
            study.enqueue_trial(params, user_attrs={"grid": True})
        study.set_user_attr("pruner", self.settings.pruner)
        study.set_user_attr("settings", {k: v for k, v in asdict(self.settings).items() if k != "storage"})
        study.set_user_attr("fixed", list(self.space.fixed))
        study.set_user_attr("requeued", [])
        study.set_user_attr("space", self._space_record())  # last: marks the study as prepared

    def _check_same_sweep(self) -> None:
        stored = self.study.user_attrs["space"]
        if stored != self._space_record():
            raise UserError(
                f"{self.sweep_dir} holds a sweep over {json.dumps(stored)}, not {json.dumps(self._space_record())}; "
                "resume it with the same sweep file and axes, or start a new sweep directory"
            )

        def comparable(fixed: list[str]) -> list[str]:  # the thread split follows JOBS, not the sweep
            return [o for o in fixed if not o.startswith(("trainer.num_threads=", "hydra."))]

        before, now = comparable(self.study.user_attrs.get("fixed", [])), comparable(list(self.space.fixed))
        if before != now:
            raise UserError(
                f"{self.sweep_dir} was run with other overrides ({' '.join(before) or 'none'}; now {' '.join(now) or 'none'}); "
                "resume it with the same ones, or start a new sweep directory"
            )
        was = self.study.user_attrs.get("settings", {})
        for key in KEPT_SETTINGS:
            if key in was and was[key] != getattr(self.settings, key):
                raise UserError(
                    f"{self.sweep_dir} is a sweep with hydra.sweeper.{key}={was[key]} (not {getattr(self.settings, key)}); "
                    f"resume it with hydra.sweeper.{key}={was[key]}, or start a new sweep directory"
                )

    def _requeue_lost_and_interrupted(self) -> None:
        import optuna
        from optuna.trial import TrialState

        optuna.storages.fail_stale_trials(self.study)  # RUNNING without a heartbeat: its worker is gone
        requeued = set(self.study.user_attrs.get("requeued", []))
        again = []
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
            if t.number in requeued or t.user_attrs.get(STRAY):
                continue
            if runs_again(t.user_attrs, failed_too=self.settings.retry_failed):
                again.append(t)
        for t in again:
            attrs = {"grid": bool(t.user_attrs.get("grid")), "retry_of": t.number}
            # its run directory, named as a subdirectory of this sweep directory (which may have moved)
            subdir = Path(str(t.user_attrs.get(RUN_DIR) or self.trial_dir(t.number))).name
            if last_checkpoint(self.sweep_dir / subdir).exists():
                attrs[RESUMES] = subdir
            self.study.enqueue_trial({k: t.params[k] for k in self.space.keys if k in t.params}, user_attrs=attrs)
            requeued.add(t.number)
        self.study.set_user_attr("requeued", sorted(requeued))
        self.requeued_now = len(again)

    # -- the trial loop -------------------------------------------------------------------------
    def ask(self) -> tuple[Any, dict[str, str]] | None:
        """The next trial and its axis values, or None when the sweep has nothing left to run.

        Workers on one sweep directory take turns (the lock file): SQLite does not lock the row Optuna
        reads before it marks a waiting trial as running, so two workers could otherwise pop the same
        one. (PostgreSQL locks the row; workers on other machines rely on that.)"""
        with self._lock():
            return self._ask()

    def _ask(self) -> tuple[Any, dict[str, str]] | None:
        from optuna.trial import TrialState

        if self.settings.sampler == "grid" and not self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return None
        if self.settings.sampler != "grid" and self.report.remaining() <= 0:
            return None
        trial = self.study.ask()
        if self.settings.sampler == "grid" and not trial.user_attrs.get("grid"):
            # a worker on another machine (shared storage) took the last point between our check and our ask
            trial.set_user_attr(STRAY, True)
            self.study.tell(trial, state=TrialState.FAIL)
            return None
        optuna_bridge.record_heartbeat(self.study, trial)  # from now on, a vanished worker's trial goes stale
        params = {axis.key: axis.suggest(trial) for axis in self.space.axes}
        trial.set_user_attr(STATUS, "running")
        trial.set_user_attr("worker", self.worker)
        trial.set_user_attr(RUN_DIR, str(self.run_dir(trial)))
        return trial, params

    def ask_batch(self, n: int) -> list[tuple[Any, dict[str, str]]]:
        out = []
        while len(out) < n:
            got = self.ask()
            if got is None:
                break
            out.append(got)
        return out

    def trial_dir(self, number: int) -> Path:
        return self.sweep_dir / str(number)

    def run_subdir(self, trial: Any) -> str:
        """The subdirectory a trial runs in: its number, or the interrupted run it continues."""
        return str(trial.user_attrs.get(RESUMES) or trial.number)

    def run_dir(self, trial: Any) -> Path:
        return self.sweep_dir / self.run_subdir(trial)

    def pruned(self, number: int) -> bool:
        """Whether the trial's own process was told to stop by the pruner (``TrialReporter``)."""
        return any(t.number == number and t.user_attrs.get("pruned_at") is not None for t in self.study.get_trials(deepcopy=False))

    def tell(self, trial: Any, outcome: Outcome) -> None:
        from optuna.trial import TrialState

        trial.set_user_attr(STATUS, outcome.status)
        trial.set_user_attr(REASON, outcome.reason[:500])
        if outcome.run_dir:
            trial.set_user_attr(RUN_DIR, outcome.run_dir)
        for k, v in outcome.extra.items():
            if v is not None:
                trial.set_user_attr(k, v)
        if outcome.status == "finished":
            self.study.tell(trial, outcome.value)
        elif outcome.status == "pruned":
            self.study.tell(trial, state=TrialState.PRUNED)
        else:
            self.study.tell(trial, state=TrialState.FAIL)

    def heartbeat(self, trials: list[Any]) -> contextlib.AbstractContextManager[None]:
        """Record a heartbeat for ``trials`` every ``heartbeat_s`` while they run (a vanished worker's
        trials are then found stale and run again on resume)."""
        return optuna_bridge.heartbeat(self.study, trials, self.settings.heartbeat_s)
