"""Rollouts that overlap the update (``rollout.max_staleness=1``) against the synchronous loop (issue 60).

    python -m benchmarks.bench_async [--repeats 2] [--steps 5] [overrides ...]   (or `make bench-async`)

Each arm is an ``agentcollapse train`` of SmolLM2-135M (warm-started on FrozenLake, as section 10's runs) with
``rollout.engine=vllm``, P=4 x G=4, the MI proxy at step 1 only (its cost is the same in both arms and would
hide the overlap); arms alternate (ABBA) over ``--repeats`` rounds. Both arms run one trainer thread and bind
the engine to one core of its own (``VLLM_CPU_OMP_THREADS_BIND``): on these 2 cores the overlap can only
hide as much of one phase as the other core can take. Per phase, the median over steps 2.. of every round
(step 1 pays one-off costs and, overlapped, waits for the first batch). ``rollout`` is the engine's
decoding time of the batch trained on; ``wait`` the part of it the update did not hide (overlapped only).

Writes ``benchmarks/results/async.json`` and ``.md``. Not a test: numbers go in ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import pandas as pd

from agentcollapse.analysis.markdown import md_table
from benchmarks.common import (
    PHASES,
    ROOT,
    Benchmark,
    Results,
    alternating,
    measured_train,
    median,
    run,
    timed_run_overrides,
)

ARMS = {"synchronous (S=0)": ["rollout.max_staleness=0"], "overlapped (S=1)": ["rollout.max_staleness=1"]}
COLUMNS = {**PHASES, "wait": "perf/rollout_wait_s"}
ENGINE_CORE = "1"  # the trainer's one thread is left core 0 by the scheduler, mostly


def base_overrides(steps: int) -> list[str]:
    return [
        "model=smollm2-135m",
        "env=frozenlake",
        "rollout.engine=vllm",
        "rollout.vllm.kv_cache_gib=1",
        "rollout.num_prompts=4",
        "rollout.group_size=4",
        "diagnostics.compute_freq=0",
        *timed_run_overrides(steps, 1),
    ]


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--steps", type=int, default=5, help="RL iterations per run; steps 2.. are timed")


def main(args: argparse.Namespace, save: Results) -> None:
    base = [*base_overrides(args.steps), *args.overrides]
    times: dict[str, dict[str, list[float]]] = {arm: {name: [] for name in COLUMNS} for arm in ARMS}
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ENGINE_CORE
    with tempfile.TemporaryDirectory() as tmp:
        for k, (rep, arm) in enumerate(alternating(list(ARMS), args.repeats, swap=True)):
            rows, _ = measured_train(ROOT / "src", [*base, *ARMS[arm]], Path(tmp) / f"run{k}", 1)
            later = rows[rows["step"] >= 2]
            for name, col in COLUMNS.items():
                times[arm][name] += later[col].dropna().tolist() if col in later else []
            print(f"round {rep} {arm}: step {later['perf/step_time_s'].median():.2f} s", flush=True)
    write_results(times, base, args.repeats, args.steps, save)


def write_results(
    times: dict[str, dict[str, list[float]]], base: list[str], repeats: int, steps: int, save: Results, note: str = ""
) -> None:
    """Medians per arm and phase into ``async.json`` and ``.md`` (``times``: each arm's per-step values; ``note``:
    how the measurement departed from the command's, if it did)."""
    table = {arm: {name: median(v) if v else float("nan") for name, v in phases.items()} for arm, phases in times.items()}
    save.json({"config": base, "arms": ARMS, "repeats": repeats, "steps": steps, "rows": table, "samples": times, "note": note})
    sync = table["synchronous (S=0)"]
    frame = pd.DataFrame(
        [
            {"arm": arm, **{f"{c} (s)": f"{r[c]:.2f}" for c in COLUMNS}, "step / synchronous": f"{r['step'] / sync['step']:.2f}"}
            for arm, r in table.items()
        ]
    )
    lines = [
        f"# Rollouts overlapping the update vs synchronous (SmolLM2-135M, FrozenLake, P=4 x G=4, vLLM on one core, trainer on "
        f"one thread; medians of steps 2..{steps} over {repeats} rounds)",
        "",
        md_table(frame),
        *([f"\n{note}"] if note else []),
    ]
    save.markdown(lines, echo=True)


BENCHMARK = Benchmark("async", __doc__, main, flags, repeats=2, repeats_help="rounds of both arms (ABBA)")

if __name__ == "__main__":
    run(BENCHMARK)
