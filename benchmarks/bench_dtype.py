"""float32 against bfloat16 weights for a real model on this CPU: rollout, scoring and update side by
side, each pass against this CPU's matmul limit at the model's own shapes, and a profile of the update.

    python -m benchmarks.bench_dtype [--repeats 2] [--micro-batch 8] [key=value overrides ...]

Defaults to ``model=smollm2-135m`` (warm-started, cached) on FrozenLake at P=4 x G=8. For each repeat the
two dtypes alternate: the iteration-1 rollout batch (timed, tokens/s), a no-grad forward over its training
sequences (the scoring pass) and a forward + backward through the LoRA adapter (the update's work; the
adapter stays float32 under bf16 weights, peft's ``autocast_adapter_dtype``). Also the mean |log-prob|
difference of the sampled tokens between the two dtypes, on the float32 rollout.

Against the limit (goal 4 of the second performance round, docs/performance.md): ``torch.matmul`` is timed in each dtype at the shapes the passes
run (rows = a micro-batch's positions; hidden -> q/o, k/v, MLP, and the LM head over the response
positions), before and after the passes, best of the two. A pass's "probe time" is what its matmuls
alone take at those rates; its fraction of the limit is probe time / measured time. The work counted
is a forward (2N per position) for scoring, and forward + backward to the inputs (4N; the frozen weights
take no gradient) for the update, plus the decoder layers' recomputed forward when gradient
checkpointing is on (the model's default). LoRA's own matmuls and attention's score products are left
out (a few percent). One update per dtype runs under ``torch.profiler``: its top operators by self time
and the share of the time in matmul kernels say what bounds it. Saves ``benchmarks/results/dtype.json``.
Not a test: numbers go in issue notes.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from agentcollapse.lightning.update import micro_batches
from agentcollapse.rollout.sequences import build_sequences, collate
from agentcollapse.run.jobs import config_and_policy, training_batch
from benchmarks.common import (
    Benchmark,
    Results,
    alternating,
    linear_params,
    matmul_probe,
    policy_dir,
    run,
    timed,
    with_model,
)

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")  # the kernels the probe times
DTYPES = ("float32", "bfloat16")


def _collated(policy, batch, micro: int):
    """The batch's training sequences as the update groups them (similar lengths), collated."""
    seqs = build_sequences(batch)
    for idx in micro_batches(seqs, micro):
        yield collate(seqs, idx, policy.tokenizer.pad_token_id)


def _micro_batches(policy, batch, micro: int):
    """(collated micro-batch, log-probs of every position from its first response token), lazily."""
    from agentcollapse.rollout.sequences import gather_logprobs

    for mb in _collated(policy, batch, micro):
        start = int(mb["logits_from"])
        logits = policy.model(input_ids=mb["input_ids"], logits_to_keep=mb["input_ids"].shape[1] - start).logits
        yield mb, gather_logprobs(logits, mb["input_ids"], start)


def _shapes(policy, batch, micro: int) -> tuple[list[int], list[int]]:
    """Per micro-batch: positions through the decoder, and rows through the LM head."""
    sizes = [(mb["input_ids"].shape, int(mb["logits_from"])) for mb in _collated(policy, batch, micro)]
    return [b * t for (b, t), _ in sizes], [b * (t - start) for (b, t), start in sizes]


def _passes(policy, batch, micro: int) -> tuple[float, float, torch.Tensor]:
    """(scoring seconds, update seconds, per-token log-probs of the sampled tokens under this policy)."""

    def scoring() -> list[torch.Tensor]:
        with torch.no_grad():
            return [logp[mb["response_mask"] > 0] for mb, logp in _micro_batches(policy, batch, micro)]

    scoring_s, logps = timed(scoring)
    update_s, _ = timed(_update, policy, batch, micro)
    return scoring_s, update_s, torch.cat(logps)


def _update(policy, batch, micro: int) -> None:
    for mb, logp in _micro_batches(policy, batch, micro):
        (-(logp * mb["response_mask"]).sum() / mb["response_mask"].sum()).backward()
    policy.model.zero_grad(set_to_none=True)


