"""The run directory: claim it for a fresh run or find the checkpoint to resume, never overwrite one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from agentcollapse.errors import UserError, check_writable_dir

__all__ = ["checkpoint_iteration", "export_full_checkpoint", "last_checkpoint", "prepare_run_dir"]


def last_checkpoint(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints" / "last.ckpt"


def checkpoint_iteration(ckpt: Path) -> int:
    """The RL iteration a checkpoint was written after; a corrupt or foreign file is a UserError. A
    directory is FSDP's sharded checkpoint, whose non-tensor state is Lightning's ``meta.pt``."""
    import torch

    try:
        state = torch.load(ckpt / "meta.pt" if ckpt.is_dir() else ckpt, map_location="cpu", weights_only=True)
        return int(state["agentcollapse"]["iteration"])
    except Exception as exc:
        raise UserError(f"checkpoint {ckpt} is corrupt or not ours ({type(exc).__name__}); delete it or start a fresh run_dir") from None


def export_full_checkpoint(run_dir: str | Path) -> tuple[Path, int]:
    """Turn a run's sharded checkpoint (``trainer=fsdp``: ``last.ckpt`` a directory of shards) into one
    file in place, the form a one-process run saves: the same weights, optimizer state and RL state,
    so ``resume=true`` continues it in one process or with ``trainer=ddp``. The shards are deleted only
    once the file is in place. Returns the checkpoint's path and the iteration it was written after."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    last = last_checkpoint(run_dir)
    if not last.is_dir():
        raise UserError(f"{last} is not a sharded checkpoint (a directory written by trainer=fsdp); nothing to export")
    iteration = checkpoint_iteration(last)  # a foreign or broken directory fails here, in one line
    flat = last.parent / ".last.flat.tmp"
    dcp_to_torch_save(last, flat)
    state = torch.load(flat, map_location="cpu", weights_only=False)
    checkpoint = torch.load(last / "meta.pt", map_location="cpu", weights_only=False)
    checkpoint["state_dict"] = state.pop("state_dict")
    # The sharded optimizer state names parameters; a one-process optimizer numbers them in order.
    optimizers = sorted(k for k in state if k.startswith("optimizer_"))
    checkpoint["optimizer_states"] = [_numbered_optimizer_state(state[k]) for k in optimizers]
    tmp, old = last.parent / ".last.ckpt.tmp", last.parent / ".last.sharded.old"
    torch.save(checkpoint, tmp)
    flat.unlink()
    os.replace(last, old)
    os.replace(tmp, last)
    shutil.rmtree(old)
    return last, iteration


def _numbered_optimizer_state(named: dict) -> dict:
    order = [name for group in named["param_groups"] for name in group["params"]]
    index = {name: i for i, name in enumerate(order)}
    return {
        "state": {index[name]: value for name, value in named["state"].items()},
        "param_groups": [{**group, "params": [index[name] for name in group["params"]]} for group in named["param_groups"]],
    }


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
