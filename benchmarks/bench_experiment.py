"""The SmolLM2 experiment's iteration, evaluation included: the pilot's settings against the pre-registered
experiment's, side by side on the same seed.

    python -m benchmarks.bench_experiment [--repeats 1] [--steps 2] [--threads 2] [overrides ...]

Each arm is one ``agentcollapse train`` of a sweep file's setting (``sweeps/smollm2_filter_vs_none.yaml``,
the pilot, against ``sweeps/smollm2_prereg.yaml``), no filter, seed 0, ``--steps`` iterations, in its
own process (peak memory is that process's), the arms alternating. Both evaluate at step 0 and at the
last step (64 maps at T=0.5 and T=1, the same maps and sampling streams) and run the MI proxy at steps 1
and 2.

An iteration's cost, evaluation included, is what a long run pays per iteration: the step without
the proxy (mean over the steps), plus the proxy's time over its cadence (``diagnostics.compute_freq``),
plus an evaluation's time over its cadence (``trainer.val_every``). It is given at each arm's own
cadences and, for the pre-registered setting, also at the pilot's (every 2 iterations), so the saving
from cheaper compute and the one from evaluating less often are told apart.

Learning on a fixed seed: step 1 runs on the same rollout in both arms (vLLM, per-request seeds), so its
gradient norm, entropy, KL and engine log-prob gap compare one update on the same data in float32 and
in bf16; the step-2 rollout and the last evaluation compare the policies after it.

Writes ``benchmarks/results/experiment.json`` and ``.md`` (``benchmarks.bench_report`` folds them in).
About 15 minutes on 2 cores (the pilot's arm ~9).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, alternating, command, measured_train, save_markdown, save_result

ARMS = {"pilot": "smollm2_filter_vs_none", "prereg": "smollm2_prereg"}
LEARNING_KEYS = (
    "actor/grad_norm",
    "actor/entropy",
    "actor/kl",
    "actor/pg_loss",
    "rollout/engine_logp_abs_diff",
    "rollout/success_rate",
    "rollout/format_valid_rate",
)


def arm_overrides(sweep: str, steps: int, threads: int) -> list[str]:
    """One run of sweep file ``sweep``'s no-filter arm, seed 0: ``steps`` iterations, evaluating at step 0
    and at the last step, no shared step-0 evaluation, no checkpoints."""
    return [
        "--config-dir",
        str(ROOT / "sweeps"),
        "--config-name",
        sweep,
        "env=frozenlake",
        "filter=none",
        "seed=0",
        f"trainer.max_steps={steps}",
        f"trainer.num_threads={threads}",
        "trainer.checkpoint_every=0",
        "trainer.shared_eval_dir=null",
        "trainer.progress_bar=false",
        "logger=csv",
    ]


def cadences(run_dir: Path) -> tuple[int, int]:
    """(val_every, compute_freq) of the run the record in ``run_dir`` made."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(run_dir / "config.yaml")
    return int(cfg.trainer.val_every), int(cfg.diagnostics.compute_freq)


