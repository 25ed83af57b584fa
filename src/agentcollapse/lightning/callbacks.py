"""Callbacks that keep a run's record and checkpoints in step with its RL iterations."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning as L

from agentcollapse.records import RunRecorder


class RunRecordCallback(L.Callback):
    """Hands the recorder to the module and keeps ``summary.json`` truthful at every stage."""

    def __init__(self, recorder: RunRecorder) -> None:
        self.recorder = recorder

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        pl_module.recorder = self.recorder

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            self.recorder.write_summary("running")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.is_global_zero:
            self.recorder.write_summary("running", iteration=pl_module.iteration)


class IterationCheckpoint(L.Callback):
    """Save ``last.ckpt`` every N RL iterations (not optimizer steps: an update may be skipped).

    Written to a temporary name and renamed, so a kill mid-write leaves the previous checkpoint intact.
    """

    def __init__(self, dirpath: str | os.PathLike, every: int) -> None:
        self.dirpath = Path(dirpath)
        self.every = every

    @property
    def last(self) -> Path:
        return self.dirpath / "last.ckpt"

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.every > 0 and pl_module.iteration > 0 and pl_module.iteration % self.every == 0:
            self.save(trainer)

    def save(self, trainer: L.Trainer) -> None:
        tmp = self.dirpath / ".last.ckpt.tmp"
        trainer.save_checkpoint(tmp)
        if trainer.is_global_zero:
            os.replace(tmp, self.last)
