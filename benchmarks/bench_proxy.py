"""Cost of the MI proxy (docs/method.md section 3) relative to one RL iteration, and the cached cross-scorer's
speedup over the naive one.

    python -m benchmarks.bench_proxy [--repeats 3] [--fill-empty-thinks] [key=value overrides ...]

On one P x G rollout batch of the configured policy (default: the tiny model, P=8, G=16) it times, each
``--repeats`` times interleaved, and reports medians of:

* proxy: every sampler the config runs (``diagnostics.skip_samplers`` left out) through
  ``agentcollapse.diagnostics.collapse_metrics``, which scores each (context, trace) pair once for all
  of them; beside it, each sampler scored alone (the cost before the samplers shared their pairs) and
  the proxy with its forwards in bf16 (``diagnostics.proxy_dtype=bfloat16``), with the largest change
  that makes to each sampler's MI z-score, MI estimate and retrieval accuracy;
* iteration: ``collect_rollouts`` (same seeds and sample seed every repeat) + ``AgentRLModule.update``
  on the whole batch (all groups, the module attached to a real Trainer); the proxy's share of it and
  the implied overhead at ``diagnostics.compute_freq`` (proxy / (compute_freq * iteration));
* ``cross_score`` (cached) vs ``naive_cross_score`` on the first-turn sample's (contexts, traces): the
  measured speedup next to the ideal token ratio (|X| + |Z|) / |Z| (mean token lengths; it ignores the
  one context forward per prompt, so it is only approached when there are many traces R, and the ratio
  counting it, (|X| + |Z|) / (|Z| + |X| / R), is printed too), and the max absolute difference of the
  two matrices (same weights: both run before that repeat's update).

``--fill-empty-thinks`` is for barely trained policies (tiny test configs) that rarely close
``</think>``: turns without reasoning get the decoded response (tags stripped) as their reasoning, so
the proxy has rows to score. Saves ``benchmarks/results/proxy.json`` for ``benchmarks.bench_report``. Not a test:
numbers go in issue notes.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any

from agentcollapse.run.trainer import attach_to_trainer
from benchmarks.common import Benchmark, Results, medians, run, timed


def _fill_empty_thinks(batch) -> int:
    """Give every turn with empty reasoning its decoded response text as reasoning; returns how many."""
    filled = 0
    for traj in batch.trajectories:
        for turn in traj.turns:
            if not (turn.think or "").strip():
                text = re.sub(r"</?(think|answer)>|<\|[^|]*\|>", " ", turn.response_text)
                turn.think = " ".join(text.split())
                filled += 1
    return filled


def _attached_module(cfg, policy):
    from agentcollapse.lightning.module import AgentRLModule

    return attach_to_trainer(AgentRLModule(cfg, policy))


@dataclass
class SampleShape:
    """The first-turn sample's sizes and the speedups a cached cross-scorer can reach on it."""

    traces: int
    ctx_len: float  # mean |X|
    z_len: float  # mean |Z|
    ideal: float  # (|X| + |Z|) / |Z|
    ideal_prefill: float  # the same counting the one context forward per prompt: (|X| + |Z|) / (|Z| + |X| / R)
    can_score: bool  # enough traces and contexts to retrieve among


@dataclass
class Measured:
    """Every repeat's times, the proxy's metrics, and how far bf16 and the naive scorer moved them."""

    times: dict[str, list[float]]
    proxy_out: dict[str, float]
    bf16_diff: dict[str, float]
    max_diff: list[float]


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--score-batch-size", type=int, default=None, help="cross_score batch size (default: diagnostics.score_batch_size)")
    ap.add_argument("--fill-empty-thinks", action="store_true", help="use the decoded response as reasoning where the parser found none")
    ap.add_argument("--skip-naive", action="store_true", help="do not time naive_cross_score (slow at large P, G)")
    ap.add_argument(
        "--name",
        default="proxy",
        help="result name: <out>/<name>.json (proxy_smollm2: the real model's, make bench-proxy-smollm2)",
    )


