"""``CollapseEarlyStopping``: stop a run once the MI proxy says its reasoning no longer depends on the
input (``callbacks=with_early_stopping`` or ``+callbacks.collapse_early_stopping=...``; settings:
``diagnostics.early_stop_*``; the rule: :class:`agentcollapse.diagnostics.early_warning.CollapseRule`).

It watches, after each iteration, the metrics the iteration logged (``CollapseDiagnostics`` must be in
the run's callbacks, or the metric never appears and the run goes on). The run ends as ``finished``
with the reason ``collapse: ...`` in ``summary.json``. Its readings go into the checkpoint, so a
resumed run decides as the uninterrupted one would.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from agentcollapse.config import RunConfig
from agentcollapse.diagnostics.early_warning import CollapseRule

__all__ = ["CollapseEarlyStopping"]


class CollapseEarlyStopping(L.Callback):
    def __init__(self, rule: CollapseRule | None = None) -> None:
        self.rule = rule or CollapseRule()
        self.history: list[list[float]] = []
        self.stopped_at: int | None = None

    @classmethod
    def from_run_config(cls, cfg: RunConfig) -> CollapseEarlyStopping:
        return cls(CollapseRule.from_config(cfg.diagnostics))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        value = pl_module.last_metrics.get(self.rule.metric)
        step = int(pl_module.iteration)
        if value is None or (self.history and self.history[-1][0] == step):
            return
        self.history.append([step, float(value)])
        reason = self.rule.verdict(self.history)
        if reason and self.stopped_at is None:
            self.stopped_at = step
            pl_module.request_stop(f"{reason}; stopped early at iteration {step} (CollapseEarlyStopping)")

    def state_dict(self) -> dict[str, Any]:
        return {"history": [list(map(float, h)) for h in self.history]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = [[int(s), float(v)] for s, v in state_dict.get("history", [])]
