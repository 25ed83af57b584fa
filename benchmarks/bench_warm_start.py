"""A pretrained model's warm start: held-out success and format-valid rate before and after, and its build time.

    python -m benchmarks.bench_warm_start [--episodes 64] [--envs frozenlake,sokoban] [key=value overrides ...]

For each env: the untuned model (``model.warm_start.enabled=false``; ``--untuned-episodes 0`` skips it)
and the warm-started one (built here unless cached, timed) each play the held-out maps at T=1.0 and
T=0.5, one trajectory per map as a run's evaluation draws them. Any env with a warm start works
(single- and multi-turn). Defaults to ``model=smollm2-135m``. Saves ``benchmarks/results/warm_start.json``
for ``benchmarks.bench_report``, keeping the rows (env, warm start, temperature) not measured in this run (each row says its
commit, date and overrides), so envs can be measured one at a time. Not a test: numbers go in issue notes.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentcollapse.analysis.stats import wilson_interval
from agentcollapse.models.policy import resolve_model_dir
from agentcollapse.rollout.runner import rollout_metrics
from agentcollapse.run.jobs import config_and_policy, held_out_rollout
from benchmarks.common import Benchmark, Results, commit, csv_list, floats, kept_rows, run, timed, with_model


def build_seconds(cfg: Any) -> float | None:
    """The warm start's build time as its cache recorded it (the build may predate this run)."""
    meta = resolve_model_dir(cfg.model, cfg.env, cfg.cache_dir) / "meta.json"
    return json.loads(meta.read_text()).get("build_seconds") if meta.exists() else None


def row_key(row: dict[str, Any]) -> tuple[str, bool, float]:
    """A row's identity: measuring one temperature of an env again keeps its other rows (``common.kept_rows``)."""
    return row["env"], row["warm_start"], row["temperature"]


def measured_rows(envs: list[str], temperatures: list[float], episodes: int, untuned_episodes: int) -> set[tuple[str, bool, float]]:
    """The (env, warm-started, temperature) rows a run with these arguments measures."""
    arms = [warm for warm, n in ((False, untuned_episodes), (True, episodes)) if n >= 1]
    return {(env, warm, temp) for env in envs for warm in arms for temp in temperatures}


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument(
        "--untuned-episodes", type=int, default=16, help="held-out maps for the untuned model (it decodes every turn to the budget: slow)"
    )
    ap.add_argument("--envs", type=csv_list, default=["frozenlake", "sokoban"], help="comma-separated")
    ap.add_argument("--temperatures", type=floats, default=[1.0, 0.5], help="comma-separated; 0 is greedy")


def main(args: argparse.Namespace, save: Results) -> None:
    overrides = with_model(args.overrides)
    rows = kept_rows(
        save.out / "warm_start.json", measured_rows(args.envs, args.temperatures, args.episodes, args.untuned_episodes), row_key
    )
    stamp = {"commit": commit(), "model_overrides": overrides}
    for env in args.envs:
        for warm in (False, True):
            n = args.episodes if warm else args.untuned_episodes
            if n < 1:
                continue
            ready_s, (cfg, policy) = timed(config_and_policy, [*overrides, f"env={env}", f"model.warm_start.enabled={str(warm).lower()}"])
            for temp in args.temperatures:
                eval_s, batch = timed(held_out_rollout, policy, cfg.env, n, temp, cfg.rollout.max_new_tokens)
                metrics = rollout_metrics(batch)
                k = int(batch.successes().sum())
                lo, hi = wilson_interval(k, n)
                row = {
                    **stamp,
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
                    "build_s": build_seconds(cfg) if warm else None,
                    "warm_start_config": {**vars(cfg.model.warm_start)} if warm else None,
                    "max_new_tokens": cfg.rollout.max_new_tokens,
                }
                rows.append(row)
                print(
                    f"{env:10s} {'warm-started' if warm else 'untuned':12s} T={temp:<4} success {k / n:.3f} "
                    f"[{lo:.3f}, {hi:.3f}]  format {row['format_valid_rate']:.2f}  grounding {row['state_grounding']:.2f}  "
                    f"response {row['response_tokens']:.0f} tok  ({row['eval_s']:.0f}s; policy ready in {ready_s:.0f}s)",
                    flush=True,
                )
                # after every row: a long multi-turn env (an hour or more on 2 cores) keeps what it measured if stopped
                save.json({"model_overrides": overrides, "episodes": args.episodes, "rows": rows})


BENCHMARK = Benchmark("warm_start", __doc__, main, flags, overrides="Hydra overrides (default model=smollm2-135m)")

if __name__ == "__main__":
    run(BENCHMARK)
