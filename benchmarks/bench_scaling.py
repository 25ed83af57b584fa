"""How an RL iteration's time and memory grow: P, G, the turn cap and the response budget doubled, one at a time.

    python -m benchmarks.bench_scaling [--steps 5] [--threads 1] [overrides ...]

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

Writes ``benchmarks/results/scaling.json`` (for ``benchmarks.bench_report``) and ``scaling.md``. Not a test: numbers go in
``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import PHASES, RESULTS, ROOT, iteration_overrides, measured_train, policy_dir, save_markdown, save_result

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


def size_of(overrides: list[str], key: str) -> int:
    """The last value ``overrides`` give ``key``, else the default."""
    return int(next((o.split("=", 1)[1] for o in reversed(overrides) if o.startswith(f"{key}=")), BASE_SIZES[key]))


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5, help="RL iterations per run (steps 2.. are averaged; the proxy runs at 5)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every row")
    args = ap.parse_args()
    base = [
        *iteration_overrides(args.steps, args.threads),
        f"model.path={policy_dir(['env=frozenlake'])}",  # the default build
        "diagnostics.first_turn_samples=0",
        "diagnostics.skip_samplers=[trajectory,trajectory_nocopy]",
        *args.overrides,
    ]
    rows = {"base": [], **{name: [f"{key}={2 * size_of(base, key)}" for key in keys] for name, keys in DOUBLED.items()}}
    table: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, extra) in enumerate(rows.items()):
            overrides = [*base, *extra]
            frame, peak = measured_train(ROOT / "src", overrides, Path(tmp) / f"row{k}", args.threads)
            p, g = size_of(overrides, "rollout.num_prompts"), size_of(overrides, "rollout.group_size")
            table[name] = summarise(frame, peak, p, g)
            print(f"{name} ({' '.join(extra) or 'as given'}): step {table[name]['step']:.2f} s, peak {peak:.0f} MiB", flush=True)
    ref = table["base"]
    save_result("scaling", {"config": base, "threads": args.threads, "rows": table}, args.out)
    cols = ["step", "rollout", "scoring", "update", "proxy_step"]
    lines = [
        f"# Scaling: one size doubled per row (FrozenLake, P={size_of(base, 'rollout.num_prompts')} x "
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
    save_markdown("scaling", lines, args.out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