def probe_shapes(sizes: dict[str, int], rows: int, head_rows: int) -> dict[str, tuple[tuple[int, int, int], int]]:
    """Each matmul of one forward as (rows, k, n) and how many times a decoder layer (or the head) runs it."""
    h, i, kv = sizes["hidden"], sizes["intermediate"], sizes["kv"]
    return {
        "q, o": ((rows, h, h), 2),
        "k, v": ((rows, h, kv), 2),
        "gate, up": ((rows, h, i), 2),
        "down": ((rows, i, h), 1),
        "head": ((head_rows, h, sizes["vocab"]), 1),
    }


def probe_seconds(
    shapes: dict[str, tuple[tuple[int, int, int], int]],
    layers: int,
    rows: list[int],
    head_rows: list[int],
    rates: dict[str, float],
    dtype: str,
) -> dict[str, float]:
    """The time one forward's matmuls (``probe_shapes``) take at the probe's rates (GFLOP/s by shape key):
    decoder layers and LM head apart, summed over the micro-batches (each at the mean micro-batch's rates)."""
    out = {"layers": 0.0, "head": 0.0}
    for name, ((_, k, n), count) in shapes.items():
        rate = rates[f"{dtype}:{name}"] * 1e9
        if name == "head":
            out["head"] += sum(2 * r * k * n for r in head_rows) / rate
        else:
            out["layers"] += layers * count * sum(2 * r * k * n for r in rows) / rate
    return out


