"""A sweep as an Optuna study: ``study.db`` holds every trial, ``trials.csv`` is its table for people.

One study per sweep directory. Its storage is ``sqlite:///<sweep dir>/study.db`` unless
``hydra.sweeper.storage`` names another database (PostgreSQL for workers on several machines). Any
number of worker processes may serve one study; each asks for a trial, runs it, and tells the outcome:

* ``sampler=grid``: every combination is enqueued once, when the study is created; workers pop them
  (a popped trial belongs to one worker, so none runs twice);
* ``sampler=tpe|random``: workers ask the sampler until ``n_trials`` trials are counted.

Every trial's outcome comes from its run record (``summary.json``), so a crashed trial is a ``FAIL``
with the run's own reason, a pruned one a ``PRUNED``. Resuming (the same sweep directory again)
skips every trial that finished, failed or was pruned, and runs again the ones that were
interrupted (Ctrl+C, SIGTERM) or whose worker vanished (no heartbeat for ``3 * heartbeat_s``).
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import math
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentcollapse.errors import UserError
from agentcollapse.records import atomic_write_text, read_summary
from agentcollapse.sweep.space import SearchSpace

__all__ = ["SAMPLERS", "Outcome", "SweepSettings", "SweepStudy", "format_duration", "quiet_optuna"]

SAMPLERS = ("grid", "tpe", "random")
# trial user attrs: what the run record said, and where it lives
STATUS, REASON, RUN_DIR = "status", "reason", "run_dir"
RETRY_STATUSES = ("interrupted", "lost")  # run again on resume


@dataclass
class SweepSettings:
    """What ``hydra.sweeper`` configures (``hydra_plugins.agentcollapse_sweeper`` documents each field)."""

    sampler: str = "grid"
    n_trials: int | None = None
    storage: str | None = None
    study_name: str = "sweep"
    direction: str = "maximize"
    objective: str = "val/success_rate"
    summary_key: str = "peak_after_update"
    seed: int = 0
    batch_size: int = 1
    heartbeat_s: int = 30
    pruner: dict[str, Any] = field(default_factory=lambda: {"name": "none"})

    def validate(self) -> None:
        if self.sampler not in SAMPLERS:
            raise UserError(f"unknown hydra.sweeper.sampler {self.sampler!r}; valid: {', '.join(SAMPLERS)}")
        if self.direction not in ("maximize", "minimize"):
            raise UserError(f"hydra.sweeper.direction={self.direction!r}; valid: maximize, minimize")
        if self.sampler != "grid" and not (isinstance(self.n_trials, int) and self.n_trials >= 1):
            raise UserError(f"hydra.sweeper.sampler={self.sampler} needs hydra.sweeper.n_trials=<N >= 1>")
        if self.batch_size < 1 or self.heartbeat_s < 1:
            raise UserError("hydra.sweeper.batch_size and hydra.sweeper.heartbeat_s must be >= 1")
        if self.summary_key not in ("peak_after_update", "peak", "final"):
            raise UserError(f"hydra.sweeper.summary_key={self.summary_key!r}; valid: peak_after_update, peak, final")
        from agentcollapse.sweep.pruning import build_pruner

        build_pruner(self.pruner, self.direction)  # an unknown pruner or bad setting fails here


@dataclass
class Outcome:
    """What one trial's run record says."""

    status: str  # finished | failed | interrupted | pruned | lost
    value: float | None
    reason: str = ""
    run_dir: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_run(cls, run_dir: str | Path, settings: SweepSettings, error: str = "") -> Outcome:
        """The outcome of a trial whose run (if it got that far) wrote its record to ``run_dir``.

        ``error`` is what the task or the launcher reported (a config error leaves no record)."""
        summary = read_summary(run_dir) or {}
        status = summary.get("status")
        reason = summary.get("reason", "") or error
        if status is None:
            return cls("failed", None, error or "no run record (summary.json) was written", str(run_dir))
        if status == "running":  # the process died under the run (killed, out of memory, a segfault)
            return cls("failed", None, f"crashed: the run stopped without recording why{f' ({error})' if error else ''}", str(run_dir))
        value = summary.get(settings.summary_key, {}).get(settings.objective)
        extra = {
            "wall_time_s": summary.get("wall_time_s"),
            "last_step": summary.get("last_step"),
            "final": summary.get("final", {}).get(settings.objective),
        }
        if status == "finished" and (value is None or not math.isfinite(float(value))):
            return cls(
                "failed", None, f"finished without {settings.summary_key}.{settings.objective} (is the metric logged?)", str(run_dir), extra
            )
        return cls(status, None if value is None else float(value), reason, str(run_dir), extra)


