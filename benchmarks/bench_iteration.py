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
import subprocess
import tempfile
from pathlib import Path

from benchmarks.bench_report import iteration_lines
from benchmarks.common import (
    CLOCKS,
    PHASES,
    RESULTS,
    ROOT,
    alternating,
    iteration_overrides,
    linear_params,
    matmul_probe,
    measured_train,
    phase_lists,
    policy_dir,
    save_result,
    timed,
)

BASELINE = "f92f80d"  # the last commit before the performance work (its first round, docs/performance.md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default=BASELINE, help="commit to compare against (a git worktree of it is made)")
    ap.add_argument("--repeats", type=int, default=2, help="alternating baseline/current pairs")
    ap.add_argument("--steps", type=int, default=6, help="RL iterations per run (steps 2.. are averaged)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-validation", action="store_true", help="skip timing one held-out evaluation in the last pair")
    ap.add_argument("--clock", choices=CLOCKS, default="wall", help="phase times on the wall clock, or in the process's CPU time")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for both versions")
    args = ap.parse_args()
    overrides = [*iteration_overrides(args.steps, args.threads), *args.overrides]
    # Both versions load the same warm start (their cache keys agree), built here first if missing.
    model_dir = policy_dir(overrides)
    n_lin, sizes = linear_params(model_dir)
    h, i, vocab = sizes["hidden"], sizes["intermediate"], sizes["vocab"]
    rows_update = 8 * 315  # the update's micro-batches: 8 sequences of a few hundred tokens; decoding: 64 rows
    shapes = [(rows_update, h, h), (rows_update, h, i), (rows_update, i, h), (rows_update, h, vocab), (64, h, i), (2048, 2048, 2048)]
    # The probe runs before and after the runs and keeps each shape's best: a limit is a maximum, and one
    # probe on a shared machine can read 30% low.
    probes = [matmul_probe(shapes, args.threads)]
    results: dict[str, list[dict[str, list[float]]]] = {"baseline": [], "current": []}
    peaks: dict[str, list[float]] = {"baseline": [], "current": []}
    val_s: dict[str, list[float]] = {"baseline": [], "current": []}
    tokens_per_pass: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = Path(tmp) / "baseline"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base_tree), args.baseline], check=True, capture_output=True
        )
        try:
            for rep, (name, src) in alternating((("baseline", base_tree / "src"), ("current", ROOT / "src")), args.repeats):
                # The last pair also evaluates at step 0 and at the end (validation stays out of the
                # iteration's own times, which these rows keep apart).
                validate = rep == args.repeats - 1 and not args.no_validation
                extra = [f"trainer.val_every={args.steps}"] if validate else []
                run_dir = Path(tmp) / f"{name}-{rep}"
                seconds, (every, peak) = timed(measured_train, src, [*overrides, *extra], run_dir, args.threads, args.clock)
                rows = every[every["step"] >= 1]
                results[name].append(phase_lists(rows))
                peaks[name].append(peak)
                if validate:
                    val_s[name] += every["perf/val_time_s"].dropna().tolist()
                if name == "current" and "perf/update_tokens" in rows:
                    tokens_per_pass += rows["perf/update_tokens"].dropna().tolist()[1:]
                print(f"{name} run {rep + 1}/{args.repeats}: {seconds:.0f}s", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)], capture_output=True)

    def mean_of(name: str, phase: str) -> float:
        values = [v for run in results[name] for v in run[phase][1:]]  # steps 2..
        return statistics.fmean(values) if values else 0.0

    summary = {
        name: {phase: mean_of(name, phase) for phase in (*PHASES, "tokens_per_s", "response_length", "num_turns")} for name in results
    }
    ratios = {phase: summary["current"][phase] / summary["baseline"][phase] for phase in PHASES if summary["baseline"][phase] > 0}
    cur = summary["current"]

    probes.append(matmul_probe(shapes, args.threads))
    probe = {shape: max(p[shape] for p in probes) for shape in probes[0]}
    probe_update = statistics.fmean(list(probe.values())[:4])
    # Scoring + update per token position: the reference forward (2N), the forward (2N) and the backward
    # to the inputs (2N; the frozen weights get no gradient). LoRA's own matmuls (~3%) and attention's
    # score and value products are left out, so this is a lower bound on the work done.
    positions = statistics.fmean(tokens_per_pass) if tokens_per_pass else float("nan")
    update_gflops = 6 * n_lin * positions / max(cur["update"] + cur["scoring"], 1e-9) / 1e9
    decode_gflops = 2 * n_lin * cur["tokens_per_s"] / 1e9  # prefill of the contexts left out: a lower bound
    achieved = {
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
    validation = None
    if val_s["current"]:
        validation = {
            "seconds": statistics.fmean(val_s["current"]),
            "baseline_seconds": statistics.fmean(val_s["baseline"]) if val_s["baseline"] else None,
            "evaluations": len(val_s["current"]),
        }
        if validation["baseline_seconds"]:
            ratios["validation"] = validation["seconds"] / validation["baseline_seconds"]
            summary["baseline"]["validation"] = validation["baseline_seconds"]
            summary["current"]["validation"] = validation["seconds"]
    report = {
        "config": overrides,
        "baseline_commit": args.baseline,
        "repeats": args.repeats,
        "threads": args.threads,
        "clock": args.clock,
        "phases": [*PHASES, *(["validation"] if "validation" in ratios else [])],
        "phases_s": summary,
        "ratio_current_over_baseline": ratios,
        "validation": validation,
        "peak_rss_mib": {name: max(v) for name, v in peaks.items()},
        "update_positions_per_pass": positions,
        "matmul_probe_gflops": probe,
        "matmul_probes_gflops": probes,
        "achieved": achieved,
        "raw": results,
    }
    path = save_result("iteration", report, args.out)
    print("\n".join(iteration_lines(report)))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
