"""Synthetic run directories with known values, written through the real ``RunRecorder``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from agentcollapse.records import RunRecorder

MI = "collapse_trajectory_sample/mi_zscore_ema"
ENT = "collapse_trajectory_sample/conditional_entropy_est"


def base_config(**over) -> dict:
    cfg = {
        "env": {"name": "frozenlake", "kwargs": {"slip": 0.0}},
        "algorithm": {"name": "grpo", "kl_coef": 0.0, "entropy_coef": 0.001},
        "filter": {"name": "none", "metric": "reward_std", "strategy": "top_p", "value": 1.0, "trajectory_k": 0},
        "rollout": {"num_prompts": 8, "group_size": 8},
        "diagnostics": {"trajectory_samples": 32},
        "trainer": {"max_steps": 6, "val_episodes": 32, "val_every": 1},
        "seed": 0,
    }
    for dotted, value in over.items():
        node = cfg
        *path, last = dotted.split(".")
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
    return cfg


def write_run(
    root: Path,
    name: str,
    *,
    success: list[float],
    mi: list[float] | None = None,
    entropy: list[float] | None = None,
    extra: dict[str, list[float]] | None = None,
    status: str = "finished",
    reason: str = "reached trainer.max_steps",
    warm_start_success: float = 0.9,
    grad_buckets: bool = False,
    **config,
) -> Path:
    """A run whose step 0 holds ``warm_start_success`` and steps 1..len(success) the given series;
    ``mi=None`` leaves the MI undefined (proxy steps with no valid reasoning), a NaN entry likewise."""
    run_dir = root / name
    rec = RunRecorder(run_dir)
    rec.write_config(yaml.safe_dump(base_config(**config)))
    rec.log(0, {"val/success_rate": warm_start_success})
    for i, s in enumerate(success):
        step = i + 1
        row = {"val/success_rate": s, "rollout/success_rate": s, "perf/step_time_s": 1.0 + 0.1 * i}
        row["collapse_trajectory_sample/valid_thinking_rate"] = 0.0 if mi is None or math.isnan(mi[i]) else 0.9
        row["collapse_first_turn_sample/valid_thinking_rate"] = row["collapse_trajectory_sample/valid_thinking_rate"]
        if mi is not None and not math.isnan(mi[i]):  # the whole proxy family moves with the headline one
            for sampler in ("trajectory_sample", "first_turn_sample"):
                row[f"collapse_{sampler}/mi_zscore_ema"] = mi[i]
                row[f"collapse_{sampler}/mi_estimate"] = 0.5 * mi[i]
                row[f"collapse_{sampler}/retrieval_accuracy"] = 0.2 + 0.1 * mi[i]
        if entropy is not None:
            row[ENT] = entropy[i]
            row["actor/entropy"] = entropy[i] / 2
        for k, values in (extra or {}).items():
            row[k] = values[i]
        if grad_buckets:
            for b in range(6):
                row[f"grad_bucket/{b}/task_norm"] = 0.1 * (b + 1)
                row[f"grad_bucket/{b}/reg_norm"] = 0.05
                row[f"grad_bucket/{b}/rv_mean"] = 0.02 * b
        rec.log(step, row)
    rec.write_summary(status, reason)
    return run_dir


@pytest.fixture()
def sweep(tmp_path) -> Path:
    return make_sweep(tmp_path / "sweep")


def make_sweep(root: Path) -> Path:
    """Eight finished runs over kl x entropy x filter whose MI tracks success and entropy does not, one
    finished run that babbled (MI undefined, worst success), and a failed, an interrupted, a running and
    a half-written one."""
    i = 0
    for kl in (0.0, 0.05):
        for ent in (0.001, 0.05):
            for filt in ("none", "rv_top_p"):
                s = 0.3 + 0.08 * i
                write_run(
                    root,
                    str(i),
                    success=[s - 0.1, s, s + 0.05],
                    mi=[0.1 * i, 0.1 * i + 0.05, 0.1 * i + 0.1],
                    entropy=[2.0 + ((i * 5) % 8) * 0.1] * 3,
                    grad_buckets=True,
                    **{"algorithm.kl_coef": kl, "algorithm.entropy_coef": ent, "filter.name": filt, "seed": i},
                )
                i += 1
    write_run(root, "8", success=[0.05, 0.0, 0.0], mi=None, entropy=[6.9, 6.9, 6.9], **{"algorithm.entropy_coef": 0.05})
    write_run(root, "9", success=[0.5], status="failed", reason="RuntimeError: boom")
    write_run(root, "10", success=[0.5], status="interrupted", reason="SIGTERM")
    write_run(root, "11", success=[0.5], status="running", reason="")
    (root / "12").mkdir()
    (root / "12" / "summary.json").write_text('{"status": "fini')  # a crash mid-write
    return root
