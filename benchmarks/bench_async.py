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

from benchmarks.common import PHASES, Benchmark, Results, arms_lines, median, run, smollm2_engine_overrides, timed_arms

ARMS = {"synchronous (S=0)": ["rollout.max_staleness=0"], "overlapped (S=1)": ["rollout.max_staleness=1"]}
COLUMNS = {**PHASES, "wait": "perf/rollout_wait_s"}
ENGINE_CORE = "1"  # the trainer's one thread is left core 0 by the scheduler, mostly


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--steps", type=int, default=5, help="RL iterations per run; steps 2.. are timed")


def main(args: argparse.Namespace, save: Results) -> None:
    base = [*smollm2_engine_overrides(args.steps, group_size=4, compute_freq=0), *args.overrides]
    times = timed_arms(ARMS, base, args.repeats, COLUMNS, engine_cores=dict.fromkeys(ARMS, ENGINE_CORE))
    write_results(times, base, args.repeats, args.steps, save)


def write_results(
    times: dict[str, dict[str, list[float]]], base: list[str], repeats: int, steps: int, save: Results, note: str = ""
) -> None:
    """Medians per arm and phase into ``async.json`` and ``.md`` (``times``: each arm's per-step values; ``note``:
    how the measurement departed from the command's, if it did)."""
    table = {arm: {name: median(v) if v else float("nan") for name, v in phases.items()} for arm, phases in times.items()}
    save.json({"config": base, "arms": ARMS, "repeats": repeats, "steps": steps, "rows": table, "samples": times, "note": note})
    title = (
        f"# Rollouts overlapping the update vs synchronous (SmolLM2-135M, FrozenLake, P=4 x G=4, vLLM on one core, trainer on "
        f"one thread; medians of steps 2..{steps} over {repeats} rounds)"
    )
    lines = [*arms_lines(title, table, ("step",), "synchronous (S=0)", label="synchronous"), *([f"\n{note}"] if note else [])]
    save.markdown(lines, echo=True)


BENCHMARK = Benchmark("async", __doc__, main, flags, repeats=2, repeats_help="rounds of both arms (ABBA)")

if __name__ == "__main__":
    run(BENCHMARK)