def main(args: argparse.Namespace, save: Results) -> None:
    from agentcollapse.run.jobs import config_and_policy, training_batch

    cfg, policy = config_and_policy(args.overrides)
    score_bs = args.score_batch_size or cfg.diagnostics.score_batch_size
    module = _attached_module(cfg, policy)
    P, G = cfg.rollout.num_prompts, cfg.rollout.group_size

    def rollout():
        return training_batch(policy, cfg)  # iteration 1's batch

    batch, perf = rollout()
    n_turns = sum(len(t.turns) for t in batch.trajectories)
    print(
        f"rollout P={P} x G={G}: {perf['perf/rollout_time_s']:.2f}s, {n_turns} turns, "
        f"{perf['perf/rollout_tokens_per_s']:.0f} generated tokens/s"
    )
    if args.fill_empty_thinks:
        print(f"--fill-empty-thinks: {_fill_empty_thinks(batch)} of {n_turns} turns had empty reasoning")
    sample, shape = first_turn_shape(batch, policy.tokenizer)
    measured = time_repeats(args, cfg, module, policy.tokenizer, batch, sample, shape, score_bs, rollout)
    med = medians(measured.times)
    active = active_samplers(cfg)
    print_summary(args, cfg, med, measured, shape, active, score_bs)
    save.json(build_record(args, cfg, med, measured, shape, active), name=args.name)
    print_samplers(measured.proxy_out)


def active_samplers(cfg: Any) -> list[str]:
    from agentcollapse.diagnostics import sampler_names

    skip = tuple(cfg.diagnostics.skip_samplers)
    return [n for n in sampler_names() if n not in skip]


def first_turn_shape(batch: Any, tok: Any) -> tuple[Any, SampleShape]:
    """The first-turn sample the cached and naive scorers are timed on, and its :class:`SampleShape`."""
    import numpy as np

    from agentcollapse.diagnostics import first_turn_sample
    from agentcollapse.models.context import encode

    sample = first_turn_sample(batch, lambda text: encode(tok, text))
    ctx_len = float(np.mean([len(c) for c in sample.contexts])) if sample.contexts else float("nan")
    z_len = float(np.mean([len(t) for t in sample.traces])) if sample.traces else float("nan")
    n_r = max(1, len(sample.traces))
    shape = SampleShape(
        traces=len(sample.traces),
        ctx_len=ctx_len,
        z_len=z_len,
        ideal=(ctx_len + z_len) / z_len,
        ideal_prefill=(ctx_len + z_len) / (z_len + ctx_len / n_r),
        can_score=len(sample.traces) > 0 and len(sample.contexts) >= 2,
    )
    print(
        f"first-turn sample: {len(sample.traces)} traces x {len(sample.contexts)} contexts, "
        f"valid_thinking_rate {sample.stats['valid_thinking_rate']:.3f}, mean |X| {ctx_len:.1f}, mean |Z| {z_len:.1f}"
    )
    if not shape.can_score:
        print(
            "WARNING: too few valid reasoning traces to score; the proxy is skipped (try --fill-empty-thinks for a barely trained policy)"
        )
    return sample, shape


