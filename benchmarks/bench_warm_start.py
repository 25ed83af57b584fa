"""A pretrained model's warm start: held-out success and format-valid rate before and after, and its build time.

    python -m benchmarks.bench_warm_start [--episodes 64] [--envs frozenlake,sokoban] [key=value overrides ...]

For each env: the untuned model (``model.warm_start.enabled=false``) and the warm-started one (built
here unless cached, timed) each play the held-out maps at T=1.0 and T=0.5, one trajectory per map as
a run's evaluation draws them. Defaults to ``model=smollm2-135m``. Saves
``benchmarks/results/warm_start.json`` for ``benchmarks.bench_report``. Not a test: numbers go in issue notes.
"""

from __future__ import annotations

import argparse

from agentcollapse.analysis.stats import wilson_interval
from agentcollapse.rollout.runner import rollout_metrics
from agentcollapse.run.jobs import config_and_policy, held_out_rollout
from benchmarks.common import csv_list, floats, save_result, timed, with_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument(
        "--untuned-episodes", type=int, default=16, help="held-out maps for the untuned model (it decodes every turn to the budget: slow)"
    )
    ap.add_argument("--envs", type=csv_list, default=["frozenlake", "sokoban"], help="comma-separated")
    ap.add_argument("--temperatures", type=floats, default=[1.0, 0.5], help="comma-separated; 0 is greedy")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (default model=smollm2-135m)")
    args = ap.parse_args()
    overrides = with_model(args.overrides)
    rows = []
    for env in args.envs:
        for warm in (False, True):
            ready_s, (cfg, policy) = timed(config_and_policy, [*overrides, f"env={env}", f"model.warm_start.enabled={str(warm).lower()}"])
            n = args.episodes if warm else args.untuned_episodes
            for temp in args.temperatures:
                eval_s, batch = timed(held_out_rollout, policy, cfg.env.name, dict(cfg.env.kwargs), n, temp, cfg.rollout.max_new_tokens)
                metrics = rollout_metrics(batch)
                k = int(batch.successes().sum())
                lo, hi = wilson_interval(k, n)
                row = {
                    "env": env,
                    "warm_start": warm,
                    "temperature": temp,
                    "success": k / n,
                    "success_ci": [lo, hi],
                    "format_valid_rate": metrics["rollout/format_valid_rate"],
                    "state_grounding": metrics["rollout/state_grounding"],
                    "response_tokens": metrics["rollout/response_length"],
                    "n": n,
                    "eval_s": eval_s,
                    "policy_ready_s": ready_s,
                }
                rows.append(row)
                print(
                    f"{env:10s} {'warm-started' if warm else 'untuned':12s} T={temp:<4} success {k / n:.3f} "
                    f"[{lo:.3f}, {hi:.3f}]  format {row['format_valid_rate']:.2f}  grounding {row['state_grounding']:.2f}  "
                    f"response {row['response_tokens']:.0f} tok  ({row['eval_s']:.0f}s; policy ready in {ready_s:.0f}s)",
                    flush=True,
                )
    save_result("warm_start", {"model_overrides": overrides, "episodes": args.episodes, "rows": rows})


if __name__ == "__main__":
    main()
