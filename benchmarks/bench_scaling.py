"""How an RL iteration's time and memory grow: P, G, the turn cap and the response budget doubled, one at a time.

    python -m benchmarks.bench_scaling [--model tiny|smollm2] [--steps 5] [--threads 1] [overrides ...]

Each row trains FrozenLake (P=8 x G=8, MI proxy at step 1 and every 5 steps, no validation) through the
CLI with one size doubled. Every row loads the same warm-started policy (``model.path`` of the default
build, which ``make base-model`` makes, or this script first), so the turn-cap row does not build a new one. Per phase, the
mean over steps 2.. (step 1 pays one-off costs); the MI proxy's cost is that of step 5, its first
step after the one-off one. Peak memory is the run's peak resident set (``wait4``), the whole process.

The doubled caps are caps: the policy decides how many turns and tokens it uses, so the table gives the
realised turns and response lengths beside them. The proxy scores every first-turn trace against every
prompt of the batch (``first_turn_samples=0``; the trajectory samplers, which draw a fixed number of
pairs, are off), so with the prompts' caches kept its cost should follow P*G*P*|Z|; the table puts the
measured ratio to the base row beside that model's ratio (|Z|: the realised response length).

``--model smollm2`` is the same table for a real model (SmolLM2-135M warm-started on Countdown, as
``model=smollm2-135m`` builds it, decoding with vLLM, 2 threads): base P=2 x G=4 with a 64-token budget,
the proxy at steps 1 and 3 of 3 (``compute_freq=2``), P, G and the budget doubled (one turn: no turn cap).
About 15 minutes on 2 cores.

Writes ``benchmarks/results/scaling.json`` (``scaling_smollm2.json`` for SmolLM2; both for
``benchmarks.bench_report``) and the ``.md`` beside it. Not a test: numbers go in ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import (
    PHASES,
    ROOT,
    Benchmark,
    Results,
    iteration_overrides,
    measured_train,
    policy_dir,
    run,
    timed_run_overrides,
)

# Each row doubles one size of the base config (the defaults below, or the command line's).
DOUBLED = {
    "P x2": ("rollout.num_prompts",),
    "G x2": ("rollout.group_size",),
    "turn cap x2": ("env.kwargs.max_turns", "env.kwargs.max_actions"),
    "response budget x2": ("rollout.max_new_tokens",),
}
BASE_SIZES = {
    "rollout.num_prompts": 8,
    "rollout.group_size": 8,
    "env.kwargs.max_turns": 5,
    "env.kwargs.max_actions": 10,
    "rollout.max_new_tokens": 48,
}
# --model smollm2: a real model at sizes an iteration of which takes seconds to a minute here
SMOLLM2_SIZES = {"rollout.num_prompts": 2, "rollout.group_size": 4, "rollout.max_new_tokens": 64}


def base_overrides(model: str, steps: int, threads: int) -> list[str]:
    """Every row's config before its doubling: the tiny policy's benchmarked iteration, or SmolLM2's."""
    if model == "tiny":
        return [
            *iteration_overrides(steps, threads),
            f"model.path={policy_dir(['env=frozenlake'])}",  # the default build
            "diagnostics.first_turn_samples=0",
            "diagnostics.skip_samplers=[trajectory,trajectory_nocopy]",
        ]
    return [
        "model=smollm2-135m",  # its own warm start on Countdown, cached once built
        "env=countdown",
        "rollout.engine=vllm",
        *(f"{k}={v}" for k, v in SMOLLM2_SIZES.items()),
        "diagnostics.compute_freq=2",
        "diagnostics.first_turn_samples=0",
        "diagnostics.skip_samplers=[trajectory,trajectory_nocopy]",
        *timed_run_overrides(steps, threads),
    ]


def size_of(overrides: list[str], key: str) -> int:
    """The last value ``overrides`` give ``key``, else the default."""
    return int(next((o.split("=", 1)[1] for o in reversed(overrides) if o.startswith(f"{key}=")), BASE_SIZES.get(key, 0)))


