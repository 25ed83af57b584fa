"""One RL iteration against the code before the performance work, and against this CPU's matmul limit.

    python benchmarks/bench_iteration.py [--baseline COMMIT] [--repeats 2] [--steps 6] [--threads 1] [overrides ...]

Both versions train the same config through the CLI (``agentcollapse train``, FrozenLake, P=8 x G=8 by
default, MI proxy at step 1 and every 5 steps, no validation), alternating baseline / current
``--repeats`` times, so machine noise hits both alike. The baseline runs from a ``git worktree`` of
``--baseline`` (default: the last commit before the performance work). Each run's ``metrics.csv``
gives per-phase times; steps 2..``--steps`` are averaged (step 1 pays one-off costs; a 5-step window
holds one proxy step, the cadence of the default). The roofline probe times ``torch.matmul`` at the
model's own shapes (hidden 128 -> 128 / 384 / vocab, at the update's and decoding's row counts) and
the achieved FLOP/s of each phase is reported against it.

Writes ``benchmarks/results/latest.json`` and ``latest.md``. Not a test: numbers go in issue notes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "f92f80d"  # the last commit before the performance work (issue 13)
PHASES = {
    "step": "perf/step_time_s",
    "rollout": "perf/rollout_time_s",
    "scoring": "perf/scoring_time_s",
    "update": "perf/update_time_s",
    "proxy": "perf/collapse_time_s",
}


def timed_run_overrides(steps: int, threads: int) -> list[str]:
    """A run timed by its own perf/* metrics: no validation, no checkpoints, no live bar, CSV only."""
    return [
        f"trainer.max_steps={steps}",
        "trainer.val_every=0",
        "trainer.checkpoint_every=0",
        f"trainer.num_threads={threads}",
        "trainer.progress_bar=false",
        "logger=csv",
    ]


def iteration_overrides(steps: int, threads: int) -> list[str]:
    """The benchmarked iteration: FrozenLake P=8 x G=8, the MI proxy at step 1 and every 5 steps, timed."""
    return [
        "env=frozenlake",
        "rollout.num_prompts=8",
        "rollout.group_size=8",
        "diagnostics.compute_freq=5",
        *timed_run_overrides(steps, threads),
    ]


def measured_train(src: Path, overrides: list[str], run_dir: Path, threads: int) -> tuple[Any, float]:
    """(metrics.csv rows after step 0, peak resident memory in MiB) of one ``agentcollapse train`` of the
    code under ``src``. Output goes to ``<run_dir>.log``, a pipe nobody reads could fill up and stall it."""
    import pandas as pd

    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": str(threads), "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "agentcollapse.cli.main", "train", *overrides, f"run_dir={run_dir}"]
    log = run_dir.parent / f"{run_dir.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=src.parent)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not every child's maximum
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"run failed ({src}):\n{log.read_text()[-3000:]}")
    rows = pd.read_csv(run_dir / "metrics.csv")
    return rows[rows["step"] >= 1].sort_values("step"), usage.ru_maxrss / 1024  # Linux: KiB


def train_rows(src: Path, overrides: list[str], run_dir: Path, threads: int) -> Any:
    """The metrics.csv rows after step 0 of one ``agentcollapse train`` of the code under ``src``."""
    return measured_train(src, overrides, run_dir, threads)[0]


def run_once(src: Path, overrides: list[str], run_dir: Path, threads: int) -> dict[str, list[float]]:
    rows = train_rows(src, overrides, run_dir, threads)
    out = {name: rows[col].fillna(0.0).tolist() if col in rows else [] for name, col in PHASES.items()}
    out["tokens_per_s"] = rows["perf/rollout_tokens_per_s"].tolist()
    out["response_length"] = rows["rollout/response_length"].tolist()
    out["num_turns"] = rows["rollout/num_turns"].tolist()
    return out


def matmul_probe(shapes: list[tuple[int, int, int]], threads: int, repeats: int = 20) -> dict[str, float]:
    """GFLOP/s of ``torch.matmul`` for each (rows, k, n)."""
    import torch

    torch.set_num_threads(threads)
    out = {}
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        for _ in range(3):
            a @ b
        started = time.perf_counter()
        for _ in range(repeats):
            a @ b
        out[f"{m}x{k}x{n}"] = 2 * m * k * n * repeats / (time.perf_counter() - started) / 1e9
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default=BASELINE, help="commit to compare against (a git worktree of it is made)")
    ap.add_argument("--repeats", type=int, default=2, help="alternating baseline/current pairs")
    ap.add_argument("--steps", type=int, default=6, help="RL iterations per run (steps 2.. are averaged)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for both versions")
    args = ap.parse_args()
    overrides = [*iteration_overrides(args.steps, args.threads), *args.overrides]
    results: dict[str, list[dict[str, list[float]]]] = {"baseline": [], "current": []}
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = Path(tmp) / "baseline"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base_tree), args.baseline], check=True, capture_output=True
        )
        try:
            for rep in range(args.repeats):
                for name, src in (("baseline", base_tree / "src"), ("current", ROOT / "src")):
                    started = time.perf_counter()
                    results[name].append(run_once(src, overrides, Path(tmp) / f"{name}-{rep}", args.threads))
                    print(f"{name} run {rep + 1}/{args.repeats}: {time.perf_counter() - started:.0f}s", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)], capture_output=True)

    def mean_of(name: str, phase: str) -> float:
        values = [v for run in results[name] for v in run[phase][1:]]  # steps 2..
        return statistics.fmean(values) if values else 0.0

    summary = {
        name: {phase: mean_of(name, phase) for phase in (*PHASES, "tokens_per_s", "response_length", "num_turns")} for name in results
    }
    ratios = {phase: summary["current"][phase] / summary["baseline"][phase] for phase in PHASES if summary["baseline"][phase] > 0}

    # Roofline: the update's micro-batches are ~8 x 315 tokens, decoding 64 rows at a time.
    probe = matmul_probe(
        [(2520, 128, 128), (2520, 128, 384), (2520, 384, 128), (2520, 128, 725), (64, 128, 384), (2048, 2048, 2048)], args.threads
    )
    # Model FLOPs (non-embedding params N ~ 4 layers x (4*128*128 + 3*128*384) = 0.85M; LM head 128 x 725).
    n_params = 4 * (4 * 128 * 128 + 3 * 128 * 384) + 128 * 725
    cur = summary["current"]
    tokens_update = 64 * 315  # sequences x mean length at the default (measured: 64 sequences, ~315 tokens)
    flops = {
        # update: forward + backward (6N per token) plus the no-grad reference pass (2N) when kl_coef > 0
        "update": 8 * n_params * tokens_update / max(cur["update"] + cur["scoring"], 1e-9) / 1e9,
        # rollout: 2N per generated token (prefill of the contexts excluded, so this is a lower bound)
        "rollout_decode": 2 * n_params * cur["tokens_per_s"] / 1e9,
    }
    probe_update = statistics.fmean([probe["2520x128x128"], probe["2520x128x384"], probe["2520x384x128"], probe["2520x128x725"]])
    report = {
        "config": overrides,
        "baseline_commit": args.baseline,
        "repeats": args.repeats,
        "phases_s": summary,
        "ratio_current_over_baseline": ratios,
        "matmul_probe_gflops": probe,
        "achieved_gflops": flops,
        "fraction_of_probe": {"update": flops["update"] / probe_update, "rollout_decode": flops["rollout_decode"] / probe["64x128x384"]},
        "raw": results,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(report, indent=2))
    lines = [
        f"# One RL iteration: current vs {args.baseline} ({args.repeats} alternating runs each, {args.threads} thread(s))",
        "",
        "| phase | baseline (s) | current (s) | current / baseline |",
        "|---|---|---|---|",
    ]
    for phase in PHASES:
        lines.append(
            f"| {phase} | {summary['baseline'][phase]:.2f} | {summary['current'][phase]:.2f} | {ratios.get(phase, float('nan')):.2f} |"
        )
    lines += [
        "",
        f"rollout tokens/s: baseline {summary['baseline']['tokens_per_s']:.0f}, current {cur['tokens_per_s']:.0f}",
        "",
        "| roofline | GFLOP/s |",
        "|---|---|",
        *[f"| matmul {k} | {v:.1f} |" for k, v in probe.items()],
        f"| update achieved (8N x tokens / time) | {flops['update']:.1f} ({report['fraction_of_probe']['update']:.0%} of the probe at its shapes) |",
        f"| decoding achieved (2N x tokens/s) | {flops['rollout_decode']:.2f} ({report['fraction_of_probe']['rollout_decode']:.0%} of the 64-row probe) |",
    ]
    (out / "latest.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