def time_repeats(
    args: Any, cfg: Any, module: Any, tok: Any, batch: Any, sample: Any, shape: SampleShape, score_bs: int, rollout: Any
) -> Measured:
    """``--repeats`` interleaved rounds of: the proxy (shared pairs, each sampler alone, bf16), the cached
    and naive cross-scorers, a rollout and an update of the whole batch."""
    import numpy as np
    import torch

    from agentcollapse.diagnostics import ProxyEMAState, collapse_metrics, cross_score, naive_cross_score, sampler_names, sampler_prefixes
    from agentcollapse.lightning import Selection

    model = module.model
    times: dict[str, list[float]] = {k: [] for k in ("proxy", "separate", "bf16", "rollout", "update", "cached", "naive")}
    skip = tuple(cfg.diagnostics.skip_samplers)
    active = active_samplers(cfg)
    bf16_diff: dict[str, float] = {}
    max_diff = []
    proxy_out: dict[str, float] = {}
    all_groups = np.arange(cfg.rollout.num_prompts)
    traj_samples = cfg.diagnostics.trajectory_samples or None
    for rep in range(args.repeats):
        # proxy: a fresh EMA/RNG state every repeat, so every repeat scores the same samples
        emas = {name: ProxyEMAState(decay=0.9) for name in sampler_prefixes()}
        rng = np.random.default_rng(cfg.seed)
        kw = {"batch_size": score_bs, "trajectory_samples": traj_samples}
        dt, proxy_out = timed(collapse_metrics, model, tok, batch, emas, rng, skip=skip, **kw)
        times["proxy"].append(dt)
        # each sampler alone, from the same rng state: only the trajectory sampler draws from it
        separate = 0.0
        for name in active:
            fresh = {k: ProxyEMAState(decay=0.9) for k in sampler_prefixes()}
            others = tuple(n for n in sampler_names() if n != name)
            dt, _ = timed(collapse_metrics, model, tok, batch, fresh, np.random.default_rng(cfg.seed), skip=others, **kw)
            separate += dt
        times["separate"].append(separate)
        fresh = {k: ProxyEMAState(decay=0.9) for k in sampler_prefixes()}
        dt, bf16_out = timed(
            collapse_metrics, model, tok, batch, fresh, np.random.default_rng(cfg.seed), skip=skip, autocast=torch.bfloat16, **kw
        )
        times["bf16"].append(dt)
        for key, value in proxy_out.items():
            if key.split("/")[-1] in ("mi_zscore", "mi_estimate", "retrieval_accuracy") and np.isfinite(value):
                bf16_diff[key] = max(bf16_diff.get(key, 0.0), abs(bf16_out[key] - value))
        if shape.can_score:
            dt, cached = timed(cross_score, model, sample.contexts, sample.traces, batch_size=score_bs)
            times["cached"].append(dt)
            if not args.skip_naive:
                dt, naive = timed(naive_cross_score, model, sample.contexts, sample.traces)
                times["naive"].append(dt)
                max_diff.append(float((cached - naive).abs().max()))
        dt, _ = timed(rollout)
        times["rollout"].append(dt)
        dt, _ = timed(module.update, batch, Selection(all_groups))
        times["update"].append(dt)
        print(f"repeat {rep + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1]:.3f}s" for k, v in times.items() if v))
    return Measured(times, proxy_out, bf16_diff, max_diff)


def print_summary(
    args: Any, cfg: Any, med: dict[str, float], measured: Measured, shape: SampleShape, active: list[str], score_bs: int
) -> None:
    import torch

    iteration = med["rollout"] + med["update"]
    freq = cfg.diagnostics.compute_freq
    print(f"\nmedians over {args.repeats} repeats (threads={torch.get_num_threads()}, score batch size {score_bs}):")
    print(f"  proxy ({', '.join(active)})")
    print(f"    pairs shared             {med['proxy']:.3f}s")
    print(f"    each sampler alone       {med['separate']:.3f}s  (shared / alone = {med['proxy'] / med['separate']:.2f})")
    print(f"    bf16 forwards            {med['bf16']:.3f}s  (bf16 / fp32 = {med['bf16'] / med['proxy']:.2f})")
    for key, diff in sorted(measured.bf16_diff.items()):
        print(f"      |bf16 - fp32| {key:55s} {diff:.4f}  (fp32 {measured.proxy_out[key]:.4f})")
    print(f"  iteration                  {iteration:.3f}s  (rollout {med['rollout']:.3f}s + update {med['update']:.3f}s)")
    print(f"  proxy / iteration          {med['proxy'] / iteration:.3f}")
    print(f"  cost at compute_freq={freq}     {med['proxy'] / (freq * iteration):.3f}  (proxy / ({freq} * iteration))")
    print(
        f"  share of the time at {freq}      {med['proxy'] / (freq * iteration + med['proxy']):.3f}  (proxy / ({freq} * iteration + proxy))"
    )
    if shape.can_score:
        print(f"  cross_score cached         {med['cached']:.3f}s")
        if not args.skip_naive:
            speedup = med["naive"] / med["cached"]
            print(f"  naive_cross_score          {med['naive']:.3f}s")
            print(
                f"  speedup naive/cached       {speedup:.2f}x   ideal (|X|+|Z|)/|Z| = {shape.ideal:.2f}x   -> {speedup / shape.ideal:.2f} of ideal"
            )
            print(
                f"  (token ratio counting the context forwards, (|X|+|Z|)/(|Z|+|X|/R) with R={max(1, shape.traces)} traces: "
                f"{shape.ideal_prefill:.2f}x -> {speedup / shape.ideal_prefill:.2f} of it)"
            )
            print(f"  max |cached - naive|       {max(measured.max_diff):.2e}")