def summarise(rows: Any, peak_mib: float, num_prompts: int, group_size: int) -> dict[str, float]:
    later = rows[rows["step"] >= 2]
    out = {name: float(later[col].fillna(0.0).mean()) if col in later else 0.0 for name, col in PHASES.items() if name != "proxy"}
    proxy = rows[(rows["step"] >= 2) & rows["perf/collapse_time_s"].notna()] if "perf/collapse_time_s" in rows else rows.iloc[:0]
    out["proxy_step"] = float(proxy["perf/collapse_time_s"].iloc[0]) if len(proxy) else float("nan")
    out["turns"] = float(later["rollout/num_turns"].mean())
    out["response_tokens"] = float(later["rollout/response_length"].mean())
    out["peak_mib"] = peak_mib
    out["proxy_cost_model"] = num_prompts * group_size * num_prompts * out["response_tokens"]  # P*G*P*|Z|
    return out


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--model", default="tiny", choices=["tiny", "smollm2"], help="the tiny policy on FrozenLake, or SmolLM2-135M on Countdown"
    )
    ap.add_argument("--steps", type=int, default=None, help="RL iterations per run, steps 2.. averaged (default: 5 tiny, 3 smollm2)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: 1 tiny, 2 smollm2)")


def main(args: argparse.Namespace, save: Results) -> None:
    tiny = args.model == "tiny"
    args.steps = args.steps or (5 if tiny else 3)
    args.threads = args.threads or (1 if tiny else 2)
    base = [*base_overrides(args.model, args.steps, args.threads), *args.overrides]
    doubled = {name: keys for name, keys in DOUBLED.items() if tiny or name != "turn cap x2"}  # Countdown has one turn
    rows = {"base": [], **{name: [f"{key}={2 * size_of(base, key)}" for key in keys] for name, keys in doubled.items()}}
    table: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, extra) in enumerate(rows.items()):
            overrides = [*base, *extra]
            frame, peak = measured_train(ROOT / "src", overrides, Path(tmp) / f"row{k}", args.threads)
            p, g = size_of(overrides, "rollout.num_prompts"), size_of(overrides, "rollout.group_size")
            table[name] = summarise(frame, peak, p, g)
            print(f"{name} ({' '.join(extra) or 'as given'}): step {table[name]['step']:.2f} s, peak {peak:.0f} MiB", flush=True)
    ref = table["base"]
    result = "scaling" if tiny else "scaling_smollm2"
    save.json({"model": args.model, "config": base, "threads": args.threads, "rows": table}, name=result)
    cols = ["step", "rollout", "scoring", "update", "proxy_step"]
    lines = [
        f"# Scaling: one size doubled per row ({'tiny policy, FrozenLake' if tiny else 'SmolLM2-135M, Countdown'}, P={size_of(base, 'rollout.num_prompts')} x "
        f"G={size_of(base, 'rollout.group_size')} at base, {args.threads} thread(s), steps 2..{args.steps})",
        "",
        "| row | turns | response tokens | "
        + " | ".join(f"{c} (s)" for c in cols)
        + " | step / base | peak MiB | proxy / base | P*G*P*Z / base |",
        "|---|---|---|" + "---|" * len(cols) + "---|---|---|---|",
    ]
    for name, r in table.items():
        lines.append(
            f"| {name} | {r['turns']:.2f} | {r['response_tokens']:.1f} | "
            + " | ".join(f"{r[c]:.2f}" for c in cols)
            + f" | {r['step'] / ref['step']:.2f} | {r['peak_mib']:.0f} | {r['proxy_step'] / ref['proxy_step']:.2f}"
            + f" | {r['proxy_cost_model'] / ref['proxy_cost_model']:.2f} |"
        )
    save.markdown(lines, name=result, echo=True)


BENCHMARK = Benchmark("scaling", __doc__, main, flags, overrides="extra Hydra overrides for every row")

if __name__ == "__main__":
    run(BENCHMARK)
