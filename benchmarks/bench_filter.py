"""Update cost of SNR-aware filtering at a fixed rollout budget (docs/method.md section 5).

    python -m benchmarks.bench_filter [--rhos 1.0,0.9,0.6] [--repeats 3] [key=value overrides ...]

Collects ONE rollout batch of P x G with the composed config and reuses it for every measurement, so
only the update differs. For each rho it keeps ``select_groups(RV scores, "top_p", rho,
include_zero=True)`` and times ``module.update`` on those groups. Each measurement starts from the same
state: the LoRA weights are re-loaded from a snapshot and a fresh module + optimizer is built, so the
weights never drift. Measurements are interleaved (rho_1, rho_2, ... then again) ``--repeats`` times;
the median is printed with the kept groups and the time ratio against rho = 1.0.

Groups are scored by ``reward_variance`` but kept with ``include_zero=True``: a random batch may have few
groups with non-zero variance, and dropping the zero ones would make the kept set (and the timing) depend
on that count instead of on rho; with include_zero=True rho=1 keeps every group (a batch whose every
RV is zero still keeps none below rho=1: training skips such an update). Note that linear top_p still
keeps only the groups needed to reach rho of the RV mass, so zero-RV groups are kept only at rho=1 (``--top-p-mode softmax`` makes the kept fraction track rho more closely).
Saves ``benchmarks/results/filter.json`` for ``benchmarks.bench_report``. Not a test: numbers go in issue notes.
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.common import Benchmark, Results, alternating, floats, run, timed


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rhos", type=floats, default=[1.0, 0.9, 0.6], help="comma-separated top_p values; the first is the baseline")
    ap.add_argument("--top-p-mode", choices=("linear", "softmax"), default="linear")


def main(args: argparse.Namespace, save: Results) -> None:
    if args.repeats < 1 or not args.rhos:
        raise SystemExit("bench_filter: need --repeats >= 1 and at least one rho")

    import logging
    import warnings

    import numpy as np
    import torch

    from agentcollapse.filtering import group_scores, rv_std_over_mean, select_groups
    from agentcollapse.lightning import AgentRLModule, Selection
    from agentcollapse.run.jobs import config_and_policy, training_batch
    from agentcollapse.run.trainer import attach_to_trainer

    warnings.filterwarnings("ignore")  # Lightning/transformers chatter on every fresh Trainer
    logging.disable(logging.INFO)  # and its info lines ("Trainer.fit stopped", tips)
    cfg, policy = config_and_policy(args.overrides)
    batch, perf = training_batch(policy, cfg)
    returns = batch.returns()
    scores = group_scores(returns, "reward_variance")
    P = batch.num_prompts
    print(
        f"one rollout batch P={P} x G={batch.group_size} in {perf['perf/rollout_time_s']:.2f}s, reused for every "
        f"update; success {batch.successes().mean():.3f}, groups with RV>0: {int(np.sum(scores > 1e-12))}/{P}, "
        f"Std(RV)/Mean(RV) = {rv_std_over_mean(returns):.2f}"
    )
    print(
        f"kept set: select_groups(reward_variance, 'top_p', rho, include_zero=True, top_p_mode={args.top_p_mode!r}) "
        f"-- include_zero=True so rho=1 keeps every group; algorithm={cfg.algorithm.name}"
    )

    if args.top_p_mode == "linear" and np.sum(scores > 1e-12) < P:
        print(
            "note: linear top_p keeps zero-RV groups only at rho=1; with every RV zero any rho<1 keeps none (training then skips the update)"
        )

    snapshot = {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}

    def fresh_module() -> AgentRLModule:
        """Same LoRA weights every time, and a new module (new optimizer) attached to a Trainer."""
        with torch.no_grad():
            for n, p in policy.model.named_parameters():
                if n in snapshot:
                    p.copy_(snapshot[n])
        return attach_to_trainer(AgentRLModule(cfg, policy))

    kept = {rho: select_groups(scores, "top_p", rho, True, args.top_p_mode, cfg.filter.selection_eps) for rho in args.rhos}
    times: dict[float, list[float]] = {rho: [] for rho in args.rhos}
    for _, rho in alternating(args.rhos, args.repeats):
        module = fresh_module()
        times[rho].append(timed(module.update, batch, Selection(kept[rho]))[0])
    fresh_module()  # leave the policy as it was loaded

    base = statistics.median(times[args.rhos[0]])
    print(f"{'rho':>5} {'kept':>6} {'frac':>6} {'median_s':>9} {'ratio':>6}  all_s")
    for rho in args.rhos:
        med = statistics.median(times[rho])
        n = len(kept[rho])
        print(f"{rho:>5g} {n:>6d} {n / P:>6.2f} {med:>9.3f} {med / base:>6.2f}  " + " ".join(f"{t:.3f}" for t in times[rho]))
    print(f"ratio = median update time / median at rho={args.rhos[0]:g} (same batch, same start weights)")
    rows = [{"rho": rho, "kept": len(kept[rho]), "median_s": statistics.median(times[rho]), "all_s": times[rho]} for rho in args.rhos]
    for row in rows:
        row["ratio"] = row["median_s"] / base
    save.json(
        {"P": P, "G": batch.group_size, "repeats": args.repeats, "top_p_mode": args.top_p_mode, "overrides": args.overrides, "rows": rows}
    )


BENCHMARK = Benchmark(
    "filter",
    __doc__,
    main,
    flags,
    repeats=3,
    repeats_help="interleaved repetitions per rho (median reported)",
    overrides="Hydra overrides, e.g. rollout.num_prompts=8 rollout.group_size=16",
)

if __name__ == "__main__":
    run(BENCHMARK)
