"""What a sweep says about itself: the trial counts, ``trials.csv``, and the start, progress and end lines.

:class:`StudyReport` reads an opened study and never changes it; :class:`~agentcollapse.sweep.study.SweepStudy`,
which sets the study up and runs its trials, holds one (``SweepStudy.report``) and is told nothing by it.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcollapse.records import (
    RUN_DIR,
    STATUS,
    STRAY,
    TRIAL_COLUMNS,
    atomic_write_text,
    trial_reason,
    trial_status,
    worker_vanished,
)
from agentcollapse.sweep.optuna_bridge import enqueued_params
from agentcollapse.sweep.outcome import Outcome
from agentcollapse.sweep.settings import SweepSettings
from agentcollapse.sweep.space import SearchSpace
from agentcollapse.sweep.storage import hide_password

__all__ = ["StudyReport", "format_duration"]


def _duration(trial: Any) -> float | None:
    """A trial's seconds from start to end; None while it runs, or when its worker vanished (Optuna dates that
    end to the resume that found it, so the downtime would count)."""
    if trial.datetime_complete and trial.datetime_start and not worker_vanished(trial):
        return (trial.datetime_complete - trial.datetime_start).total_seconds()
    return None


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


@dataclass
class StudyReport:
    """Counts, the table and the lines of one sweep's opened study: the study, the sweep's settings,
    directory and search space, the worker's name and storage URL (which may hold a password: only
    shown hidden), the grid's points, when the worker started, and whether it resumed the study
    (re-enqueuing ``requeued_now`` trials)."""

    study: Any = field(repr=False)
    settings: SweepSettings
    sweep_dir: Path
    space: SearchSpace
    worker: str
    storage_url: str = field(repr=False)
    grid: list[dict[str, str]]
    started: float
    resumed: bool = False
    requeued_now: int = 0

    def _trials(self) -> list[Any]:
        """Every trial of the sweep; not the strays of a grid (see ``SweepStudy.ask``), nor a trial
        another worker has asked for this instant and not yet marked as its own (a stray, or about to be one)."""
        from optuna.trial import TrialState

        return [
            t
            for t in self.study.get_trials(deepcopy=False)
            if not t.user_attrs.get(STRAY) and not (t.state == TrialState.RUNNING and STATUS not in t.user_attrs)
        ]

    def counts(self) -> dict[str, int]:
        out = {"finished": 0, "failed": 0, "pruned": 0, "interrupted": 0, "running": 0, "waiting": 0}
        for t in self._trials():
            out[trial_status(t)] += 1
        return out

    def total(self) -> int:
        return len(self.grid) if self.settings.sampler == "grid" else int(self.settings.n_trials or 0)

    def remaining(self) -> int:
        """Trials still to ask for."""
        c = self.counts()
        if self.settings.sampler == "grid":
            return c["waiting"]
        return max(0, self.total() - (c["finished"] + c["failed"] + c["pruned"] + c["running"] + c["waiting"]))

    def best(self) -> Any | None:
        from optuna.trial import TrialState

        done = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not done:
            return None
        pick = max if self.settings.direction == "maximize" else min
        return pick(done, key=lambda t: t.value)

    # -- trials.csv -----------------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for t in self._trials():
            row: dict[str, Any] = {"trial": t.number, "status": trial_status(t), "value": "" if t.value is None else repr(float(t.value))}
            fixed = enqueued_params(t)  # a waiting trial's values, before it runs
            for key in self.space.keys:
                row[key] = t.params.get(key, fixed.get(key, ""))
            duration = _duration(t)
            row.update(
                {
                    "final": t.user_attrs.get("final", ""),
                    "last_step": t.user_attrs.get("last_step", ""),
                    "pruned_at": t.user_attrs.get("pruned_at", ""),
                    "duration_s": "" if duration is None else round(duration, 1),
                    "retry_of": t.user_attrs.get("retry_of", ""),
                    "worker": t.user_attrs.get("worker", ""),
                    "run_dir": t.user_attrs.get(RUN_DIR, ""),
                    "reason": trial_reason(t),
                }
            )
            rows.append(row)
        return rows

    def write_csv(self) -> Path:
        """``trials.csv``: one row per trial (status, objective value, axis values, run dir, reason)."""
        before, after = TRIAL_COLUMNS
        columns = [*before, *self.space.keys, *after]
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for row in self.rows():
            writer.writerow(row)
        path = self.sweep_dir / "trials.csv"
        atomic_write_text(path, buf.getvalue())
        return path

    # -- lines ----------------------------------------------------------------------------------
    def start_line(self) -> str:
        c = self.counts()
        done = c["finished"] + c["failed"] + c["pruned"]
        where = "study.db" if self.storage_url.startswith("sqlite") else hide_password(self.storage_url)
        kind = f"grid of {len(self.grid)}" if self.settings.sampler == "grid" else f"{self.settings.sampler}, {self.total()} trials"
        again = self.requeued_now
        resumed = ""
        if self.resumed and not (done or again or c["interrupted"]):
            resumed = ", joined"  # another worker created the study a moment ago
        elif self.resumed:
            resumed = f", resumed: {done} done, {again} to run again"
            if c["running"]:  # another worker's, or one whose worker vanished less than 3 heartbeats ago
                resumed += f", {c['running']} running elsewhere"
        return (
            f"[sweep {self.worker}] {self.sweep_dir} ({where}): {kind}{resumed}; objective {self.settings.objective_name()} "
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
        durations = [d for t in self._trials() if trial_status(t) in ("finished", "pruned", "failed") and (d := _duration(t)) is not None]
        remaining = self.remaining() + c["running"]
        eta = ""
        if durations and remaining:
            workers = max(1, min(remaining, c["running"] + 1))  # the others, and this worker's next trial
            eta = f", ~{format_duration(sum(durations) / len(durations) * remaining / workers)} left"
        return f"[sweep {self.worker}] trial {trial.number} {what} | {counts} | {best_text} | {format_duration(elapsed)} elapsed{eta}"

    def end_line(self) -> str:
        c = self.counts()
        best = self.best()
        best_text = (
            f"best {self.settings.objective_name()} = {best.value:.3f}: trial {best.number} "
            f"({', '.join(f'{k}={v}' for k, v in best.params.items())})"
            if best is not None
            else "no trial finished"
        )
        return (
            f"[sweep {self.worker}] done: {c['finished']} finished, {c['failed']} failed, {c['pruned']} pruned, "
            f"{c['interrupted']} interrupted; {best_text}; table: {self.sweep_dir / 'trials.csv'}"
        )
