"""How much the MI proxy moves when nothing but the rollout changes: one policy, several rollout seeds.

A run's MI z-score moves between proxy steps because the policy changed, or only because another batch
(other maps, other samples) was scored. This measures the second part: the warm-started policy (no
update at all) rolls out ``--rollouts`` batches of P x G, each on the maps and sampling streams of one
training iteration, and the proxy family scores each with fresh EMA states (a run's first proxy step).
The spread of each metric over the batches is the proxy's noise at that P x G: a within-run move smaller
than about twice it cannot be told from a re-draw.

    .venv/bin/python -m scripts.proxy_noise --out docs/results/smollm2-proxy-noise [--rollouts 8] [overrides ...]

Defaults to the SmolLM2 pilot's setting (model=smollm2-135m, FrozenLake, P=4 x G=4, vLLM rollouts, the
proxy's pilot options). Writes ``proxy_noise.csv`` (one row per batch) and ``proxy_noise.md`` (mean, SD,
range per metric).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from agentcollapse.analysis.markdown import md_table
from agentcollapse.diagnostics.collapse import collapse_metrics
from agentcollapse.rollout.vllm_engine import VLLMEngine, engine_settings
from agentcollapse.run.jobs import config_and_policy, training_batch

DEFAULTS = [
    "model=smollm2-135m",
    "env=frozenlake",
    "rollout.num_prompts=4",
    "rollout.group_size=4",
    "rollout.engine=vllm",
    "trainer.num_threads=2",
]
METRICS = (
    "collapse_trajectory_sample/mi_zscore_ema",
    "collapse_first_turn_sample/mi_zscore_ema",
    "collapse_first_turn_nocopy_sample/mi_zscore_ema",
    "collapse_first_turn_sample/retrieval_accuracy",
    "collapse_first_turn_sample/conditional_entropy_est",
    "collapse_trajectory_sample/conditional_entropy_est",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=8, help="batches scored (one training iteration's maps and streams each)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides after the defaults (e.g. diagnostics.proxy_dtype=bfloat16)")
    args = ap.parse_args()
    cfg, policy = config_and_policy([*DEFAULTS, *args.overrides])
    d = cfg.diagnostics
    autocast = None if d.proxy_dtype == "float32" else getattr(torch, d.proxy_dtype)
    # The RL adapter starts at zero: the engine's warm-started weights are the policy's.
    engine = VLLMEngine(policy.source_dir, engine_settings(cfg.rollout.vllm), seed=cfg.seed) if cfg.rollout.engine == "vllm" else None
    rows = []
    try:
        for k in range(args.rollouts):
            started = time.perf_counter()
            batch, _ = training_batch(policy, cfg, iteration=k, engine=engine)
            metrics = collapse_metrics(
                policy.decoding_model(),
                policy.tokenizer,
                batch,
                {},
                np.random.default_rng(cfg.seed + k),
                d.score_batch_size,
                d.trajectory_samples or None,
                first_turn_samples=d.first_turn_samples or None,
                trajectory_replace=d.trajectory_replace,
                skip=tuple(d.skip_samplers),
                autocast=autocast,
            )
            rows.append({"batch": k, "success_rate": float(batch.successes().mean()), **{m: metrics.get(m, float("nan")) for m in METRICS}})
            print(
                f"batch {k}: "
                + ", ".join(f"{m.split('/')[-1]} {rows[-1][m]:.3f}" for m in METRICS[:2])
                + f" ({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    finally:
        if engine is not None:
            engine.close()
    table = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "proxy_noise.csv", index=False)
    summary = pd.DataFrame(
        [
            {"metric": m, "mean": table[m].mean(), "SD over batches": table[m].std(ddof=1), "min": table[m].min(), "max": table[m].max()}
            for m in ["success_rate", *METRICS]
        ]
    )
    lines = [
        f"# The MI proxy's noise at one policy: {args.rollouts} rollouts of P={cfg.rollout.num_prompts} x G={cfg.rollout.group_size}",
        "",
        f"`python -m scripts.proxy_noise {' '.join(args.overrides)}` (proxy {d.proxy_dtype}); each batch one training iteration's maps and streams, fresh EMAs.",
        "",
        md_table(summary),
    ]
    (args.out / "proxy_noise.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
