"""What each context mode (``rollout.context``) costs per iteration, and what the MI proxy reads under it,
on one policy.

    python -m benchmarks.bench_context [--modes full,window:1,single_turn] [--iterations 3] [key=value overrides ...]

Loads the composed config's policy once and snapshots its LoRA weights. For each iteration ``i`` and
each mode in turn (the order reversed every other iteration, so machine noise hits every mode alike)
it restores the snapshot, rolls out iteration ``i``'s training batch in that mode (the same maps and
random streams in every mode), scores the MI proxy on it (every sampler, fresh EMA state, the run's
diagnostics settings) and runs one update on every group. So each mode's proxy reading is of the same
weights on the same maps, and the modes differ only in what the contexts show. Prints, per mode, the
median rollout / proxy / update seconds, the training sequences and forwarded token positions per
iteration, and the mean proxy readings; saves ``benchmarks/results/context.json``. Not a test.

Measured on FrozenLake and Sokoban (P=8 x G=8, 3 iterations, one thread, CPU seconds with
``benchmarks/cpu_clock`` on the PYTHONPATH): docs/results.md section 11.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from benchmarks.common import Benchmark, Results, csv_list, run, timed, turn_order

READINGS = (
    "mi_estimate",
    "mi_seq_estimate",
    "retrieval_accuracy",
    "retrieval_above_chance",
    "matched_log_prob_mean",
    "marginal_log_prob_mean",
)


def mode_overrides(mode: str) -> list[str]:
    """``window:3`` -> rollout.context=window rollout.context_turns=3; ``full`` / ``single_turn`` as they are."""
    name, _, turns = mode.partition(":")
    return [f"rollout.context={name}", *([f"rollout.context_turns={turns}"] if turns else [])]


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--modes", type=csv_list, default=["full", "window:1", "single_turn"], help="modes, window:k for a window")
    ap.add_argument("--iterations", type=int, default=3, help="training batches measured per mode (median / mean reported)")
    ap.add_argument("--name", default="context", help="result name (benchmarks/results/<name>.json)")


def main(args: argparse.Namespace, save: Results) -> None:
    import logging
    import warnings

    import numpy as np

    from agentcollapse.diagnostics.collapse import collapse_metrics
    from agentcollapse.lightning import AgentRLModule, Selection
    from agentcollapse.rollout.sequences import build_sequences
    from agentcollapse.run.checks import compose_run as compose
    from agentcollapse.run.jobs import config_and_policy
    from agentcollapse.run.trainer import attach_to_trainer

    warnings.filterwarnings("ignore")
    logging.disable(logging.INFO)
    _, policy = config_and_policy(args.overrides)
    start = {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}
    cfgs = {m: compose([*args.overrides, *mode_overrides(m)]) for m in args.modes}
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in args.modes}
    for it in range(args.iterations):
        for mode in turn_order(args.modes, it, swap=True):
            with __import__("torch").no_grad():
                for n, p in policy.model.named_parameters():
                    if n in start:
                        p.copy_(start[n])
            cfg = cfgs[mode]
            module = attach_to_trainer(AgentRLModule(cfg, policy))
            rollout_s, (batch, _) = timed(module.collect, it)
            d = cfg.diagnostics
            proxy_s, proxy = timed(
                collapse_metrics,
                policy.decoding_model(),
                policy.tokenizer,
                batch,
                {},
                np.random.default_rng(cfg.seed + it),
                d.score_batch_size,
                d.trajectory_samples or None,
                first_turn_samples=d.first_turn_samples or None,
                trajectory_replace=d.trajectory_replace,
            )
            seqs = build_sequences(batch)
            update_s, _ = timed(module.update, batch, Selection(np.arange(batch.num_prompts), None, 1.0))
            turns = [t for traj in batch.trajectories for t in traj.turns]
            row = {
                "rollout_s": rollout_s,
                "proxy_s": proxy_s,
                "update_s": update_s,
                "sequences": len(seqs.input_ids),
                "positions": sum(map(len, seqs.input_ids)),
                "context_tokens_per_turn": float(np.mean([len(t.context_ids) for t in turns])),
                "turns": len(turns),
                "success": float(batch.successes().mean()),
                **{
                    k: float(v)
                    for k, v in proxy.items()
                    if k.split("/")[-1] in READINGS and k.startswith(("collapse_first_turn_", "collapse_trajectory_"))
                },
            }
            rows[mode].append(row)
            print(f"iteration {it} {mode}: " + ", ".join(f"{k}={v:.3g}" for k, v in row.items()), flush=True)
    summary = {}
    for mode, rs in rows.items():
        keys = rs[0].keys()
        summary[mode] = {
            k: (statistics.median(r[k] for r in rs) if k.endswith("_s") else float(np.nanmean([r.get(k, float("nan")) for r in rs])))
            for k in keys
        }
    print("\nper mode (seconds: median; the rest: mean over iterations)")
    for mode, s in summary.items():
        print(f"{mode}: " + ", ".join(f"{k}={v:.3g}" for k, v in s.items()))
    save.json(
        {"config": args.overrides, "modes": args.modes, "iterations": args.iterations, "summary": summary, "rows": rows}, name=args.name
    )


BENCHMARK = Benchmark("context", __doc__, main, flags, overrides="Hydra overrides, e.g. env=sokoban rollout.group_size=8")

if __name__ == "__main__":
    run(BENCHMARK)
