"""It learns: held-out success of the warm-started tiny policy before and after RL.

    python -m benchmarks.bench_learning [--envs frozenlake,sokoban,...]
                                        [--algorithms grpo,dr_grpo,dapo,ppo,grpo+gspo,grpo+cispo,grpo+sapo]
                                        [--seeds 0,1,2] [--steps 40] [--episodes 200] [--diagnostics]
                                        [--variant NAME] [overrides ...]

An entry ``preset+loss`` is the preset with ``algorithm.policy_loss=loss`` (and that loss's own
defaults: GSPO's clip 3e-4/4e-4, CISPO's cap 5, SAPO's gate), one row per loss.

Each (env, algorithm, seed) is an ordinary training run (run records under benchmarks/results/learning/);
its step-0 and final validation rows give success on the held-out maps (seeds 0..episodes-1) at
temperature 1.0 (the training temperature), 0.5 and greedy. Seeds are pooled per (env, algorithm); 95% Wilson
intervals. A row is "separated" when the after-interval lies above the before-interval at T=1.0. With
--diagnostics the runs log the MI proxy family (callbacks=default) and the row gives the trajectory MI
z-score (EMA) over the first and last 5 iterations; state grounding (logged every run) likewise. Results: benchmarks/results/learning.{json,md}
(one row per env, algorithm and variant: what the overrides change, e.g. --variant async-S1 rollout.engine=vllm
rollout.max_staleness=1; a rerun replaces only the rows it measures). Not a test: about 10-13 minutes per
FrozenLake run on one thread (P=8 x G=8 by default). Budget by iterations (--steps), not wall time.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd

from agentcollapse.analysis.markdown import md_table
from agentcollapse.analysis.stats import wilson_interval
from agentcollapse.run.checks import compose_run as compose_config
from benchmarks.common import RESULTS, Benchmark, Results, commit, csv_list, kept_rows, run, timed

LOSS_ROWS = ["grpo+gspo", "grpo+cispo", "grpo+sapo"]  # GRPO's advantages and KL under each other policy loss


def algorithm_overrides(entry: str) -> list[str]:
    """``grpo`` -> algorithm=grpo; ``grpo+gspo`` -> algorithm=grpo algorithm.policy_loss=gspo."""
    preset, _, loss = entry.partition("+")
    return [f"algorithm={preset}", *([f"algorithm.policy_loss={loss}"] if loss else [])]


TEMPERATURES = {"val/success_rate_t1": "T=1.0", "val/success_rate": "T=0.5", "val/success_rate_greedy": "greedy"}
TRACES = {"mi": "collapse_trajectory_sample/mi_zscore_ema", "grounding": "rollout/state_grounding"}
DEFAULT_VARIANT = "default"
WINDOW = 5  # iterations averaged at each end of a run for the diagnostics' first/last values


def row_key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["env"], row["algorithm"], row.get("variant", DEFAULT_VARIANT)


def end_means(rows: list[dict[str, str]], key: str) -> tuple[float, float]:
    """Mean of ``key`` over the first and last WINDOW training rows that have it (NaN when none has)."""
    values = [float(r[key]) for r in rows if r.get(key) not in (None, "") and not math.isnan(float(r[key]))]
    if not values:
        return math.nan, math.nan
    return sum(values[:WINDOW]) / len(values[:WINDOW]), sum(values[-WINDOW:]) / len(values[-WINDOW:])


def pooled(runs: list[dict[str, Any]], when: str, label: str) -> dict[str, Any]:
    k = sum(r[f"{when} {label}"] for r in runs)
    n = sum(r["episodes"] for r in runs)
    return {"rate": k / n, "ci": list(wilson_interval(k, n)), "k": k, "n": n}


def summarise(env: str, algo: str, variant: str, overrides: list[str], runs: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    row: dict[str, Any] = {
        "env": env,
        "algorithm": algo,
        "variant": variant,
        "overrides": overrides,
        "seeds": [r["seed"] for r in runs],
        "steps": steps,
        "commit": commit(),
    }
    for label in TEMPERATURES.values():
        row[f"before {label}"], row[f"after {label}"] = pooled(runs, "before", label), pooled(runs, "after", label)
    before, after = row["before T=1.0"], row["after T=1.0"]
    row["verdict"] = "separated" if after["ci"][0] > before["ci"][1] else "overlapping"
    row["minutes_per_run"] = sum(r["minutes"] for r in runs) / len(runs)
    for name in TRACES:  # NaN where the runs did not log it (MI without --diagnostics; grounding on envs without claims)
        row[f"{name}_first"] = sum(r[f"{name}_first"] for r in runs) / len(runs)
        row[f"{name}_last"] = sum(r[f"{name}_last"] for r in runs) / len(runs)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    def ci(cell: dict[str, Any]) -> str:
        return f"{cell['rate']:.3f} [{cell['ci'][0]:.2f}, {cell['ci'][1]:.2f}]"

    def ends(r: dict[str, Any], name: str) -> str:
        first, last = r.get(f"{name}_first", math.nan), r.get(f"{name}_last", math.nan)
        return "not logged" if math.isnan(first) else f"{first:.2f} -> {last:.2f}"

    frame = pd.DataFrame(
        [
            {
                "env": r["env"],
                "algorithm": r["algorithm"],
                "variant": r.get("variant", DEFAULT_VARIANT),
                "seeds x maps": f"{len(r['seeds'])} x {r['before T=1.0']['n'] // len(r['seeds'])}",
                "iterations": r["steps"],
                "T=1 before": ci(r["before T=1.0"]),
                "T=1 after": ci(r["after T=1.0"]),
                "T=1 reading": r["verdict"],
                "T=0.5 before -> after": f"{r['before T=0.5']['rate']:.3f} -> {r['after T=0.5']['rate']:.3f}",
                "MI z (EMA), first -> last 5": ends(r, "mi"),
                "grounding, first -> last 5": ends(r, "grounding"),
                "min / run": f"{r['minutes_per_run']:.0f}",
            }
            for r in sorted(rows, key=row_key)
        ]
    )
    return (
        "# It learns (`make bench-learning`)\n\n"
        "Held-out success before RL (the warm start, step 0) and after it, seeds pooled, Wilson 95% intervals; "
        '"separated" when the after-interval lies above the before-interval at T=1 (the rollouts\' temperature).\n\n'
        + md_table(frame)
        + "\n"
    )


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--envs", type=csv_list, default=["frozenlake"], help="comma-separated envs, one row each")
    ap.add_argument(
        "--algorithms", type=csv_list, default=["grpo", "dr_grpo", "dapo", "ppo", *LOSS_ROWS], help="presets; preset+loss for a policy loss"
    )
    ap.add_argument("--seeds", type=lambda t: [int(x) for x in csv_list(t)], default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=40, help="RL iterations per run")
    ap.add_argument("--episodes", type=int, default=200, help="held-out maps evaluated before and after")
    ap.add_argument("--diagnostics", action="store_true", help="log the MI proxy family too (callbacks=default; slower)")
    ap.add_argument("--out", default=str(RESULTS / "learning"), help="where the runs' records go")
    ap.add_argument(
        "--variant", default=DEFAULT_VARIANT, help="name of what the overrides change (a row of its own); 'default' = as shipped"
    )


def main(args: argparse.Namespace, save: Results) -> None:
    from agentcollapse.run import train as run_training

    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = save.out / "learning.json"
    measured: list[dict[str, Any]] = []
    for env in args.envs:
        for algo in args.algorithms:
            runs: list[dict[str, Any]] = []
            for seed in args.seeds:
                run_dir = Path(args.out) / stamp / f"{env}-{algo}-{args.variant}-seed{seed}"
                cfg = compose_config(
                    [
                        f"env={env}",
                        *algorithm_overrides(algo),
                        f"seed={seed}",
                        f"trainer.max_steps={args.steps}",
                        f"trainer.val_every={args.steps}",
                        f"trainer.val_episodes={args.episodes}",
                        "trainer.val_temperatures=[1.0,0.5,0.0]",
                        "trainer.checkpoint_every=0",
                        f"callbacks={'default' if args.diagnostics else 'filter_only'}",
                        "logger=csv",
                        "trainer.progress_bar=false",
                        "rollout.group_size=8",
                        *args.overrides,
                    ]
                )
                cfg.run_dir = str(run_dir)
                seconds, summary = timed(run_training, cfg)
                metrics = list(csv.DictReader((run_dir / "metrics.csv").open()))
                before = next(r for r in metrics if int(float(r["step"])) == 0)
                after = [r for r in metrics if r.get("val/success_rate_t1")][-1]
                run: dict[str, Any] = {"seed": seed, "episodes": args.episodes, "minutes": seconds / 60}
                line = [f"{env:10s} {algo:8s} seed={seed} {summary.get('status')} in {seconds / 60:.1f} min:"]
                for key, label in TEMPERATURES.items():
                    b, a = float(before[key]), float(after[key])
                    run[f"before {label}"], run[f"after {label}"] = round(b * args.episodes), round(a * args.episodes)
                    line.append(f"{label} {b:.3f}->{a:.3f}")
                for name, key in TRACES.items():
                    run[f"{name}_first"], run[f"{name}_last"] = end_means(metrics, key)
                runs.append(run)
                print(" ".join(line), flush=True)
            row = summarise(env, algo, args.variant, args.overrides, runs, args.steps)
            measured.append(row)
            # the file as it is now: another bench-learning (another variant) may have saved rows since this one began
            rows = kept_rows(path, {row_key(r) for r in measured}, row_key) + measured
            print(
                f"{env:10s} {algo:8s} {args.variant} T=1.0 {row['before T=1.0']['rate']:.3f} -> {row['after T=1.0']['rate']:.3f} ({row['verdict']})",
                flush=True,
            )
            save.json({"episodes": args.episodes, "rows": rows})  # after every row: a long env keeps what it measured
            save.markdown([table(rows).removesuffix("\n")])


BENCHMARK = Benchmark("learning", __doc__, main, flags, out=None, overrides="Hydra overrides applied to every run")

if __name__ == "__main__":
    run(BENCHMARK)
