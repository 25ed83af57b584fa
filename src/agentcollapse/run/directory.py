"""The run directory: claim it for a fresh run or find the checkpoint to resume, never overwrite one."""

from __future__ import annotations

import tempfile
from pathlib import Path

from agentcollapse.errors import UserError

__all__ = ["check_writable_dir", "checkpoint_iteration", "last_checkpoint", "prepare_run_dir"]


def last_checkpoint(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints" / "last.ckpt"


def check_writable_dir(path: Path, what: str, fix: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UserError(f"{what} {path} is not writable ({exc.strerror or type(exc).__name__}); {fix}") from None


def checkpoint_iteration(ckpt: Path) -> int:
    """The RL iteration a checkpoint was written after; a corrupt or foreign file is a UserError."""
    import torch

    try:
        state = torch.load(ckpt, map_location="cpu", weights_only=True)
        return int(state["agentcollapse"]["iteration"])
    except Exception as exc:
        raise UserError(f"checkpoint {ckpt} is corrupt or not ours ({type(exc).__name__}); delete it or start a fresh run_dir") from None


def prepare_run_dir(run_dir_text: str, resume: bool) -> tuple[Path, Path | None]:
    """The run directory and the checkpoint to resume from (None for a fresh run).

    Without ``resume`` a directory holding a record or a checkpoint is an error; with it, the
    checkpoint must exist and load.
    """
    run_dir = Path(run_dir_text).expanduser()
    last = last_checkpoint(run_dir)
    if resume:
        if not last.exists():
            raise UserError(
                f"resume=true but {last} does not exist; start a fresh run (resume=false) or point run_dir at a run with a checkpoint"
            )
        checkpoint_iteration(last)  # a corrupt checkpoint fails here, before anything is written
        check_writable_dir(run_dir, "run_dir", "choose another run_dir")
        return run_dir, last
    if any((run_dir / name).exists() for name in ("summary.json", "metrics.csv", "checkpoints/last.ckpt")):
        raise UserError(f"{run_dir} already holds a run; pass resume=true to continue it or choose another run_dir")
    check_writable_dir(run_dir, "run_dir", "choose another run_dir")
    return run_dir, None
