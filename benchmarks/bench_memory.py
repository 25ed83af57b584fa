"""Peak resident memory of a SmolLM2 run's evaluation at each ``rollout.generation_batch_size``.

    python -m benchmarks.bench_memory [--slices 256,16] [--threads 1] [overrides ...]

The transformers decoder (``rollout.engine=hf``) plays trajectories in slices of
``rollout.generation_batch_size``, each from its first turn to its last, so the KV caches held at once are
one slice's. Each row is one ``agentcollapse train model=smollm2-135m`` through the CLI, as a new user
runs it: the step-0 evaluation (``trainer.val_episodes`` maps at every ``trainer.val_temperatures``), one
iteration at P=2 x G=2 and the final evaluation, on FrozenLake by default, with its peak resident set
(``wait4``, the whole process) and wall time. Every row must evaluate alike: each trajectory samples from
its own stream, so a slice draws the tokens the whole batch would, and the table says whether the
evaluation's metrics agree across rows.

The warm start is built first if missing (``make base-model``'s build, ~12 min on 2 cores; its own peak
is not part of a row). Defaults: 16 held-out maps (x 3 temperatures = 48 rows; the run's default is 64)
and 1 thread, about 15 minutes a row on an idle machine with the warm start; ``model.warm_start.enabled=false``
measures the untuned model, whose responses run to the budget (the longest contexts).
Writes ``benchmarks/results/memory.json`` and ``.md``. Not a test: numbers go in ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks.common import ROOT, Benchmark, Results, csv_list, measured_train, policy_dir, run, timed, with_model


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--slices", type=csv_list, default=["256", "16"], help="comma-separated rollout.generation_batch_size values, one row each"
    )
    ap.add_argument("--episodes", type=int, default=16, help="held-out maps of each evaluation (trainer.val_episodes)")


def main(args: argparse.Namespace, save: Results) -> None:
    overrides = with_model(
        [
            "env=frozenlake",
            "trainer.max_steps=1",
            "rollout.num_prompts=2",
            "rollout.group_size=2",
            f"trainer.val_episodes={args.episodes}",
            f"trainer.num_threads={args.threads}",
            "trainer.checkpoint_every=0",
            "trainer.progress_bar=false",
            "logger=csv",
            *args.overrides,
        ]
    )
    policy_dir(overrides)  # built here once, outside every measured row
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        for size in map(int, args.slices):
            wall_s, (metrics, peak_mib) = timed(
                measured_train, ROOT / "src", [*overrides, f"rollout.generation_batch_size={size}"], Path(tmp) / str(size), args.threads
            )
            evaluation = {k: float(v) for k, v in metrics.iloc[0].items() if str(k).startswith("val/") and v == v}
            rows.append({"generation_batch_size": size, "peak_rss_mib": peak_mib, "wall_s": wall_s, "step0": evaluation})
            print(
                f"generation_batch_size={size}: peak {peak_mib / 1024:.2f} GiB, {rows[-1]['wall_s']:.0f} s, step 0 {evaluation}", flush=True
            )
    alike = all(r["step0"] == rows[0]["step0"] for r in rows)
    save.json({"overrides": overrides, "threads": args.threads, "rows": rows, "step0_alike": alike})
    lines = [
        f"`{' '.join(overrides)}`, one row per `rollout.generation_batch_size`; step-0 evaluations alike: **{alike}**",
        "",
        "| rollout.generation_batch_size | peak RSS (GiB) | wall (s) | step-0 val/success_rate |",
        "|---|---|---|---|",
        *(
            f"| {r['generation_batch_size']} | {r['peak_rss_mib'] / 1024:.2f} | {r['wall_s']:.0f} | {r['step0'].get('val/success_rate', float('nan')):.3f} |"
            for r in rows
        ),
    ]
    save.markdown(lines, echo=True)


BENCHMARK = Benchmark(
    "memory", __doc__, main, flags, threads=1, overrides="Hydra overrides, e.g. model.warm_start.enabled=false env=sokoban"
)

if __name__ == "__main__":
    run(BENCHMARK)
