"""Two data-parallel ranks, each with its own vLLM engine, against one process; the MI proxy with and without
its split across the ranks (issue 59).

    python -m benchmarks.bench_ranks [--repeats 2] [--steps 3] [overrides ...]   (or `make bench-ranks`)

Each arm is an ``agentcollapse train`` of SmolLM2-135M (warm-started on FrozenLake, as section 10's runs) with
``rollout.engine=vllm``, P=4 x G=2, the MI proxy at every step; arms alternate (ABBA) over ``--repeats``
rounds. Arms: one process on one thread (its engine bound to core 0); one process on two threads (the same cores as two ranks); two gloo
ranks (``trainer=ddp``) on one thread and one core each, with the proxy's cross-scoring dealt across them
(``diagnostics.proxy_split=true``, the default) and without. Per phase (rollout, scoring, update, proxy,
step), the median over steps 2.. of every round (step 1 pays one-off costs). A rank's phase time is rank 0's,
which includes waiting for the other at each gather.

Writes ``benchmarks/results/ranks.json`` and ``.md``. Not a test: numbers go in ``docs/performance.md``.
"""

from __future__ import annotations

import argparse

from benchmarks.common import Benchmark, Results, arms_lines, median, run, smollm2_engine_overrides, timed_arms

ARMS = {
    "1 process, 1 thread": ["trainer.devices=1", "trainer.num_threads=1"],
    "1 process, 2 threads": ["trainer.devices=1", "trainer.num_threads=2"],
    "2 ranks, proxy split": ["trainer=ddp", "trainer.devices=2", "trainer.num_threads=1", "diagnostics.proxy_split=true"],
    "2 ranks, proxy whole": ["trainer=ddp", "trainer.devices=2", "trainer.num_threads=1", "diagnostics.proxy_split=false"],
}
THREADS = {"1 process, 2 threads": 2}  # the process's OMP threads; every other arm runs one a process
# vLLM binds an engine's threads itself: one process's engine to every core, unless told (two ranks bind one each)
ENGINE_CORES = {"1 process, 1 thread": "0", "1 process, 2 threads": "0-1"}


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--steps", type=int, default=3, help="RL iterations per run; steps 2.. are timed")


def main(args: argparse.Namespace, save: Results) -> None:
    base = [*smollm2_engine_overrides(args.steps, group_size=2, compute_freq=1), *args.overrides]
    times = timed_arms(ARMS, base, args.repeats, threads=THREADS, engine_cores=ENGINE_CORES)
    table = {arm: {name: median(v) for name, v in phases.items()} for arm, phases in times.items()}
    save.json({"config": base, "arms": ARMS, "repeats": args.repeats, "rows": table, "samples": times})
    title = (
        f"# Two ranks with a vLLM engine each vs one process (SmolLM2-135M, FrozenLake, P=4 x G=2, proxy every step; "
        f"medians of steps 2..{args.steps} over {args.repeats} rounds)"
    )
    save.markdown(arms_lines(title, table, ("step", "proxy"), "1 process, 1 thread"), echo=True)


BENCHMARK = Benchmark("ranks", __doc__, main, flags, repeats=2, repeats_help="rounds of every arm (ABBA)")

if __name__ == "__main__":
    run(BENCHMARK)
