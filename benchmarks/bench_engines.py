"""The two rollout engines side by side on a real model: transformers ``generate`` (``rollout.engine=hf``)
against vLLM in this process (``rollout.engine=vllm``).

    python -m benchmarks.bench_engines [--repeats 3] [key=value overrides ...]

Defaults: SmolLM2-135M (without its warm start, so no cache build: every response runs to its token
budget, which is what a throughput comparison wants), P=8 x G=8, FrozenLake's multi-turn loop, the
model's own dtype for ``hf`` (fp32) and ``rollout.vllm.dtype`` for vLLM (bf16). The engines alternate
(ABBA), each on iteration ``i``'s batch of the same seeds; reported per engine: the rollout phase's
median time, generated tokens/s, and vLLM's start-up. Then the MI proxy (every sampler, as a run's
diagnostics compute it) on the last vLLM batch, cross-scored by the trainer's model (``hf``, cached
contexts) and by the engine (``diagnostics.proxy_engine=vllm``), alternating, with the largest gap
between the two trajectory-sampler z-scores. Saves ``benchmarks/results/engines.json``.
Not a test: numbers go in issue notes.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from agentcollapse.diagnostics import collapse_metrics
from agentcollapse.rollout.vllm_engine import VLLMEngine, engine_settings
from agentcollapse.run.jobs import config_and_policy, training_batch
from benchmarks.common import Benchmark, Results, alternating, median, run

DEFAULTS = ["model=smollm2-135m", "model.warm_start.enabled=false", "rollout.num_prompts=8", "rollout.group_size=8"]


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--proxy-repeats", type=int, default=1, help="rounds of the MI proxy comparison (0: skip it)")


def main(args: argparse.Namespace, save: Results) -> None:
    cfg, policy = config_and_policy([*DEFAULTS, *args.overrides])
    started = time.perf_counter()
    engine = VLLMEngine(policy.source_dir, engine_settings(cfg.rollout.vllm), seed=cfg.seed)
    startup = time.perf_counter() - started
    print(f"vLLM engine ({cfg.rollout.vllm.dtype}) started in {startup:.1f}s")
    times: dict[str, list[float]] = {"hf": [], "vllm": []}
    rates: dict[str, list[float]] = {"hf": [], "vllm": []}
    batch = None
    for i, name in alternating(("hf", "vllm"), args.repeats, swap=True):
        b, perf = training_batch(policy, cfg, iteration=i, engine=engine if name == "vllm" else None)
        batch = b if name == "vllm" else batch
        times[name].append(perf["perf/rollout_time_s"])
        rates[name].append(perf["perf/rollout_tokens_per_s"])
        print(f"round {i + 1} {name:4s}: rollout {perf['perf/rollout_time_s']:.1f}s, {perf['perf/rollout_tokens_per_s']:.0f} tokens/s")
    record = {
        "model": cfg.model.name,
        "P": cfg.rollout.num_prompts,
        "G": cfg.rollout.group_size,
        "env": cfg.env.name,
        "max_new_tokens": cfg.rollout.max_new_tokens,
        "threads": cfg.trainer.num_threads,
        "hf_dtype": cfg.model.dtype,
        "vllm_dtype": cfg.rollout.vllm.dtype,
        "vllm_startup_s": startup,
        "rounds": args.repeats,
    }
    for name in ("hf", "vllm"):
        record[name] = {"rollout_s": median(times[name]), "tokens_per_s": median(rates[name]), "rollout_s_each": times[name]}
    record["ratio_vllm_over_hf_time"] = record["vllm"]["rollout_s"] / record["hf"]["rollout_s"]
    proxy: dict[str, list[float]] = {"hf": [], "vllm": []}
    zscores: dict[str, float] = {}
    for _, name in alternating(("hf", "vllm"), args.proxy_repeats if batch is not None else 0, swap=True):
        d = cfg.diagnostics
        t0 = time.perf_counter()
        out = collapse_metrics(
            policy.decoding_model(),
            policy.tokenizer,
            batch,
            {},
            np.random.default_rng(cfg.seed),
            d.score_batch_size,
            d.trajectory_samples or None,
            score=engine.score if name == "vllm" else None,
        )
        proxy[name].append(time.perf_counter() - t0)
        zscores[name] = out.get("collapse_trajectory_sample/mi_zscore", float("nan"))
        print(f"MI proxy by {name:4s}: {proxy[name][-1]:.1f}s, trajectory z-score {zscores[name]:.4f}")
    if proxy["hf"]:
        record["proxy"] = {
            "hf_s": median(proxy["hf"]),
            "vllm_s": median(proxy["vllm"]),
            "ratio_vllm_over_hf_time": median(proxy["vllm"]) / median(proxy["hf"]),
            "trajectory_zscore": zscores,
        }
    print(
        f"rollout phase, median of {args.repeats}: hf {record['hf']['rollout_s']:.1f}s ({record['hf']['tokens_per_s']:.0f} tok/s), "
        f"vllm {record['vllm']['rollout_s']:.1f}s ({record['vllm']['tokens_per_s']:.0f} tok/s); "
        f"vllm / hf time {record['ratio_vllm_over_hf_time']:.2f}"
    )
    save.json(record)


BENCHMARK = Benchmark(
    "engines",
    __doc__,
    main,
    flags,
    repeats=3,
    repeats_help="rounds; each runs both engines (ABBA order)",
    overrides="Hydra overrides after the defaults, e.g. rollout.vllm.dtype=float32",
)

if __name__ == "__main__":
    run(BENCHMARK)