def quiet_optuna() -> None:
    """Heartbeats are experimental in Optuna and "supposed to be used with Study.optimize"; we record
    them ourselves around ask/tell, on purpose."""
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class SweepStudy:
    """One sweep directory's study: setup and resume, asking for trials, recording outcomes."""

    def __init__(self, settings: SweepSettings, sweep_dir: str | Path, space: SearchSpace, worker: str = "") -> None:
        settings.validate()
        self.settings = settings
        self.sweep_dir = Path(sweep_dir)
        self.space = space
        self.worker = worker or os.environ.get("AGENTCOLLAPSE_SWEEP_WORKER") or f"pid{os.getpid()}"
        self.storage_url = settings.storage or f"sqlite:///{(self.sweep_dir / 'study.db').resolve()}"
        self.started = time.time()
        self.study: Any = None
        self.resumed = False
        self.grid: list[dict[str, str]] = space.grid() if settings.sampler == "grid" else []

    # -- setup ----------------------------------------------------------------------------------
    def storage(self) -> Any:
        import optuna

        kwargs: dict[str, Any] = {}
        if self.storage_url.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": 60}  # workers wait for each other's writes
        return optuna.storages.RDBStorage(
            self.storage_url,
            engine_kwargs=kwargs,
            heartbeat_interval=self.settings.heartbeat_s,
            grace_period=3 * self.settings.heartbeat_s,
        )

    def open(self) -> SweepStudy:
        """Create the study, or load it and prepare a resume. Workers take turns (a lock file)."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        quiet_optuna()
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        with self._lock():
            sampler = self._sampler()
            storage = self.storage()
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
        was = self.study.user_attrs.get("settings", {}).get("sampler")
        if was and was != self.settings.sampler:
            raise UserError(f"{self.sweep_dir} was a sampler={was} sweep; resume it with the same sampler")

    def _requeue_lost_and_interrupted(self) -> None:
        import optuna
        from optuna.trial import TrialState

        optuna.storages.fail_stale_trials(self.study)  # RUNNING without a heartbeat: its worker is gone
        requeued = set(self.study.user_attrs.get("requeued", []))
        again = []
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
            if t.number in requeued or t.user_attrs.get("stray"):
                continue
            if t.user_attrs.get(STATUS) in (*RETRY_STATUSES, "running"):
                again.append(t)
        for t in again:
            self.study.enqueue_trial(
                {k: t.params[k] for k in self.space.keys if k in t.params},
                user_attrs={"grid": bool(t.user_attrs.get("grid")), "retry_of": t.number},
            )
            requeued.add(t.number)
        self.study.set_user_attr("requeued", sorted(requeued))
        self.requeued_now = len(again)

    # -- the trial loop -------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        out = {"finished": 0, "failed": 0, "pruned": 0, "interrupted": 0, "running": 0, "waiting": 0}
        for t in self._trials():
            out[self._status(t)] = out.get(self._status(t), 0) + 1
        return out

    def _trials(self) -> list[Any]:
        """Every trial of the sweep; not the strays of a grid (see :meth:`ask`), nor a trial another
        worker has asked for this instant and not yet marked as its own (a stray, or about to be one)."""
        from optuna.trial import TrialState

        return [
            t
            for t in self.study.get_trials(deepcopy=False)
            if not t.user_attrs.get("stray") and not (t.state == TrialState.RUNNING and STATUS not in t.user_attrs)
        ]

    @staticmethod
    def _status(t: Any) -> str:
        from optuna.trial import TrialState

        if t.state == TrialState.WAITING:
            return "waiting"
        if t.state == TrialState.RUNNING:
            return "running"
        if t.state == TrialState.PRUNED:
            return "pruned"
        if t.state == TrialState.COMPLETE:
            return "finished"
        status = t.user_attrs.get(STATUS, "lost")
        return "interrupted" if status in (*RETRY_STATUSES, "running") else "failed"

    def total(self) -> int:
        return len(self.grid) if self.settings.sampler == "grid" else int(self.settings.n_trials or 0)

    def _remaining(self) -> int:
        c = self.counts()
        if self.settings.sampler == "grid":
            return c["waiting"]
        return max(0, self.total() - (c["finished"] + c["failed"] + c["pruned"] + c["running"] + c["waiting"]))

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
        if self.settings.sampler != "grid" and self._remaining() <= 0:
            return None
        trial = self.study.ask()
        if self.settings.sampler == "grid" and not trial.user_attrs.get("grid"):
            # a worker on another machine (shared storage) took the last point between our check and our ask
            trial.set_user_attr("stray", True)
            self.study.tell(trial, state=TrialState.FAIL)
            return None
        with contextlib.suppress(Exception):  # from now on, a vanished worker's trial goes stale
            self.study._storage.record_heartbeat(trial._trial_id)
        params = {axis.key: axis.suggest(trial) for axis in self.space.axes}
        trial.set_user_attr(STATUS, "running")
        trial.set_user_attr("worker", self.worker)
        trial.set_user_attr(RUN_DIR, str(self.trial_dir(trial.number)))
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

    @contextlib.contextmanager
    def heartbeat(self, trials: list[Any]) -> Iterator[None]:
        """Record a heartbeat for ``trials`` every ``heartbeat_s`` while they run (a vanished worker's
        trials are then found stale and run again on resume)."""
        storage = self.study._storage  # optuna keeps the storage private; its heartbeat API is public
        ids = [t._trial_id for t in trials]
        stop = threading.Event()

        def beat() -> None:
            while True:
                for trial_id in ids:
                    with contextlib.suppress(Exception):
                        storage.record_heartbeat(trial_id)
                if stop.wait(self.settings.heartbeat_s):
                    return

        thread = threading.Thread(target=beat, name="sweep-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)

    # -- reporting ------------------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for t in self._trials():
            row: dict[str, Any] = {
                "trial": t.number,
                "status": self._status(t),
                "value": "" if t.value is None else repr(float(t.value)),
            }
            fixed = t.system_attrs.get("fixed_params", {})  # an enqueued trial's values, before it runs
            for key in self.space.keys:
                row[key] = t.params.get(key, fixed.get(key, ""))
            duration = (t.datetime_complete - t.datetime_start).total_seconds() if t.datetime_complete and t.datetime_start else None
            row.update(
                {
                    "final": t.user_attrs.get("final", ""),
                    "last_step": t.user_attrs.get("last_step", ""),
                    "pruned_at": t.user_attrs.get("pruned_at", ""),
                    "duration_s": "" if duration is None else round(duration, 1),
                    "retry_of": t.user_attrs.get("retry_of", ""),
                    "worker": t.user_attrs.get("worker", ""),
                    "run_dir": t.user_attrs.get(RUN_DIR, ""),
                    "reason": t.user_attrs.get(REASON, ""),
                }
            )
            rows.append(row)
        return rows

    def write_csv(self) -> Path:
        """``trials.csv``: one row per trial (status, objective value, axis values, run dir, reason)."""
        columns = ["trial", "status", "value", *self.space.keys, "final", "last_step", "pruned_at", "duration_s"]
        columns += ["retry_of", "worker", "run_dir", "reason"]
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for row in self.rows():
            writer.writerow(row)
        path = self.sweep_dir / "trials.csv"
        atomic_write_text(path, buf.getvalue())
        return path

    def best(self) -> Any | None:
        from optuna.trial import TrialState

        done = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not done:
            return None
        pick = max if self.settings.direction == "maximize" else min
        return pick(done, key=lambda t: t.value)

    def _objective_name(self) -> str:
        return f"{self.settings.summary_key}.{self.settings.objective}"

    def start_line(self) -> str:
        c = self.counts()
        done = c["finished"] + c["failed"] + c["pruned"]
        where = "study.db" if self.settings.storage is None else "shared storage"
        kind = f"grid of {len(self.grid)}" if self.settings.sampler == "grid" else f"{self.settings.sampler}, {self.total()} trials"
        again = getattr(self, "requeued_now", 0)
        resumed = ""
        if self.resumed and not (done or again or c["interrupted"]):
            resumed = ", joined"  # another worker created the study a moment ago
        elif self.resumed:
            resumed = f", resumed: {done} done, {again} to run again"
            if c["running"]:  # another worker's, or one whose worker vanished less than 3 heartbeats ago
                resumed += f", {c['running']} running elsewhere"
        return (
            f"[sweep {self.worker}] {self.sweep_dir} ({where}): {kind}{resumed}; objective {self._objective_name()} "
            f"({self.settings.direction})"
        )

    def progress_line(self, trial: Any, outcome: Outcome) -> str:
        c = self.counts()
        done = c["finished"] + c["failed"] + c["pruned"]
        what = f"{outcome.status}" + (f" {outcome.value:.3f}" if outcome.value is not None else "")
        axes = " ".join(f"{k}={v}" for k, v in trial.params.items())
        what += f" [{axes}]" if axes else ""
        if outcome.status in ("failed", "interrupted") and outcome.reason:
            what += f" ({' '.join(outcome.reason.split())[:120]})"
        counts = (
            f"{done}/{self.total()} done ({c['finished']} finished, {c['failed']} failed, {c['pruned']} pruned), {c['running']} running"
        )
        best = self.best()
        best_text = f"best {best.value:.3f} (trial {best.number})" if best is not None else "no best yet"
        elapsed = time.time() - self.started
        durations = [
            (t.datetime_complete - t.datetime_start).total_seconds()
            for t in self._trials()
            if t.datetime_complete and t.datetime_start and self._status(t) in ("finished", "pruned", "failed")
        ]
        remaining = self._remaining() + c["running"]
        eta = ""
        if durations and remaining:
            workers = max(1, min(remaining, c["running"] + 1))  # the others, and this worker's next trial
            eta = f", ~{format_duration(sum(durations) / len(durations) * remaining / workers)} left"
        return f"[sweep {self.worker}] trial {trial.number} {what} | {counts} | {best_text} | {format_duration(elapsed)} elapsed{eta}"

    def end_line(self) -> str:
        c = self.counts()
        best = self.best()
        best_text = (
            f"best {self._objective_name()} = {best.value:.3f}: trial {best.number} ({', '.join(f'{k}={v}' for k, v in best.params.items())})"
            if best is not None
            else "no trial finished"
        )
        return (
            f"[sweep {self.worker}] done: {c['finished']} finished, {c['failed']} failed, {c['pruned']} pruned, "
            f"{c['interrupted']} interrupted; {best_text}; table: {self.sweep_dir / 'trials.csv'}"
        )
