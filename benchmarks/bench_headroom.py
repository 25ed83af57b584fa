"""Headroom: does RL have something to learn from on each env, for each policy? (issue 61)

    python -m benchmarks.bench_headroom [--envs frozenlake,sokoban,...] [--policies tiny,smollm2-135m] [--episodes 64]
        [--variant NAME] [overrides ...]

For each policy and env (a cell): held-out success at T=1 (the rollouts' temperature) and T=0.5, with Wilson
intervals, and the format-valid rate, one trajectory per held-out map as a run's evaluation draws them; then
iteration 1's training batch at P=8 x G=8 (what ``make mi-check`` reads): Std(RV)/Mean(RV), the share of
groups with non-zero reward variance (with a Wilson interval over the 8 groups) and the share whose success
varies (the groups a success-driven advantage can learn from). The goal of a cell: T=1 success in [0.1, 0.8]
and at least half the groups with reward variance; its reading says which part fails.

Builds each policy it needs (the tiny policy's warm start ~5 min on 2 cores, SmolLM2's ~15 min a multi-turn
env) unless cached. Saves ``benchmarks/results/headroom.json`` and ``.md`` after every cell, keeping the cells
it does not measure again, so envs can be measured one at a time. ``--variant NAME`` with overrides measures a
lever (an env knob, a warm-start recipe) as a row of its own, shown under "Levers tried" beside the default's.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pandas as pd

from agentcollapse.analysis.markdown import md_table
from agentcollapse.analysis.stats import wilson_interval
from agentcollapse.diagnostics.collapse import reward_variance_stats
from agentcollapse.rollout.runner import rollout_metrics
from agentcollapse.rollout.vllm_engine import VLLMEngine, engine_settings
from agentcollapse.run.jobs import config_and_policy, held_out_rollout, training_batch
from benchmarks.common import Benchmark, Results, commit, csv_list, kept_rows, run, timed

SUCCESS_RANGE = (0.1, 0.8)  # T=1 held-out success with room both ways (the paper's starting points: 10-70%)
MIN_VARIED_GROUPS = 0.5  # at least half the groups carry reward variance: the filter has something to rank
ALL_ENVS = ["frozenlake", "sokoban", "countdown", "math", "webshop", "searchqa", "deepcoder"]


def headroom_reading(success_t1: float, varied_groups: float) -> str:
    """'meets the goal', or what keeps the cell from it."""
    lo, hi = SUCCESS_RANGE
    problems = []
    if success_t1 < lo:
        problems.append(f"T=1 success {success_t1:.2f} below {lo}")
    elif success_t1 > hi:
        problems.append(f"T=1 success {success_t1:.2f} above {hi}: little room")
    if varied_groups < MIN_VARIED_GROUPS:
        problems.append(f"{varied_groups:.0%} of groups with reward variance, under {MIN_VARIED_GROUPS:.0%}")
    return "; ".join(problems) or "meets the goal"


def success_varied_groups(successes: np.ndarray) -> float:
    """Of a [P, G] batch's successes: the share of groups whose success varies (the groups with reward variance
    are the collapse stats' count, ``reward_variance_stats``)."""
    return float((successes.min(axis=1) != successes.max(axis=1)).mean())


DEFAULT_VARIANT = "default"  # the env's and policy's shipped configuration


def cell_key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["policy"], row["env"], row.get("variant", DEFAULT_VARIANT)


def measure_cell(policy_name: str, env: str, episodes: int, overrides: list[str]) -> dict[str, Any]:
    ready_s, (cfg, policy) = timed(
        config_and_policy, [f"model={policy_name}", f"env={env}", "rollout.num_prompts=8", "rollout.group_size=8", *overrides]
    )
    row: dict[str, Any] = {"policy": policy_name, "env": env, "n": episodes, "policy_ready_s": ready_s, "engine": cfg.rollout.engine}
    # rollout.engine=vllm decodes as a run with it does (SmolLM2 ~6x faster than generate on CPU)
    engine = VLLMEngine(policy.source_dir, engine_settings(cfg.rollout.vllm), seed=cfg.seed) if cfg.rollout.engine == "vllm" else None
    try:
        measure_batches(row, policy, cfg, episodes, engine)
    finally:
        if engine is not None:
            engine.close()
    return row


