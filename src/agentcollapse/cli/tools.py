"""Small commands around training: rebuild the base model, the pre-training Std(RV)/Mean(RV) check, and
the export of a sharded checkpoint. The work is in ``agentcollapse.run``; this module prints it."""

from __future__ import annotations

import json

from agentcollapse.errors import UserError
from agentcollapse.run.directory import export_full_checkpoint
from agentcollapse.run.jobs import rebuild_base_model, rv_check


def base_model(overrides: list[str]) -> None:
    built = rebuild_base_model(overrides)
    if built is None:
        print("this model is not built here (only model=tiny is); nothing to do")
        return
    path, meta = built
    print(f"built {path}")
    print(json.dumps(meta, indent=2))


def mi_check(overrides: list[str]) -> None:
    r = rv_check(overrides)
    print(f"env={r['env']} P={r['num_prompts']} G={r['group_size']} success={r['success']:.3f}")
    print(f"per-group reward variance: {' '.join(f'{v:.3f}' for v in r['group_rv'])}")
    print(f"Std(RV)/Mean(RV) = {r['ratio']:.3f}")
    print(r["reading"])


def export_checkpoint(args: list[str]) -> None:
    if len(args) != 1 or args[0].startswith("-"):
        raise UserError("usage: agentcollapse export-checkpoint RUN_DIR (a trainer=fsdp run whose checkpoints/last.ckpt is a directory)")
    path, iteration = export_full_checkpoint(args[0])
    print(f"wrote {path} (iteration {iteration}): one file; resume=true run_dir={args[0]} continues it in one process or with trainer=ddp")
