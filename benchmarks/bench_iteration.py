"""One RL iteration against the code before the performance work, and against this CPU's matmul limit.

    python -m benchmarks.bench_iteration [--baseline COMMIT] [--repeats 2] [--steps 6] [--threads 1] [--clock wall|cpu] [overrides ...]

Both versions train the same config through the CLI (``agentcollapse train``, FrozenLake, P=8 x G=8 by
default, MI proxy at step 1 and every 5 steps, no validation), alternating baseline / current
``--repeats`` times, so machine noise hits both alike. The baseline runs from a ``git worktree`` of
``--baseline`` (default ``BASELINE`` below: the last commit before the performance work). Each run's ``metrics.csv``
gives per-phase times; steps 2..``--steps`` are averaged (step 1 pays one-off costs; a 5-step window
holds one proxy step, the cadence of the default). The roofline probe times ``torch.matmul`` at the
model's own shapes (hidden 128 -> 128 / 384 / vocab, at the update's and decoding's row counts) and
the achieved FLOP/s of each phase is reported against it.

The last pair also times one held-out evaluation (step 0 and the end) in each version, kept apart from
the iteration. ``--clock cpu`` times every phase in the process's CPU seconds instead of the wall clock
(``benchmarks/cpu_clock``): on a machine shared with other work the wall clock charges each version for
the time it waited for a core, unevenly; on an idle machine the two agree. Saves ``benchmarks/results/iteration.json`` (``benchmarks.bench_report`` folds it into
``latest.json`` and ``latest.md``). Not a test: numbers go in issue notes.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bench_report import iteration_lines
from benchmarks.common import (
    CLOCKS,
    PHASES,
    ROOT,
    Benchmark,
    Results,
    alternating,
    best_probe,
    iteration_overrides,
    linear_params,
    matmul_probe,
    measured_train,
    phase_lists,
    policy_dir,
    run,
    timed,
    worktree,
)

BASELINE = "f92f80d"  # the last commit before the performance work (its first round, docs/performance.md)
VERSIONS = ("baseline", "current")


@dataclass
class Runs:
    """What the alternating runs measured, by version."""

    phases: dict[str, list[dict[str, list[float]]]] = field(default_factory=lambda: {v: [] for v in VERSIONS})  # per run
    peaks: dict[str, list[float]] = field(default_factory=lambda: {v: [] for v in VERSIONS})  # MiB per run
    val_s: dict[str, list[float]] = field(default_factory=lambda: {v: [] for v in VERSIONS})  # held-out evaluations
    tokens_per_pass: list[float] = field(default_factory=list)  # the current version's update positions per step


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--baseline", default=BASELINE, help="commit to compare against (a git worktree of it is made)")
    ap.add_argument("--steps", type=int, default=6, help="RL iterations per run (steps 2.. are averaged)")
    ap.add_argument("--no-validation", action="store_true", help="skip timing one held-out evaluation in the last pair")
    ap.add_argument("--clock", choices=CLOCKS, default="wall", help="phase times on the wall clock, or in the process's CPU time")


def main(args: argparse.Namespace, save: Results) -> None:
    overrides = [*iteration_overrides(args.steps, args.threads), *args.overrides]
    # Both versions load the same warm start (their cache keys agree), built here first if missing.
    n_lin, sizes = linear_params(policy_dir(overrides))
    shapes = probe_shapes(sizes)
    # The probe runs before and after the runs (best_probe keeps each shape's best).
    probes = [matmul_probe(shapes, args.threads)]
    runs = alternate_versions(args, overrides)
    probes.append(matmul_probe(shapes, args.threads))
    report = build_report(args, overrides, runs, n_lin, sizes, probes)
    path = save.json(report)
    print("\n".join(iteration_lines(report)))
    print(f"wrote {path}")


def probe_shapes(sizes: dict[str, int]) -> list[tuple[int, int, int]]:
    """The model's own matmul shapes (hidden 128 -> 128 / 384 / vocab) at the update's and decoding's row
    counts, and one large square one."""
    h, i, vocab = sizes["hidden"], sizes["intermediate"], sizes["vocab"]
    rows_update = 8 * 315  # the update's micro-batches: 8 sequences of a few hundred tokens; decoding: 64 rows
    return [(rows_update, h, h), (rows_update, h, i), (rows_update, i, h), (rows_update, h, vocab), (64, h, i), (2048, 2048, 2048)]


def alternate_versions(args: Any, overrides: list[str]) -> Runs:
    """``--repeats`` pairs of runs, baseline (a worktree of ``--baseline``) and current alternating."""
    runs = Runs()
    with tempfile.TemporaryDirectory() as tmp, worktree(args.baseline, Path(tmp) / "baseline") as base_tree:
        for rep, (name, src) in alternating((("baseline", base_tree / "src"), ("current", ROOT / "src")), args.repeats):
            # The last pair also evaluates at step 0 and at the end (validation stays out of the
            # iteration's own times, which these rows keep apart).
            validate = rep == args.repeats - 1 and not args.no_validation
            extra = [f"trainer.val_every={args.steps}"] if validate else []
            run_dir = Path(tmp) / f"{name}-{rep}"
            seconds, (every, peak) = timed(measured_train, src, [*overrides, *extra], run_dir, args.threads, args.clock)
            rows = every[every["step"] >= 1]
            runs.phases[name].append(phase_lists(rows))
            runs.peaks[name].append(peak)
            if validate:
                runs.val_s[name] += every["perf/val_time_s"].dropna().tolist()
            if name == "current" and "perf/update_tokens" in rows:
                runs.tokens_per_pass += rows["perf/update_tokens"].dropna().tolist()[1:]
            print(f"{name} run {rep + 1}/{args.repeats}: {seconds:.0f}s", flush=True)
    return runs


def build_report(
    args: Any, overrides: list[str], runs: Runs, n_lin: int, sizes: dict[str, int], probes: list[dict[str, float]]
) -> dict[str, Any]:
    """iteration.json: each version's mean phase times (steps 2..), their ratios, validation, memory, and
    the achieved FLOP/s against the matmul limit."""

    def mean_of(name: str, phase: str) -> float:
        values = [v for run in runs.phases[name] for v in run[phase][1:]]  # steps 2..
        return statistics.fmean(values) if values else 0.0

    summary = {
        name: {phase: mean_of(name, phase) for phase in (*PHASES, "tokens_per_s", "response_length", "num_turns")} for name in runs.phases
    }
    ratios = {phase: summary["current"][phase] / summary["baseline"][phase] for phase in PHASES if summary["baseline"][phase] > 0}
    probe = best_probe(probes)
    positions = statistics.fmean(runs.tokens_per_pass) if runs.tokens_per_pass else float("nan")
    achieved = achieved_rates(summary["current"], probe, n_lin, sizes, positions)
    validation = None
    if runs.val_s["current"]:
        validation = {
            "seconds": statistics.fmean(runs.val_s["current"]),
            "baseline_seconds": statistics.fmean(runs.val_s["baseline"]) if runs.val_s["baseline"] else None,
            "evaluations": len(runs.val_s["current"]),
        }
        if validation["baseline_seconds"]:
            ratios["validation"] = validation["seconds"] / validation["baseline_seconds"]
            summary["baseline"]["validation"] = validation["baseline_seconds"]
            summary["current"]["validation"] = validation["seconds"]
    return {
        "config": overrides,
        "baseline_commit": args.baseline,
        "repeats": args.repeats,
        "threads": args.threads,
        "clock": args.clock,
        "phases": [*PHASES, *(["validation"] if "validation" in ratios else [])],
        "phases_s": summary,
        "ratio_current_over_baseline": ratios,
        "validation": validation,
        "peak_rss_mib": {name: max(v) for name, v in runs.peaks.items()},
        "update_positions_per_pass": positions,
        "matmul_probe_gflops": probe,
        "matmul_probes_gflops": probes,
        "achieved": achieved,
        "raw": runs.phases,
    }


def achieved_rates(cur: dict[str, float], probe: dict[str, float], n_lin: int, sizes: dict[str, int], positions: float) -> dict[str, Any]:
    """The current version's FLOP/s in the update (with scoring) and in decoding, against the probe."""
    h, i = sizes["hidden"], sizes["intermediate"]
    probe_update = statistics.fmean(list(probe.values())[:4])
    # Scoring + update per token position: the reference forward (2N), the forward (2N) and the backward
    # to the inputs (2N; the frozen weights get no gradient). LoRA's own matmuls (~3%) and attention's
    # score and value products are left out, so this is a lower bound on the work done.
    update_gflops = 6 * n_lin * positions / max(cur["update"] + cur["scoring"], 1e-9) / 1e9
    decode_gflops = 2 * n_lin * cur["tokens_per_s"] / 1e9  # prefill of the contexts left out: a lower bound
    return {
        "update + scoring": {
            "how": f"6N x {positions:.0f} positions / time (N = {n_lin / 1e6:.2f}M linear weights)",
            "gflops": update_gflops,
            "fraction": update_gflops / probe_update,
            "of": "the probe at the update's shapes",
        },
        "decoding": {
            "how": "2N x generated tokens/s",
            "gflops": decode_gflops,
            "fraction": decode_gflops / probe[f"64x{h}x{i}"],
            "of": "the 64-row probe",
        },
    }


BENCHMARK = Benchmark(
    "iteration",
    __doc__,
    main,
    flags,
    repeats=2,
    repeats_help="alternating baseline/current pairs",
    threads=1,
    overrides="extra Hydra overrides for both versions",
)

if __name__ == "__main__":
    run(BENCHMARK)