def measure_batches(row: dict[str, Any], policy: Any, cfg: Any, episodes: int, engine: Any) -> None:
    """Fill ``row`` with the held-out successes at both temperatures and iteration 1's reward-variance counts."""
    for temp, tag in ((1.0, "t1"), (0.5, "t05")):
        eval_s, batch = timed(held_out_rollout, policy, cfg.env, episodes, temp, cfg.rollout.max_new_tokens, engine=engine)
        k = int(batch.successes().sum())
        row[f"success_{tag}"] = k / episodes
        row[f"success_{tag}_ci"] = list(wilson_interval(k, episodes))
        row[f"format_{tag}"] = rollout_metrics(batch)["rollout/format_valid_rate"]
        row[f"eval_{tag}_s"] = eval_s
    batch_s, (batch, _) = timed(training_batch, policy, cfg, engine=engine)
    stats = reward_variance_stats(batch)
    varied = 1.0 - stats["collapse/zero_rv_group_frac"]
    row |= {
        "rv_std_over_mean": stats["collapse/rv_std_over_mean"],
        "varied_groups": varied,
        "varied_groups_ci": list(wilson_interval(round(varied * batch.num_prompts), batch.num_prompts)),
        "success_varied_groups": success_varied_groups(batch.successes()),
        "batch_success": float(batch.successes().mean()),
        "batch_s": batch_s,
        "reading": headroom_reading(row["success_t1"], varied),
    }


def table(rows: list[dict[str, Any]]) -> str:
    def ci(v: float, bounds: list[float]) -> str:
        return f"{v:.3f} [{bounds[0]:.2f}, {bounds[1]:.2f}]"

    def frame(cells: list[dict[str, Any]], lever: bool) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "policy": r["policy"],
                    "env": r["env"],
                    **({"variant": r["variant"], "overrides": " ".join(r.get("overrides", []))} if lever else {}),
                    "T=1 success": ci(r["success_t1"], r["success_t1_ci"]),
                    "T=0.5 success": ci(r["success_t05"], r["success_t05_ci"]),
                    "format (T=1)": f"{r['format_t1']:.2f}",
                    "Std(RV)/Mean(RV)": f"{r['rv_std_over_mean']:.2f}",
                    "groups with RV > 0": ci(r["varied_groups"], r["varied_groups_ci"]),
                    "groups whose success varies": f"{r['success_varied_groups']:.2f}",
                    "reading": r["reading"],
                }
                for r in sorted(cells, key=cell_key)
            ]
        )

    shipped = [r for r in rows if r.get("variant", DEFAULT_VARIANT) == DEFAULT_VARIANT]
    levers = [r for r in rows if r.get("variant", DEFAULT_VARIANT) != DEFAULT_VARIANT]
    text = (
        "# Headroom per env and policy (`make bench-headroom`)\n\n"
        f"Held-out maps per cell: T=1 and T=0.5, Wilson 95% intervals; iteration 1's batch at P=8 x G=8. Goal: T=1 success in "
        f"[{SUCCESS_RANGE[0]}, {SUCCESS_RANGE[1]}] and at least {MIN_VARIED_GROUPS:.0%} of groups with reward variance.\n\n"
        + md_table(frame(shipped, lever=False))
    )
    if levers:
        text += "\n\n## Levers tried (`--variant NAME overrides...`)\n\n" + md_table(frame(levers, lever=True))
    return text


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--envs", type=csv_list, default=ALL_ENVS, help="comma-separated (default: all seven)")
    ap.add_argument("--policies", type=csv_list, default=["tiny", "smollm2-135m"], help="comma-separated model presets")
    ap.add_argument("--episodes", type=int, default=64, help="held-out maps per temperature")
    ap.add_argument(
        "--variant", default=DEFAULT_VARIANT, help="name of the lever the overrides apply (a row of its own); 'default' = as shipped"
    )


def main(args: argparse.Namespace, save: Results) -> None:
    path = save.out / "headroom.json"
    rows = kept_rows(path, {(p, e, args.variant) for p in args.policies for e in args.envs}, cell_key)
    for policy_name in args.policies:
        for env in args.envs:
            row = {
                "commit": commit(),
                "variant": args.variant,
                "overrides": args.overrides,
                **measure_cell(policy_name, env, args.episodes, args.overrides),
            }
            rows.append(row)
            print(
                f"{policy_name:13s} {env:10s} {args.variant:12s} T=1 {row['success_t1']:.3f}  T=0.5 {row['success_t05']:.3f}  "
                f"RV>0 {row['varied_groups']:.2f}  Std/Mean {row['rv_std_over_mean']:.2f}: {row['reading']}",
                flush=True,
            )
            save.json({"episodes": args.episodes, "rows": rows})  # after every cell: a long env keeps what it measured
            save.markdown([table(rows).removesuffix("\n")])


BENCHMARK = Benchmark("headroom", __doc__, main, flags, overrides="Hydra overrides for every cell")

if __name__ == "__main__":
    run(BENCHMARK)