def iteration_cost(rows: Any, val_every: int, compute_freq: int) -> dict[str, float]:
    """Per-iteration seconds, evaluation included, from one run's metrics rows (see the module doc)."""
    steps = rows[rows["step"] >= 1]
    proxy = steps["perf/collapse_time_s"].dropna() if "perf/collapse_time_s" in steps else []
    proxy_s = float(statistics.fmean(proxy)) if len(proxy) else 0.0
    step_s = steps["perf/step_time_s"].astype(float)
    without_proxy = float((step_s - steps.get("perf/collapse_time_s", 0.0 * step_s).fillna(0.0)).mean())
    evals = rows["perf/val_time_s"].dropna().astype(float).tolist()
    eval_s = float(statistics.fmean(evals))
    return {
        "step_without_proxy_s": without_proxy,
        "proxy_s": proxy_s,
        "eval_s": eval_s,
        "update_s": float(steps["perf/update_time_s"].mean()),
        "scoring_s": float(steps["perf/scoring_time_s"].mean()),
        "rollout_s": float(steps["perf/rollout_time_s"].mean()),
        "iteration_s": without_proxy + proxy_s / compute_freq + eval_s / val_every,
        "val_every": val_every,
        "compute_freq": compute_freq,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("overrides", nargs="*", help="extra overrides for both arms")
    args = ap.parse_args()
    src = ROOT / "src"
    results: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="bench-experiment-") as tmp:
        for rep, arm in alternating(list(ARMS), args.repeats, swap=True):
            run_dir = Path(tmp) / f"{arm}-{rep}"
            rows, peak_mib = measured_train(
                src, [*arm_overrides(ARMS[arm], args.steps, args.threads), *args.overrides], run_dir, args.threads
            )
            val_every, compute_freq = cadences(run_dir)
            cost = iteration_cost(rows, val_every, compute_freq)
            first = rows[rows["step"] == 1].iloc[0]
            last = rows[rows["step"] == rows["step"].max()].iloc[0]
            entry = {
                **cost,
                "peak_rss_mib": peak_mib,
                "step1": {k: float(first[k]) for k in LEARNING_KEYS if k in first},
                "last_eval": {k: float(last[k]) for k in ("val/success_rate", "val/success_rate_t1") if k in last},
                "step2_rollout_success": float(rows[rows["step"] == 2]["rollout/success_rate"].iloc[0]) if args.steps >= 2 else None,
            }
            if arm == "prereg":  # the same setting evaluated and proxied as often as the pilot
                entry["iteration_at_pilot_cadence_s"] = iteration_cost(rows, 2, 2)["iteration_s"]
            results[arm].append(entry)
            print(
                f"round {rep} {arm}: {cost['iteration_s']:.1f} s an iteration (step w/o proxy {cost['step_without_proxy_s']:.1f}, "
                f"proxy {cost['proxy_s']:.1f} / {compute_freq}, eval {cost['eval_s']:.1f} / {val_every}; update {cost['update_s']:.1f}), "
                f"peak {peak_mib / 1024:.1f} GiB",
                flush=True,
            )

    def med(arm: str, key: str) -> float:
        return statistics.median(e[key] for e in results[arm])

    summary = {
        "ratio": med("prereg", "iteration_s") / med("pilot", "iteration_s"),
        "ratio_at_pilot_cadence": med("prereg", "iteration_at_pilot_cadence_s") / med("pilot", "iteration_s"),
        "update_ratio": med("prereg", "update_s") / med("pilot", "update_s"),
        "peak_gib": {arm: med(arm, "peak_rss_mib") / 1024 for arm in ARMS},
        "iteration_s": {arm: med(arm, "iteration_s") for arm in ARMS},
    }
    save_result("experiment", {"steps": args.steps, "repeats": args.repeats, "arms": ARMS, "runs": results, "summary": summary})
    lines = [
        "# The SmolLM2 experiment's iteration: pilot vs pre-registered settings",
        "",
        f"`{command()}`; median of {args.repeats} round(s), {args.steps} iterations a run.",
        "",
        "| arm | iteration, eval included (s) | step w/o proxy | proxy / cadence | eval / cadence | update | scoring | rollout | peak (GiB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in ARMS:
        lines.append(
            f"| {arm} | {med(arm, 'iteration_s'):.1f} | {med(arm, 'step_without_proxy_s'):.1f} | {med(arm, 'proxy_s'):.1f} / {results[arm][0]['compute_freq']} "
            f"| {med(arm, 'eval_s'):.1f} / {results[arm][0]['val_every']} | {med(arm, 'update_s'):.1f} | {med(arm, 'scoring_s'):.1f} "
            f"| {med(arm, 'rollout_s'):.1f} | {summary['peak_gib'][arm]:.1f} |"
        )
    lines += [
        "",
        f"- pre-registered / pilot: **{summary['ratio']:.2f}x** an iteration at each one's cadence; "
        f"{summary['ratio_at_pilot_cadence']:.2f}x at the pilot's (evaluation and proxy every 2); update {summary['update_ratio']:.2f}x.",
        "- step 1 (same rollout, one update each): "
        + "; ".join(
            f"{k} {results['pilot'][0]['step1'].get(k, float('nan')):.4g} vs {results['prereg'][0]['step1'].get(k, float('nan')):.4g}"
            for k in LEARNING_KEYS
        ),
    ]
    save_markdown("experiment", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
