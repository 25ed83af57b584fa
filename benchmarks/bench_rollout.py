"""Rollout throughput and warm-start success of the default policy on held-out maps.

    python -m benchmarks.bench_rollout [--episodes 200] [--slips 0,0.1] [key=value overrides ...]

Prints generated tokens/s for one P x G training batch, the rollout with the KV cache kept across turns
against re-encoding every context (``rollout.reuse_kv``; alternating, ``--repeats`` pairs, same tokens
checked), and held-out success (T=1.0, 0.5, greedy) with 95% Wilson intervals, with and without slip.
Saves ``benchmarks/results/rollout.json`` for ``benchmarks.bench_report``. Not a test: numbers go in issue notes.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from agentcollapse.analysis.stats import wilson_interval
from agentcollapse.run.jobs import config_and_policy, held_out_success, training_batch
from benchmarks.common import Benchmark, Results, alternating, floats, run


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--slips", type=floats, default=[0.0, 0.1], help="comma-separated, e.g. 0,0.1")
    ap.add_argument("--temperatures", type=floats, default=[1.0, 0.5, 0.0], help="comma-separated; 0 is greedy")


def main(args: argparse.Namespace, save: Results) -> None:
    cfg, policy = config_and_policy(args.overrides)
    batch, perf = training_batch(policy, cfg)
    print(
        f"rollout P={cfg.rollout.num_prompts} x G={cfg.rollout.group_size}: {perf['perf/rollout_time_s']:.2f}s, "
        f"{perf['perf/rollout_tokens_per_s']:.0f} generated tokens/s"
    )
    times: dict[bool, list[float]] = {False: [], True: []}
    tokens: dict[bool, list] = {False: [], True: []}
    for i, reuse in alternating((False, True), args.repeats):
        policy.reuse_kv_across_turns = reuse
        b, p = training_batch(policy, cfg, iteration=i)
        times[reuse].append(p["perf/rollout_time_s"])
        tokens[reuse].append([[t.response_ids for t in traj.turns] for traj in b.trajectories])
    policy.reuse_kv_across_turns = cfg.rollout.reuse_kv
    record = {
        "P": cfg.rollout.num_prompts,
        "G": cfg.rollout.group_size,
        "env": cfg.env.name,
        "rollout_s": perf["perf/rollout_time_s"],
        "tokens_per_s": perf["perf/rollout_tokens_per_s"],
        "kv_reuse": None,
        "success": [],
    }
    if args.repeats:
        full, reused = statistics.median(times[False]), statistics.median(times[True])
        print(
            f"KV cache across turns: {reused:.2f}s vs re-encoding {full:.2f}s (median of {args.repeats}), "
            f"ratio {reused / full:.2f}; same tokens: {tokens[True] == tokens[False]}"
        )
        kv = {
            "reused_s": reused,
            "full_s": full,
            "ratio": reused / full,
            "pairs": args.repeats,
            "same_tokens": tokens[True] == tokens[False],
        }
        record["kv_reuse"] = kv
    for slip in args.slips if cfg.env.name == "frozenlake" else [None]:
        env_cfg = dataclasses.replace(cfg.env, kwargs=dict(cfg.env.kwargs) | ({"slip": slip} if slip is not None else {}))
        for temp in args.temperatures:
            k, n = held_out_success(policy, env_cfg, args.episodes, temp, cfg.rollout.max_new_tokens)
            lo, hi = wilson_interval(k, n)
            label = f"slip={slip}" if slip is not None else cfg.env.name
            print(f"warm-start success {label:10s} T={temp:<4}: {k / n:.3f}  95% CI [{lo:.3f}, {hi:.3f}]  (n={n})")
            record["success"].append({"label": label, "temperature": temp, "rate": k / n, "ci": [lo, hi], "n": n})
    save.json(record)


BENCHMARK = Benchmark(
    "rollout",
    __doc__,
    main,
    flags,
    repeats=3,
    repeats_help="alternating pairs of the KV-reuse comparison (0: skip it)",
    overrides="Hydra overrides, e.g. env=sokoban model.warm_start.steps=300",
)

if __name__ == "__main__":
    run(BENCHMARK)
