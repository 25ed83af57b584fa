"""Infrastructure callbacks of every run: the record, checkpoints and progress, in step with its RL
iterations. (What watches and what intervenes is composed from ``callbacks=<preset>``.)"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import lightning as L
from agentcollapse.lightning import distributed
from agentcollapse.progress import Progress, is_terminal
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


class StopTogether(L.Callback):
    """Several ranks: SIGTERM or SIGINT no longer stops a rank where it is (the others would wait in their
    next collective forever) but sets ``pending_signal``, which the ranks agree on at the end of the
    iteration (``AgentRLModule.training_step``); every rank then stops there and the run is recorded as
    interrupted. It replaces Lightning's handler too, which broadcasts from inside the signal handler.
    One process keeps the immediate stop."""

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if distributed.world()[1] == 1 or threading.current_thread() is not threading.main_thread():
            return

        def note(signum: int, frame: Any) -> None:
            pl_module.pending_signal = signum

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, note)  # Lightning restores the handlers it found when fit ends


class IterationCheckpoint(L.Callback):
    """Save ``last.ckpt`` every N RL iterations (not optimizer steps: an update may be skipped).

    Written to a temporary name and renamed, so a kill mid-write leaves the previous checkpoint intact.
    Under FSDP it is a directory of shards (one per rank, written by every rank) plus Lightning's
    ``meta.pt``; the old directory is moved aside before the new one takes its name, then deleted.
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
        tmp, old = self.dirpath / ".last.ckpt.tmp", self.dirpath / ".last.ckpt.old"
        if trainer.is_global_zero and tmp.is_dir():  # a sharded write a kill interrupted
            shutil.rmtree(tmp)
        trainer.save_checkpoint(tmp)  # every rank takes part (its first step waits for rank 0)
        if not trainer.is_global_zero:
            return
        if tmp.is_dir() and self.last.is_dir():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(self.last, old)
        os.replace(tmp, self.last)
        shutil.rmtree(old, ignore_errors=True)


class LineProgress(L.Callback):
    """Training progress as plain lines (a line every few percent) when output is not a terminal; a
    terminal gets Lightning's live bar instead (``trainer.progress_bar``)."""

    def __init__(self, total_steps: int) -> None:
        self.total_steps = total_steps
        self.progress: Progress | None = None

    @staticmethod
    def is_terminal() -> bool:
        return is_terminal()

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.is_global_zero:
            self.progress = Progress(self.total_steps, "train", live=False)
            self.progress.done = pl_module.iteration  # a resumed run continues its count

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.progress is None or pl_module.iteration <= self.progress.done:
            return
        success = pl_module.last_metrics.get("rollout/success_rate")
        self.progress.update(pl_module.iteration - self.progress.done, **({"success": success} if success is not None else {}))