def profile_update(policy, batch, micro: int, top: int = 12) -> dict[str, object]:
    """One update under torch.profiler: the top operators by self CPU time and the matmul kernels' share."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _update(policy, batch, micro)
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    return {
        "self_s": total / 1e6,
        "matmul_share": sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS) / total,
        "top": [
            {"op": e.key, "self_s": e.self_cpu_time_total / 1e6, "share": e.self_cpu_time_total / total, "calls": e.count}
            for e in events[:top]
        ],
    }


@dataclass
class Measured:
    """What the alternating dtype runs measured."""

    times: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # dtype -> pass -> seconds per repeat
    logp: dict[str, torch.Tensor] = field(default_factory=dict)  # dtype -> sampled tokens' log-probs (float32 rollout)
    profiles: dict[str, dict[str, object]] = field(default_factory=dict)  # dtype -> profiled update
    rows: list[int] = field(default_factory=list)  # per micro-batch: positions through the decoder
    head_rows: list[int] = field(default_factory=list)  # per micro-batch: rows through the LM head
    sizes: dict[str, int] = field(default_factory=dict)  # the model's linear sizes
    checkpointing: bool = False


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--micro-batch", type=int, default=8, help="sequences per forward (the update's algorithm.micro_batch_size default)")
    ap.add_argument("--no-profile", action="store_true", help="skip the profiled update of each dtype")


def main(args: argparse.Namespace, save: Results) -> None:
    base = with_model(args.overrides)
    base = [*base, "rollout.num_prompts=4", "rollout.group_size=8"] if not any("num_prompts" in o for o in base) else base
    m = time_dtypes(args, base)
    # the limit: each dtype's matmul rate at the passes' own shapes, best of a probe before and after
    shapes = probe_shapes(m.sizes, round(statistics.fmean(m.rows)), round(statistics.fmean(m.head_rows)))
    rates = probe_rates(shapes)
    median = {d: {k: statistics.median(v) for k, v in row.items()} for d, row in m.times.items()}
    ratio = {k: median["bfloat16"][k] / median["float32"][k] for k in ("rollout_s", "scoring_s", "update_s")}
    diff = float((m.logp["bfloat16"] - m.logp["float32"]).abs().mean())
    limit = {dtype: against_limit(shapes, m, rates, median[dtype], dtype) for dtype in DTYPES}
    print(f"bf16 / fp32 time: rollout {ratio['rollout_s']:.2f}, scoring {ratio['scoring_s']:.2f}, update {ratio['update_s']:.2f}")
    print(f"mean |log p bf16 - log p fp32| over the sampled tokens: {diff:.4f} nats")
    for dtype, prof in m.profiles.items():
        print(
            f"{dtype} update profile (self time {prof['self_s']:.1f}s): "
            + ", ".join(f"{t['op']} {t['share']:.0%}" for t in prof["top"][:6])
        )
    save.json(
        {
            "overrides": base,
            "repeats": args.repeats,
            "threads": torch.get_num_threads(),
            "median": median,
            "ratio_bf16_over_fp32": ratio,
            "logp_abs_diff": diff,
            "model_sizes": m.sizes,
            "gradient_checkpointing": m.checkpointing,
            "micro_batch": args.micro_batch,
            "rows_per_micro_batch": statistics.fmean(m.rows),
            "head_rows_per_micro_batch": statistics.fmean(m.head_rows),
            "matmul_probe_gflops": rates,
            "limit": limit,
            "update_profile": m.profiles,
        }
    )


def time_dtypes(args: Any, base: list[str]) -> Measured:
    """``--repeats`` rounds of both dtypes: each loads the policy, rolls out iteration 1 (timed), then
    scores and updates the first float32 batch, so both dtypes run the same sequences."""
    m = Measured()
    reference_batch = None
    for repeat, dtype in alternating(DTYPES, args.repeats):
        cfg, policy = config_and_policy([*base, f"model.dtype={dtype}"], report=False)
        m.checkpointing = cfg.model.gradient_checkpointing
        if not m.sizes:
            m.sizes = linear_params(policy_dir([*base, f"model.dtype={dtype}"]))[1]
        batch, perf = training_batch(policy, cfg)
        if repeat == 0 and dtype == "float32":
            reference_batch = batch
            m.rows, m.head_rows = _shapes(policy, batch, args.micro_batch)
        scoring, update, _ = _passes(policy, reference_batch, args.micro_batch)  # the same sequences in both dtypes
        row = m.times.setdefault(dtype, {"rollout_s": [], "tokens_per_s": [], "scoring_s": [], "update_s": []})
        row["rollout_s"].append(perf["perf/rollout_time_s"])
        row["tokens_per_s"].append(perf["perf/rollout_tokens_per_s"])
        row["scoring_s"].append(scoring)
        row["update_s"].append(update)
        print(
            f"repeat {repeat} {dtype:9s} rollout {perf['perf/rollout_time_s']:.1f}s ({perf['perf/rollout_tokens_per_s']:.0f} tok/s)  "
            f"scoring {scoring:.1f}s  update {update:.1f}s",
            flush=True,
        )
        if repeat == 0:
            m.logp[dtype] = _passes(policy, reference_batch, args.micro_batch)[2]
        if repeat == args.repeats - 1 and not args.no_profile:
            m.profiles[dtype] = profile_update(policy, reference_batch, args.micro_batch)
            print(f"  profiled update: matmul kernels {m.profiles[dtype]['matmul_share']:.0%} of self time", flush=True)
        del policy
    return m


def probe_rates(shapes: dict[str, tuple[tuple[int, int, int], int]]) -> dict[str, float]:
    """GFLOP/s of each dtype at each shape, the best of two probes (one probe on a shared machine can read low)."""
    rates: dict[str, float] = {}
    for _ in range(2):
        for dtype in DTYPES:
            got = matmul_probe([s for s, _ in shapes.values()], torch.get_num_threads(), repeats=5, dtype=dtype)
            for name, (s, _) in shapes.items():
                key = f"{dtype}:{name}"
                rates[key] = max(rates.get(key, 0.0), got["x".join(map(str, s))])
    return rates


def against_limit(
    shapes: dict[str, tuple[tuple[int, int, int], int]], m: Measured, rates: dict[str, float], median: dict[str, float], dtype: str
) -> dict[str, float]:
    """What the scoring and update passes' matmuls alone take at the probe's rates, and that time's
    fraction of each pass's measured time."""
    fwd = probe_seconds(shapes, m.sizes["layers"], m.rows, m.head_rows, rates, dtype)
    one = fwd["layers"] + fwd["head"]
    update_probe = 2 * one + (fwd["layers"] if m.checkpointing else 0.0)  # forward + backward to the inputs (+ recompute)
    limit = {
        "scoring_probe_s": one,
        "scoring_fraction": one / median["scoring_s"],
        "update_probe_s": update_probe,
        "update_fraction": update_probe / median["update_s"],
        "head_share_of_probe": fwd["head"] / one,
    }
    print(
        f"{dtype}: scoring {limit['scoring_fraction']:.0%} of the matmul limit, update {limit['update_fraction']:.0%} "
        f"(probe {update_probe:.1f}s vs {median['update_s']:.1f}s)"
    )
    return limit


BENCHMARK = Benchmark(
    "dtype",
    __doc__,
    main,
    flags,
    repeats=2,
    repeats_help="alternating float32/bfloat16 rounds",
    overrides="Hydra overrides (model=smollm2-135m unless one is given)",
)

if __name__ == "__main__":
    run(BENCHMARK)
