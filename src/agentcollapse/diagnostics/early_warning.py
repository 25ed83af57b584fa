"""When the MI proxy says a run has collapsed: one rule shared by the ``CollapseEarlyStopping`` callback
(a run stops itself) and the sweep's collapse-aware pruner (a sweep drops the trial).

Template collapse is reasoning that no longer depends on the input while its entropy stays high
(docs/method.md section 2), so the rule reads an input-dependence metric of the proxy family, by default
``collapse_first_turn_sample/retrieval_above_chance`` (0 = traces are matched to their own prompt no
better than chance): the run has collapsed when its last ``patience`` readings at or after
``min_step`` are all below ``threshold``. Its defaults are ``diagnostics.early_stop_*`` (one source:
:class:`agentcollapse.config.DiagnosticsConfig`). The proxy is computed at step 1 and every
``diagnostics.compute_freq`` steps, so ``patience`` counts proxy steps, not iterations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from agentcollapse.config import DiagnosticsConfig

__all__ = ["CollapseRule"]

_DEFAULTS = DiagnosticsConfig()


@dataclass(frozen=True)
class CollapseRule:
    metric: str = _DEFAULTS.early_stop_metric
    threshold: float = _DEFAULTS.early_stop_threshold
    patience: int = _DEFAULTS.early_stop_patience
    min_step: int = _DEFAULTS.early_stop_min_step

    @classmethod
    def from_config(cls, diagnostics: DiagnosticsConfig) -> CollapseRule:
        """The rule a run's ``diagnostics.early_stop_*`` settings describe."""
        d = diagnostics
        return cls(d.early_stop_metric, d.early_stop_threshold, d.early_stop_patience, d.early_stop_min_step)

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ValueError("patience must be >= 1")
        if not math.isfinite(self.threshold):
            raise ValueError("threshold must be finite")

    def readings(self, history: Sequence[Sequence[float]]) -> list[tuple[int, float]]:
        """The (step, value) readings the rule looks at: finite, at or after ``min_step``."""
        out = []
        for step, value in history:
            if int(step) >= self.min_step and value is not None and math.isfinite(float(value)):
                out.append((int(step), float(value)))
        return out

    def verdict(self, history: Sequence[Sequence[float]]) -> str:
        """A one-line reason when the run has collapsed, else ``""``."""
        readings = self.readings(history)
        if len(readings) < self.patience:
            return ""
        last = readings[-self.patience :]
        if all(v < self.threshold for _, v in last):
            values = ", ".join(f"{v:.3f}@{s}" for s, v in last)
            return f"collapse: {self.metric} below {self.threshold:g} for {self.patience} proxy step(s) ({values})"
        return ""
