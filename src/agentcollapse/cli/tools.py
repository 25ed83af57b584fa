"""Small commands around training: rebuild the base model, and the pre-training Std(RV)/Mean(RV) check.
The work is in ``agentcollapse.run.jobs``; this module prints it."""

from __future__ import annotations

import json

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
