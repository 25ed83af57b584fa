"""Run records: the one place analysis reads from (wandb is for dashboards).

A run directory holds ``config.yaml`` (resolved), ``metrics.csv`` (one row per logged step, a ``step``
column, one column per metric) and ``summary.json`` (``status`` running/finished/failed/interrupted,
``reason``, ``final``, ``peak`` and ``peak_after_update`` metric dicts). ``peak`` is the best value over
every row, the step-0 evaluation of the warm-start policy included; ``peak_after_update`` leaves step 0
out, so it says what training reached (a run that only got worse has the warm start's value in ``peak``
but not here; sweeps rank trials by it). Every write goes to a temporary file that is then
renamed over the old one, so a crash never leaves a half-written record.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

STATUSES = ("running", "finished", "failed", "interrupted")

# A sweep's trial record: the user attributes a sweep sets on each Optuna trial. What the trial's run
# record said (its status and reason), where the run lives, and whether the trial is a grid's stray
# (asked for after the grid ran out, failed at once, never run and never counted). A trial that runs an
# interrupted one again names the sweep subdirectory whose checkpoint it continues (RESUMES).
STATUS, REASON, RUN_DIR, STRAY, RESUMES = "status", "reason", "run_dir", "stray", "resumes"
# A trial's status when its worker vanished: still "running" when Optuna failed it as stale, or "lost" (none recorded)
VANISHED_STATUSES = ("running", "lost")
RETRY_STATUSES = ("interrupted", *VANISHED_STATUSES)  # run again on resume
# A sweep's trials.csv: these columns, with one column per sweep axis between the two parts
TRIAL_COLUMNS = (("trial", "status", "value"), ("final", "last_step", "pruned_at", "duration_s", "retry_of", "worker", "run_dir", "reason"))
# Optuna's trial states (TrialState names, so this module needs no Optuna) as a sweep names them
_TRIAL_STATES = {"WAITING": "waiting", "RUNNING": "running", "PRUNED": "pruned", "COMPLETE": "finished"}


def runs_again(user_attrs: dict[str, Any], *, failed_too: bool = False) -> bool:
    """Whether a failed (``FAIL``) trial runs again on resume: it was interrupted, its worker vanished
    (``lost``, or still ``running`` when Optuna failed it as stale), or it has no status at all (its
    worker died before recording anything, so no run of it is known: lost as well). ``failed_too``
    (``hydra.sweeper.retry_failed``): a trial whose run failed as well."""
    return user_attrs.get(STATUS, "lost") in (*RETRY_STATUSES, *(("failed",) if failed_too else ()))


def worker_vanished(trial: Any) -> bool:
    """Whether a failed (``FAIL``) trial's worker vanished before its run recorded an end: still ``running``
    when Optuna failed it as stale, or no status at all. Optuna then dates its end to the resume that
    found it, so its duration is unknown (the downtime in between would count)."""
    return trial.state.name == "FAIL" and trial.user_attrs.get(STATUS, "lost") in VANISHED_STATUSES


def trial_reason(trial: Any) -> str:
    """Why a trial ended as it did: its run's reason, or, for a vanished worker (whose run wrote none), that."""
    reason = str(trial.user_attrs.get(REASON) or "")
    return reason or (
        "its worker vanished (killed, or its machine stopped) before the run recorded an end; it runs again on resume"
        if worker_vanished(trial)
        else ""
    )


def trial_status(trial: Any) -> str:
    """An Optuna trial of a sweep as ``trials.csv``, the progress lines and the analysis tables name it:
    waiting, running, finished, pruned, failed, or interrupted (stopped, or its worker vanished: it runs
    again on resume, :func:`runs_again`)."""
    named = _TRIAL_STATES.get(trial.state.name)
    if named is not None:
        return named
    return "interrupted" if runs_again(trial.user_attrs) else "failed"


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_summary(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The run's summary, or None when it is missing or not valid JSON (never a partial dict)."""
    try:
        data = json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("status") in STATUSES else None


class RunRecorder:
    """Collects metric rows and keeps ``metrics.csv`` and ``summary.json`` current on disk."""

    def __init__(self, run_dir: str | os.PathLike, rows: list[dict[str, float]] | None = None, writes: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.rows: list[dict[str, float]] = list(rows or [])
        self.started = time.time()
        self.writes = writes  # False on DDP ranks other than 0: one run, one record
        self.facts: dict[str, Any] = {}  # what the run is, known once it starts (the policy's weights): in every summary

    @classmethod
    def resume(cls, run_dir: str | os.PathLike, up_to_step: int) -> RunRecorder:
        """Reload rows logged before the checkpoint step; later ones are replayed by the resumed run."""
        path = Path(run_dir) / "metrics.csv"
        rows = []
        if path.exists():
            with path.open() as fh:
                for row in csv.DictReader(fh):
                    parsed = {k: float(v) for k, v in row.items() if v not in ("", None)}
                    if parsed.get("step", math.inf) <= up_to_step:
                        rows.append(parsed)
        return cls(run_dir, rows)

    def write_config(self, config_yaml: str) -> None:
        if not self.writes:
            return
        atomic_write_text(self.run_dir / "config.yaml", config_yaml)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self.rows and self.rows[-1].get("step") == step:
            self.rows[-1].update(metrics)
        else:
            self.rows.append({"step": float(step), **metrics})
        self._write_csv()

    def _write_csv(self) -> None:
        if not self.writes:
            return
        columns = ["step"] + sorted({k for row in self.rows for k in row} - {"step"})
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({k: (int(v) if k == "step" else repr(float(v))) for k, v in row.items()})
        atomic_write_text(self.run_dir / "metrics.csv", buf.getvalue())

    def final_and_peak(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        """The last value of every metric, its best value, and its best value after step 0 (the
        evaluation before any update)."""
        final: dict[str, float] = {}
        peak: dict[str, float] = {}
        after: dict[str, float] = {}
        for row in self.rows:
            for k, v in row.items():
                if k == "step" or v is None or (isinstance(v, float) and math.isnan(v)):
                    continue
                final[k] = v
                peak[k] = max(peak.get(k, -math.inf), v)
                if row.get("step", 0) >= 1:
                    after[k] = max(after.get(k, -math.inf), v)
        return final, peak, after

    def write_summary(self, status: str, reason: str = "", **extra: Any) -> None:
        assert status in STATUSES, status
        if not self.writes:
            return
        final, peak, after = self.final_and_peak()
        summary = {
            "status": status,
            "reason": reason,
            "steps_logged": len(self.rows),
            "last_step": int(self.rows[-1]["step"]) if self.rows else None,
            "wall_time_s": round(time.time() - self.started, 2),
            "final": final,
            "peak": peak,
            "peak_after_update": after,
            **self.facts,
            **extra,
        }
        atomic_write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2, sort_keys=True, default=str))
