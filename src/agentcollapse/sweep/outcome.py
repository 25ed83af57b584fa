"""What one trial's run record says (:class:`Outcome`). The trial's user attributes and what a trial of
the study is called (:func:`agentcollapse.records.trial_status`) are :mod:`agentcollapse.records`'.

A trial's value is its objective's ``final`` (the mean of its last three values after the first update:
the analysis tables' final success, computed by :func:`agentcollapse.analysis.runs.metric_summaries`),
or ``summary.json``'s ``peak_after_update`` / ``peak`` (``hydra.sweeper.summary_key``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcollapse.analysis.runs import metric_summaries
from agentcollapse.records import read_summary
from agentcollapse.sweep.settings import SweepSettings

__all__ = ["Outcome"]


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
        final = (metric_summaries(run_dir, settings.objective) or {}).get("final", math.nan)
        final = None if math.isnan(final) else final
        value = final if settings.summary_key == "final" else summary.get(settings.summary_key, {}).get(settings.objective)
        extra = {"wall_time_s": summary.get("wall_time_s"), "last_step": summary.get("last_step"), "final": final}
        if status == "finished" and (value is None or not math.isfinite(float(value))):
            return cls("failed", None, f"finished without {settings.objective_name()} (is the metric logged?)", str(run_dir), extra)
        return cls(status, None if value is None else float(value), reason, str(run_dir), extra)
