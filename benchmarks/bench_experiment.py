"""A SmolLM2 experiment's iteration, evaluation included: two sweep files' settings side by side on the same
seed. By default the pilot's settings against section 10's pre-registered ones (FrozenLake, GRPO);
``--arms prereg=smollm2_prereg@frozenlake,ppo_sokoban=smollm2_ppo_sokoban@sokoban --name experiment_ppo_sokoban``
sets section 13's PPO / Sokoban iteration beside section 10's.

    python -m benchmarks.bench_experiment [--arms NAME=SWEEP@ENV,...] [--name experiment] [--repeats 1] [--steps 2] [--threads 2] [overrides ...]

Each arm is one ``agentcollapse train`` of a sweep file's setting on its env, no filter, seed 0,
``--steps`` iterations, in its own process (peak memory is that process's), the arms alternating. Each
evaluates at step 0 and at the last step (its sweep file's held-out maps and temperatures) and runs the MI
proxy at its own cadence. The first arm is the baseline the others are given as ratios of.

An iteration's cost, evaluation included, is what a long run pays per iteration: the step without
the proxy (mean over the steps), plus the proxy's time over its cadence (``diagnostics.compute_freq``),
plus an evaluation's time over its cadence (``trainer.val_every``). It is given at each arm's own
cadences and also at the baseline's (the first arm's), so the saving from cheaper compute and the one
from evaluating less often are told apart.

Learning on a fixed seed (the default arms): step 1 runs on the same rollout in both arms (vLLM, per-request
seeds), so its gradient norm, entropy, KL and engine log-prob gap compare one update on the same data in
float32 and in bf16; the step-2 rollout and the last evaluation compare the policies after it.

Writes ``benchmarks/results/<name>.json`` and ``.md`` (``benchmarks.bench_report`` folds ``experiment`` in).
About 15 minutes on 2 cores for the default arms (the pilot's ~9).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, Benchmark, Results, alternating, command, measured_train, run

DEFAULT_ARMS = "pilot=smollm2_filter_vs_none@frozenlake,prereg=smollm2_prereg@frozenlake"
LEARNING_KEYS = (
    "actor/grad_norm",
    "critic/value_loss",
    "actor/entropy",
    "actor/kl",
    "actor/pg_loss",
    "rollout/engine_logp_abs_diff",
    "rollout/success_rate",
    "rollout/format_valid_rate",
)


def parse_arms(text: str) -> dict[str, tuple[str, str]]:
    """``NAME=SWEEP@ENV,...`` as {name: (sweep file, env)}, in the order given (the first is the baseline)."""
    arms: dict[str, tuple[str, str]] = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        name, _, rest = item.partition("=")
        sweep, _, env = rest.partition("@")
        if not (name and sweep and env):
            raise argparse.ArgumentTypeError(f"an arm is NAME=SWEEP@ENV (e.g. prereg=smollm2_prereg@frozenlake), got {item!r}")
        if not (ROOT / "sweeps" / f"{sweep}.yaml").is_file():
            raise argparse.ArgumentTypeError(f"arm {name!r}: no sweep file sweeps/{sweep}.yaml")
        arms[name] = (sweep, env)
    if len(arms) < 2:
        raise argparse.ArgumentTypeError(f"give at least two arms to compare, got {text!r}")
    return arms


def arm_overrides(sweep: str, env: str, steps: int, threads: int) -> list[str]:
    """One run of sweep file ``sweep``'s no-filter arm on ``env``, seed 0: ``steps`` iterations, evaluating at
    step 0 and at the last step, no shared step-0 evaluation, no checkpoints."""
    return [
        "--config-dir",
        str(ROOT / "sweeps"),
        "--config-name",
        sweep,
        f"env={env}",
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


def at_cadence(cost: dict[str, float], val_every: int, compute_freq: int) -> float:
    """An iteration's seconds, evaluation included, with the proxy every ``compute_freq`` and an evaluation
    every ``val_every`` iterations (the module doc's sum)."""
    return cost["step_without_proxy_s"] + cost["proxy_s"] / compute_freq + cost["eval_s"] / val_every


def iteration_cost(rows: Any, val_every: int, compute_freq: int) -> dict[str, float]:
    """Per-iteration seconds, evaluation included, from one run's metrics rows (see the module doc)."""
    steps = rows[rows["step"] >= 1]
    proxy = steps["perf/collapse_time_s"].dropna() if "perf/collapse_time_s" in steps else []
    proxy_s = float(statistics.fmean(proxy)) if len(proxy) else 0.0
    step_s = steps["perf/step_time_s"].astype(float)
    without_proxy = float((step_s - steps.get("perf/collapse_time_s", 0.0 * step_s).fillna(0.0)).mean())
    evals = rows["perf/val_time_s"].dropna().astype(float).tolist()
    eval_s = float(statistics.fmean(evals))
    cost = {
        "step_without_proxy_s": without_proxy,
        "proxy_s": proxy_s,
        "eval_s": eval_s,
        "update_s": float(steps["perf/update_time_s"].mean()),
        "scoring_s": float(steps["perf/scoring_time_s"].mean()),
        "rollout_s": float(steps["perf/rollout_time_s"].mean()),
        "val_every": val_every,
        "compute_freq": compute_freq,
    }
    return {**cost, "iteration_s": at_cadence(cost, val_every, compute_freq)}


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--arms", type=parse_arms, default=DEFAULT_ARMS, help=f"NAME=SWEEP@ENV,... (default {DEFAULT_ARMS})")
    ap.add_argument("--name", default="experiment", help="the result files' name under benchmarks/results/")
    ap.add_argument("--steps", type=int, default=2)


def main(args: argparse.Namespace, save: Results) -> None:
    arms: dict[str, tuple[str, str]] = args.arms
    names = list(arms)
    base, last = names[0], names[-1]
    src = ROOT / "src"
    results: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory(prefix="bench-experiment-") as tmp:
        for rep, arm in alternating(names, args.repeats, swap=True):
            run_dir = Path(tmp) / f"{arm}-{rep}"
            sweep, env = arms[arm]
            rows, peak_mib = measured_train(
                src, [*arm_overrides(sweep, env, args.steps, args.threads), *args.overrides], run_dir, args.threads
            )
            val_every, compute_freq = cadences(run_dir)
            cost = iteration_cost(rows, val_every, compute_freq)
            first = rows[rows["step"] == 1].iloc[0]
            end = rows[rows["step"] == rows["step"].max()].iloc[0]
            entry = {
                **cost,
                "peak_rss_mib": peak_mib,
                "step1": {k: float(first[k]) for k in LEARNING_KEYS if k in first and first[k] == first[k]},
                "last_eval": {k: float(end[k]) for k in ("val/success_rate", "val/success_rate_t1") if k in end},
                "step2_rollout_success": float(rows[rows["step"] == 2]["rollout/success_rate"].iloc[0]) if args.steps >= 2 else None,
                "rollout_response_length": float(rows[rows["step"] >= 1]["rollout/response_length"].mean()),
                "update_tokens": float(rows[rows["step"] >= 1]["perf/update_tokens"].mean()) if "perf/update_tokens" in rows else None,
            }
            results[arm].append(entry)
            print(
                f"round {rep} {arm}: {cost['iteration_s']:.1f} s an iteration (step w/o proxy {cost['step_without_proxy_s']:.1f}, "
                f"proxy {cost['proxy_s']:.1f} / {compute_freq}, eval {cost['eval_s']:.1f} / {val_every}; update {cost['update_s']:.1f}), "
                f"peak {peak_mib / 1024:.1f} GiB",
                flush=True,
            )
    base_cadence = (results[base][0]["val_every"], results[base][0]["compute_freq"])
    for arm in arms:  # every arm evaluated and proxied as often as the baseline: cadence told apart from compute
        for entry in results[arm]:
            entry["iteration_at_baseline_cadence_s"] = at_cadence(entry, *base_cadence)

    def med(arm: str, key: str) -> float:
        return statistics.median(e[key] for e in results[arm])

    summary = {
        "baseline": base,
        "compared": last,
        "ratio": med(last, "iteration_s") / med(base, "iteration_s"),
        "ratio_at_baseline_cadence": med(last, "iteration_at_baseline_cadence_s") / med(base, "iteration_s"),
        "update_ratio": med(last, "update_s") / med(base, "update_s"),
        "peak_gib": {arm: med(arm, "peak_rss_mib") / 1024 for arm in arms},
        "iteration_s": {arm: med(arm, "iteration_s") for arm in arms},
    }
    save.json({"steps": args.steps, "repeats": args.repeats, "arms": arms, "runs": results, "summary": summary}, name=args.name)
    lines = [
        f"# A SmolLM2 experiment's iteration: {', '.join(f'{a} (`sweeps/{sw}.yaml`, {env})' for a, (sw, env) in arms.items())}",
        "",
        f"`{command()}`; median of {args.repeats} round(s), {args.steps} iterations a run.",
        "",
        "| arm | iteration, eval included (s) | step w/o proxy | proxy / cadence | eval / cadence | update | scoring | rollout | response tokens | peak (GiB) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in arms:
        lines.append(
            f"| {arm} | {med(arm, 'iteration_s'):.1f} | {med(arm, 'step_without_proxy_s'):.1f} | {med(arm, 'proxy_s'):.1f} / {results[arm][0]['compute_freq']} "
            f"| {med(arm, 'eval_s'):.1f} / {results[arm][0]['val_every']} | {med(arm, 'update_s'):.1f} | {med(arm, 'scoring_s'):.1f} "
            f"| {med(arm, 'rollout_s'):.1f} | {med(arm, 'rollout_response_length'):.1f} | {summary['peak_gib'][arm]:.1f} |"
        )
    lines += [
        "",
        f"- {last} / {base}: **{summary['ratio']:.2f}x** an iteration at each one's cadence; "
        f"{summary['ratio_at_baseline_cadence']:.2f}x at {base}'s; update {summary['update_ratio']:.2f}x.",
        "- step 1, one update each: "
        + "; ".join(f"{k} " + " vs ".join(f"{results[a][0]['step1'].get(k, float('nan')):.4g}" for a in names) for k in LEARNING_KEYS),
    ]
    save.markdown(lines, name=args.name, echo=True)


BENCHMARK = Benchmark("experiment", __doc__, main, flags, repeats=1, threads=2, overrides="extra overrides for every arm")

if __name__ == "__main__":
    run(BENCHMARK)