def print_samplers(proxy_out: dict[str, float]) -> None:
    """A line of each sampler's sample size and readings."""
    from agentcollapse.diagnostics import sampler_prefixes

    for name in sampler_prefixes():
        keys = ("valid_thinking_rate", "num_traces", "num_contexts", "mi_estimate", "retrieval_accuracy")
        print(f"  {name}: " + ", ".join(f"{k}={proxy_out[f'{name}/{k}']:.3g}" for k in keys if f"{name}/{k}" in proxy_out))


def build_record(args: Any, cfg: Any, med: dict[str, float], measured: Measured, shape: SampleShape, active: list[str]) -> dict[str, Any]:
    """proxy.json: the medians, the proxy's share of an iteration and the cached scorer's speedup."""
    iteration = med["rollout"] + med["update"]
    freq = cfg.diagnostics.compute_freq
    can_score, naive = shape.can_score, shape.can_score and not args.skip_naive
    return {
        "P": cfg.rollout.num_prompts,
        "G": cfg.rollout.group_size,
        "repeats": args.repeats,
        "overrides": args.overrides,
        "proxy_s": med["proxy"],
        "samplers_run": active,
        "proxy_separate_s": med["separate"],
        "shared_over_separate": med["proxy"] / med["separate"],
        "proxy_bf16_s": med["bf16"],
        "bf16_over_fp32": med["bf16"] / med["proxy"],
        "bf16_max_abs_diff": measured.bf16_diff,
        "iteration_s": iteration,
        "proxy_over_iteration": med["proxy"] / iteration,
        "compute_freq": freq,
        "cost_at_compute_freq": med["proxy"] / (freq * iteration),
        "share_at_compute_freq": med["proxy"] / (freq * iteration + med["proxy"]),
        "bf16_cost_at_compute_freq": med["bf16"] / (freq * iteration),
        "cached_s": med["cached"] if can_score else None,
        "naive_s": med["naive"] if naive else None,
        "mean_context_len": shape.ctx_len,
        "mean_trace_len": shape.z_len,
        "traces": shape.traces,
        "ideal": shape.ideal,
        "ideal_with_prefill": shape.ideal_prefill,
        "speedup": med["naive"] / med["cached"] if naive else None,
        "max_abs_diff": max(measured.max_diff) if measured.max_diff else None,
        "samplers": {k: float(v) for k, v in measured.proxy_out.items()},
    }


BENCHMARK = Benchmark(
    "proxy",
    __doc__,
    main,
    flags,
    repeats=3,
    repeats_help="interleaved repetitions; medians are reported",
    overrides="Hydra overrides, e.g. rollout.num_prompts=4 cache_dir=/tmp/c",
)

if __name__ == "__main__":
    run(BENCHMARK)
