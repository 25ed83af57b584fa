"""Every benchmark's latest result in one place: ``benchmarks/results/latest.json`` and ``latest.md``.

    python -m benchmarks.bench_report [--results benchmarks/results]

``make bench`` runs the quick benchmarks (iteration, rollout, filter, proxy), each of which saves its
own ``<name>.json`` with :func:`benchmarks.common.save_result`, then this script. It reads whatever results exist, newest
run of each, and says for each part which commit and date it came from, so numbers from an older run
(``make bench-trl`` needs its own ``.venv-trl`` and ~40 minutes, ``make bench-scaling`` ~10) are never
mistaken for this run's. A part that was never run is listed with the command that makes it.

Results kept in git, so a fresh clone reports them labelled with their commit: the TRL comparison
(``trl.json``: it needs a separate environment), and the SmolLM2 parts that run outside ``make bench``
(``warm_start``, ``engines``, ``dtype``, ``scaling_smollm2``, ``proxy_smollm2``, ``experiment``: minutes to an hour each).
``latest.json``'s ``headline.performance_goals`` gives each goal of the second performance round (docs/performance.md:
ahead of TRL with the MI proxy on, at the tiny head and at SmolLM2's size) with its value, target and commit.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, Benchmark, Results, code_changed_since, commit, run

# name -> the command that produces benchmarks/results/<name>.json
PARTS = {
    "iteration": "make bench-iteration",
    "rollout": "make bench-rollout",
    "filter": "make bench-filter",
    "proxy": "make bench-proxy",
    "proxy_smollm2": "make bench-proxy-smollm2",
    "trl": "make bench-trl",
    "trl_smollm2": "make bench-trl ARGS='--models smollm2 --repeats 2 --save-as trl_smollm2'",
    "scaling": "make bench-scaling",
    "scaling_smollm2": "make bench-scaling ARGS='--model smollm2'",
    "warm_start": "make bench-warm-start",
    "dtype": "make bench-dtype",
    "engines": "make bench-engines",
    "experiment": "make bench-experiment",
    "cli": "make bench-cli",
}


def _fmt(value: Any, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else str(value)


PHASE_NAMES = {
    "step": "whole iteration",
    "proxy": "MI proxy (diagnostics; mean over its cadence)",
    "validation": "validation (one evaluation)",
}


def headline(parts: dict[str, Any]) -> dict[str, Any]:
    """The few numbers a reader wants first, each ``None`` where its part was not measured."""

    def get(name: str, *keys: str) -> Any:
        value: Any = parts.get(name)
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    trl = get("trl", "summary") or {}
    return {
        "iteration_now_over_before": get("iteration", "ratio_current_over_baseline"),
        "update_fraction_of_matmul_probe": get("iteration", "achieved", "update + scoring", "fraction"),
        "peak_rss_mib": get("iteration", "peak_rss_mib"),
        "ours_over_trl": {name: v.get("ratio_ours_over_trl") for name, v in trl.items()} or None,
        "proxy_cached_speedup": get("proxy", "speedup"),
        "proxy_ideal_speedup": get("proxy", "ideal"),
        "update_time_by_rho": {str(row["rho"]): row["median_s"] for row in get("filter", "rows") or []} or None,
        "performance_goals": performance_goals(parts),
    }


def measured_commit(part: dict[str, Any]) -> str:
    """The commit a saved result was measured at (the TRL result keeps it under ``settings``)."""
    return part.get("commit") or part.get("settings", {}).get("commit", "unknown")


def performance_goals(parts: dict[str, Any]) -> dict[str, Any]:
    """The second performance round's goals (docs/performance.md), each with its measured value, its target, whether it is met and the commit it was
    measured at (``None`` where its benchmark has not run)."""

    def goal(part: str, value: Any, target: float, below: bool = True) -> dict[str, Any] | None:
        if value is None or parts.get(part) is None:
            return None
        return {
            "value": value,
            "target": target,
            "at_most": below,
            "met": bool(value <= target if below else value >= target),
            "commit": measured_commit(parts[part]),
            "from": PARTS[part],
        }

    trl = (parts.get("trl") or {}).get("summary", {})
    smollm2 = trl.get("smollm2", {}).get("ours_s", {})
    # bench-trl's equal-work smollm2 entry (since 2026-12-07): its own run, or the full comparison's entry
    fair_part = "trl_smollm2" if parts.get("trl_smollm2") else "trl"
    fair = ((parts.get(fair_part) or {}).get("summary") or {}).get("smollm2", {}).get("fair", {})
    # the proxy's cost at compute_freq=5 in a real training run of SmolLM2 (the TRL entry runs it every step)
    smollm2_proxy = smollm2["proxy"] / (5 * (smollm2["step"] - smollm2["proxy"])) if smollm2.get("proxy") else None
    limit = (parts.get("dtype") or {}).get("limit", {})
    scaling = (parts.get("scaling_smollm2") or {}).get("rows", {})
    base = scaling.get("base", {}).get("step")
    experiment = (parts.get("experiment") or {}).get("summary", {})
    return {
        "1_trl_tiny_head_ratio": goal("trl", trl.get("natural", {}).get("ratio_ours_over_trl"), 0.8),
        "2_trl_smollm2_ratio": goal("trl", trl.get("smollm2", {}).get("ratio_ours_over_trl"), 0.8),
        "3_proxy_cost_at_compute_freq_5_tiny": goal("proxy", (parts.get("proxy") or {}).get("cost_at_compute_freq"), 0.08),
        "3_proxy_cost_at_compute_freq_5_smollm2": goal("trl", smollm2_proxy, 0.08),
        "4_smollm2_update_fraction_of_matmul_limit_fp32": goal("dtype", limit.get("float32", {}).get("update_fraction"), 0.5, below=False),
        "4_smollm2_update_fraction_of_matmul_limit_bf16": goal("dtype", limit.get("bfloat16", {}).get("update_fraction"), 0.5, below=False),
        "5_smollm2_scaling_step_over_base": {name: row["step"] / base for name, row in scaling.items()} if base else None,
        "6_smollm2_experiment_iteration_over_pilot": goal("experiment", experiment.get("ratio"), 0.5),
        "6_smollm2_experiment_peak_gib": goal("experiment", (experiment.get("peak_gib") or {}).get("prereg"), 8.0),
        # issue 64: equal tokens on both sides, the proxy at its default cadence, each side's best CPU dtype
        "7_trl_smollm2_equal_work_ratio": goal(fair_part, fair.get("ratio_every5_over_trl") if fair.get("equal_tokens") else None, 0.5),
        "7_smollm2_update_fraction_of_bf16_limit": goal(
            fair_part, ((fair.get("phases") or {}).get("ours_every5") or {}).get("update", {}).get("fraction_of_limit"), 0.6, below=False
        ),
    }


def goal_lines(goals: dict[str, Any]) -> list[str]:
    """``latest.md``'s first table: each performance goal with its value, target and commit."""
    lines = [
        "## Performance goals (docs/performance.md)",
        "",
        "| goal | value | target | met | measured at | made by |",
        "|---|---|---|---|---|---|",
    ]
    for name, g in goals.items():
        if g is None:
            lines.append(f"| {name} | not measured | | | | |")
        elif "value" not in g:  # the scaling rows: step time over the base row's
            lines.append(f"| {name} | " + ", ".join(f"{row} {ratio:.2f}" for row, ratio in g.items()) + " | measured | | | |")
        else:
            bound = "at most" if g["at_most"] else "at least"
            lines.append(
                f"| {name} | {g['value']:.3f} | {bound} {g['target']} | {'yes' if g['met'] else 'no'} | `{g['commit']}` | `{g['from']}` |"
            )
    return [*lines, ""]


def iteration_lines(r: dict[str, Any]) -> list[str]:
    base, cur, ratio = r["phases_s"]["baseline"], r["phases_s"]["current"], r["ratio_current_over_baseline"]
    lines = [
        f"One RL iteration, current vs `{r['baseline_commit']}` (the code before the performance work), "
        f"{r['repeats']} alternating pair(s), {r['threads']} thread(s), {r.get('clock', 'wall')} clock: `{' '.join(r['config'])}`",
        "",
        "| phase | before (s) | now (s) | now / before |",
        "|---|---|---|---|",
    ]
    for phase in r["phases"]:
        lines.append(
            f"| {PHASE_NAMES.get(phase, phase)} | {_fmt(base[phase])} | {_fmt(cur[phase])} | {_fmt(ratio.get(phase, float('nan')))} |"
        )
    val = r.get("validation")
    lines += [
        "",
        f"Validation: one held-out evaluation (the config's episodes and temperatures), mean of {val['evaluations']} in the last pair; "
        "not part of an iteration's time."
        if val
        else "Validation not timed (`--no-validation`).",
        f"Rollout tokens/s: before {base['tokens_per_s']:.0f}, now {cur['tokens_per_s']:.0f}. "
        f"Peak memory of a training run: before {r['peak_rss_mib']['baseline']:.0f} MiB, now {r['peak_rss_mib']['current']:.0f} MiB.",
    ]
    lines += [
        "",
        "| roofline (1 thread; each shape the best of a probe before and one after the runs) | GFLOP/s | fraction |",
        "|---|---|---|",
    ]
    lines += [f"| `torch.matmul` {k} | {v:.1f} | |" for k, v in r["matmul_probe_gflops"].items()]
    for phase, info in r["achieved"].items():
        lines.append(f"| {phase}: {info['how']} | {info['gflops']:.1f} | **{info['fraction']:.0%}** of {info['of']} |")
    return lines


def proxy_lines(r: dict[str, Any]) -> list[str]:
    samplers = ", ".join(r.get("samplers_run", ["first_turn", "trajectory"]))
    lines = [
        f"MI proxy on one P={r['P']} x G={r['G']} batch ({r['repeats']} repeats, medians): {samplers} "
        f"{r['proxy_s']:.2f} s, {r['proxy_over_iteration']:.1%} of an iteration, "
        f"{r['cost_at_compute_freq']:.1%} at `compute_freq={r['compute_freq']}` (proxy / (compute_freq x iteration); "
        f"{r.get('share_at_compute_freq', float('nan')):.1%} of the time with the proxy counted in).",
    ]
    if "proxy_separate_s" in r:
        worst = max(r["bf16_max_abs_diff"].items(), key=lambda kv: kv[1], default=("-", float("nan")))
        lines += [
            "",
            f"- pairs shared between samplers: {r['proxy_s']:.2f} s against {r['proxy_separate_s']:.2f} s scored "
            f"sampler by sampler (**{r['shared_over_separate']:.2f}x**)",
            f"- forwards in bf16 (`diagnostics.proxy_dtype=bfloat16`): {r['proxy_bf16_s']:.2f} s (**{r['bf16_over_fp32']:.2f}x** "
            f"fp32), largest change to a z-score / MI estimate / retrieval: {worst[1]:.4f} (`{worst[0]}`)",
        ]
    if r.get("naive_s") is not None:
        lines += [
            "",
            "| cross-scoring | seconds |",
            "|---|---|",
            f"| cached (prompt KV computed once) | {r['cached_s']:.3f} |",
            f"| naive (every context + trace pair) | {r['naive_s']:.3f} |",
            f"| speedup | **{r['speedup']:.2f}x** |",
            f"| ideal (|X| + |Z|) / |Z| (mean |X| {r['mean_context_len']:.0f}, |Z| {r['mean_trace_len']:.0f}) | {r['ideal']:.2f}x |",
            f"| ideal counting one context forward per prompt | {r['ideal_with_prefill']:.2f}x |",
            f"| max abs difference of the two matrices | {r['max_abs_diff']:.1e} |",
        ]
    return lines


def filter_lines(r: dict[str, Any]) -> list[str]:
    lines = [
        f"Update time on one P={r['P']} x G={r['G']} batch by rho (`top_p` on reward variance, {r['repeats']} interleaved repeats, medians):",
        "",
        "| rho | groups kept | update (s) | / rho=1 |",
        "|---|---|---|---|",
    ]
    lines += [f"| {row['rho']:g} | {row['kept']} of {r['P']} | {row['median_s']:.3f} | {row['ratio']:.2f} |" for row in r["rows"]]
    return lines


def rollout_lines(r: dict[str, Any]) -> list[str]:
    lines = [f"Rollout P={r['P']} x G={r['G']}: {r['rollout_s']:.2f} s, {r['tokens_per_s']:.0f} generated tokens/s."]
    if r.get("kv_reuse"):
        kv = r["kv_reuse"]
        lines.append(
            f"KV cache kept across turns: {kv['reused_s']:.2f} s vs re-encoding {kv['full_s']:.2f} s "
            f"(ratio {kv['ratio']:.2f}, {kv['pairs']} pairs; same tokens: {kv['same_tokens']})."
        )
    lines += ["", "| warm-start success | T | rate | 95% CI | n |", "|---|---|---|---|---|"]
    lines += [
        f"| {row['label']} | {row['temperature']:g} | {row['rate']:.3f} | [{row['ci'][0]:.3f}, {row['ci'][1]:.3f}] | {row['n']} |"
        for row in r["success"]
    ]
    return lines


def trl_lines(r: dict[str, Any]) -> list[str]:
    s = r["settings"]
    lines = [
        f"Ours vs TRL's `GRPOTrainer` ({s['threads']} threads, MI proxy every step on ours, {s['pairs_run']} alternating pair(s)):",
        "",
        "| model (vocabulary) | P x G, new tokens | ours (s) | TRL (s) | ours / TRL | goal <= 0.8 |",
        "|---|---|---|---|---|---|",
    ]
    for name, v in r["summary"].items():
        size = f"{v.get('P', s['P'])} x {v.get('G', s['G'])}, {v.get('max_new_tokens', s['max_new_tokens'])}"  # older results: one size
        lines.append(
            f"| {name} ({v['vocab']}) | {size} | {v['ours_s']['step']:.2f} | {v['trl_s']['step']:.2f} | "
            f"**{v['ratio_ours_over_trl']:.2f}** | {'met' if v['goal_0_8_met'] else 'not met'} |"
        )
    return lines


def trl_smollm2_lines(r: dict[str, Any]) -> list[str]:
    """bench-trl's equal-work smollm2 entry, as its own trl_smollm2.md shows it."""
    from benchmarks.bench_trl import fair_lines

    return fair_lines(r["summary"]["smollm2"])[1:]


def scaling_lines(r: dict[str, Any]) -> list[str]:
    rows = r["rows"]
    base = rows["base"]
    lines = [
        "| row | turns | response tokens | step (s) | step / base | MI proxy (s) | MI proxy / base | peak RSS (MiB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['turns']:.2f} | {row['response_tokens']:.1f} | {row['step']:.2f} | {row['step'] / base['step']:.2f} | "
            f"{row['proxy_step']:.2f} | {row['proxy_step'] / base['proxy_step']:.2f} | {row['peak_mib']:.0f} |"
        )
    return lines


def warm_start_lines(r: dict[str, Any]) -> list[str]:
    lines = [
        f"`{' '.join(r['model_overrides'])}`: held-out maps, one trajectory each (the untuned model on fewer: it decodes to the budget).",
        "",
        "| env | policy | T | success | 95% CI | format valid | grounding | n | policy ready (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r["rows"]:
        lines.append(
            f"| {row['env']} | {'warm-started' if row['warm_start'] else 'untuned'} | {row['temperature']:g} | {row['success']:.3f} | "
            f"[{row['success_ci'][0]:.3f}, {row['success_ci'][1]:.3f}] | {row['format_valid_rate']:.2f} | {_fmt(row['state_grounding'])} | "
            f"{row['n']} | {row['policy_ready_s']:.0f} |"
        )
    return lines


def dtype_lines(r: dict[str, Any]) -> list[str]:
    m, ratio = r["median"], r["ratio_bf16_over_fp32"]
    lines = ["| weights | rollout (s) | tokens/s | scoring (s) | update (s) |", "|---|---|---|---|---|"]
    for dtype in ("float32", "bfloat16"):
        v = m[dtype]
        lines.append(f"| {dtype} | {v['rollout_s']:.1f} | {v['tokens_per_s']:.0f} | {v['scoring_s']:.1f} | {v['update_s']:.1f} |")
    lines += [
        "",
        f"bf16 / fp32 time: rollout {ratio['rollout_s']:.2f}, scoring {ratio['scoring_s']:.2f}, update {ratio['update_s']:.2f} "
        f"(median of {r['repeats']}); mean |log p bf16 - log p fp32| of the sampled tokens {r['logp_abs_diff']:.4f} nats.",
    ]
    if "limit" in r:  # the matmul limit at the model's own shapes, and the update's profile
        lines += [
            "",
            f"Against `torch.matmul` at the passes' own shapes ({r['rows_per_micro_batch']:.0f} positions a micro-batch, "
            f"{r['head_rows_per_micro_batch']:.0f} through the head; gradient checkpointing {'on' if r['gradient_checkpointing'] else 'off'}):",
            "",
            "| weights | scoring: probe (s) | fraction of the limit | update: probe (s) | fraction of the limit | matmul kernels' share of the update |",
            "|---|---|---|---|---|---|",
        ]
        for dtype, v in r["limit"].items():
            prof = r.get("update_profile", {}).get(dtype)
            share = f"{prof['matmul_share']:.0%}" if prof else "-"
            lines.append(
                f"| {dtype} | {v['scoring_probe_s']:.1f} | {v['scoring_fraction']:.0%} | {v['update_probe_s']:.1f} | **{v['update_fraction']:.0%}** | {share} |"
            )
        for dtype, prof in r.get("update_profile", {}).items():
            lines += [
                "",
                f"{dtype} update, top operators by self time: " + ", ".join(f"`{t['op']}` {t['share']:.0%}" for t in prof["top"][:8]),
            ]
    return lines


def engines_lines(r: dict[str, Any]) -> list[str]:
    lines = ["| engine | dtype | rollout (s) | generated tokens/s |", "|---|---|---|---|"]
    for name in ("hf", "vllm"):
        lines.append(f"| {name} | {r[name + '_dtype']} | {r[name]['rollout_s']:.1f} | {r[name]['tokens_per_s']:.0f} |")
    lines += [
        "",
        f"{r['model']}, {r['env']}, P={r['P']} x G={r['G']}, {r['max_new_tokens']}-token budget, {r['threads']} threads; "
        f"vLLM / hf rollout time {r['ratio_vllm_over_hf_time']:.2f} (median of {r['rounds']}), vLLM start-up {r['vllm_startup_s']:.1f} s.",
    ]
    return lines


def experiment_lines(r: dict[str, Any]) -> list[str]:
    s = r["summary"]
    lines = ["| arm | iteration, evaluation included (s) | update (s) | peak (GiB) |", "|---|---|---|---|"]
    for arm in r["arms"]:
        runs = r["runs"][arm]
        lines.append(f"| {arm} | {s['iteration_s'][arm]:.1f} | {runs[0]['update_s']:.1f} | {s['peak_gib'][arm]:.1f} |")
    return [
        *lines,
        "",
        f"pre-registered / pilot: {s['ratio']:.2f}x an iteration at each one's evaluation cadence, {s['ratio_at_baseline_cadence']:.2f}x "
        f"at the pilot's; update {s['update_ratio']:.2f}x ({r['steps']} iterations a run, {r['repeats']} round(s)).",
    ]


def cli_lines(r: dict[str, Any]) -> list[str]:
    names = {
        "help": "`train --help`",
        "cfg_job": "`train --cfg job`",
        "bad_override": "a bad key's error",
        "bad_name": "a bad name's error",
        "doctor_first_line": "`doctor`'s first line",
    }
    lines = ["| command | wall (s) | peak (MiB) |", "|---|---|---|"]
    lines += [f"| {label} | {r['now'][c]['median_s']:.2f} | {r['now'][c]['median_peak_mib']:.0f} |" for c, label in names.items()]
    c = r["now"]["compose"]
    heavy = ", ".join(c["heavy"]) or "no torch, transformers, peft or Lightning"
    return [
        *lines,
        "",
        f"Median of {r['repeats']} (1-min load {r['load_1min']:.1f}); composing the default config: {c['compose_s']:.2f} s, {heavy}.",
    ]


RENDER = {
    "iteration": ("Iteration: phases, tokens/s, roofline, peak memory", iteration_lines),
    "proxy": ("MI proxy: cached vs naive cross-scoring", proxy_lines),
    "proxy_smollm2": ("MI proxy on SmolLM2-135M (`make bench-proxy-smollm2`)", proxy_lines),
    "filter": ("SNR-aware filtering: update time by rho", filter_lines),
    "rollout": ("Rollout and warm start", rollout_lines),
    "trl": ("Against TRL", trl_lines),
    "trl_smollm2": ("Against TRL on SmolLM2 at equal work (issue 64)", trl_smollm2_lines),
    "scaling": ("Scaling (`make bench-scaling`)", scaling_lines),
    "scaling_smollm2": ("Scaling, SmolLM2-135M (`make bench-scaling ARGS='--model smollm2'`)", scaling_lines),
    "warm_start": ("A real model's warm start (`make bench-warm-start`)", warm_start_lines),
    "dtype": ("float32 vs bfloat16 weights (`make bench-dtype`)", dtype_lines),
    "engines": ("Rollout engines: transformers vs vLLM (`make bench-engines`)", engines_lines),
    "experiment": ("The SmolLM2 experiment's iteration: pilot vs pre-registered (`make bench-experiment`)", experiment_lines),
    "cli": ("The command line's quick answers (`make bench-cli`)", cli_lines),
}


# -- the iteration's regression check ---------------------------------------------------------------
BEST_ITERATION = "iteration_best.json"  # kept in git: the lowest iteration ratio measured, and its pairs
MIN_NOISE = 0.05  # relative: the smallest spread taken as this machine's run-to-run noise (two pairs can agree by chance)


def pair_ratios(r: dict[str, Any]) -> list[float]:
    """Each alternating pair's ratio of mean iteration times (steps 2.., as the headline ratio)."""
    out = []
    for base, cur in zip(r["raw"]["baseline"], r["raw"]["current"]):
        b, c = base["step"][1:], cur["step"][1:]
        if b and c:
            out.append((sum(c) / len(c)) / (sum(b) / len(b)))
    return out


def iteration_record(r: dict[str, Any]) -> dict[str, Any]:
    """What the regression check keeps of an iteration result."""
    keys = ("commit", "measured_at", "command", "config", "baseline_commit", "threads", "repeats", "clock")
    return {**{k: r.get(k) for k in keys}, "ratio": r["ratio_current_over_baseline"]["step"], "pair_ratios": pair_ratios(r)}


def iteration_regression(latest: dict[str, Any], best: dict[str, Any] | None) -> dict[str, Any]:
    """The latest iteration ratio against the best committed one. The noise is the larger relative spread of
    the pair ratios within either run (at least ``MIN_NOISE``): a ratio above ``best * (1 + noise)`` regressed."""
    now = iteration_record(latest)
    if best is None:
        return {"verdict": "no best result yet", "now": now, "best": None}
    same = all(now[k] == best.get(k) for k in ("config", "baseline_commit", "threads")) and (now["clock"] or "wall") == (
        best.get("clock") or "wall"
    )
    if not same:
        return {"verdict": "not comparable (another config, baseline, thread count or clock)", "now": now, "best": best}

    def spread(pairs: list[float]) -> float:
        return (max(pairs) - min(pairs)) / min(pairs) if len(pairs) > 1 else 0.0

    noise = max(spread(now["pair_ratios"]), spread(best.get("pair_ratios") or []), MIN_NOISE)
    limit = best["ratio"] * (1 + noise)
    verdict = "regressed" if now["ratio"] > limit else ("new best" if now["ratio"] < best["ratio"] else "within noise")
    return {"verdict": verdict, "now": now, "best": best, "noise": noise, "limit": limit}


def regression_lines(check: dict[str, Any]) -> list[str]:
    now, best = check["now"], check["best"]
    pairs = ", ".join(f"{x:.2f}" for x in now["pair_ratios"])
    if best is None or "limit" not in check:
        return [f"Iteration regression check: {check['verdict']} (now {now['ratio']:.2f}x, pairs {pairs}).", ""]
    head = "**REGRESSED**" if check["verdict"] == "regressed" else check["verdict"]
    return [
        f"Iteration regression check: {head}: now {now['ratio']:.2f}x the old code (pairs {pairs}) at `{now['commit']}`; "
        f"best committed {best['ratio']:.2f}x at `{best['commit']}`; noise {check['noise']:.0%}, so the limit is {check['limit']:.2f}x.",
        "",
    ]


def check_iteration(results: Path, parts: dict[str, Any]) -> dict[str, Any] | None:
    """Compare this run's iteration with the best committed one; a new best is written for committing."""
    latest = parts.get("iteration")
    if not latest or "raw" not in latest:
        return None
    best = load(results, BEST_ITERATION.removesuffix(".json"))
    check = iteration_regression(latest, best)
    if check["verdict"] in ("new best", "no best result yet"):
        (results / BEST_ITERATION).write_text(json.dumps(check["now"], indent=2))
    return check


def load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--results", default=str(RESULTS), help="folder of the <name>.json files; latest.json and latest.md go there too")


def main(args: argparse.Namespace, save: Results) -> None:
    results = Path(args.results)
    parts = {name: load(results, name) for name in PARTS}
    head = commit()
    lines = [f"# Benchmarks: the latest result of each (report written at {head})", ""]
    summary: dict[str, Any] = {"report_commit": head, "parts": {}}
    for name, (title, render) in RENDER.items():
        part = parts[name]
        lines += [f"## {title}", ""]
        if part is None:
            lines += [f"Not measured here yet: `{PARTS[name]}`.", ""]
            continue
        when = part.get("measured_at") or part.get("settings", {}).get("measured_at", "unknown date")
        where = measured_commit(part)
        stale = f" (the code has changed since: re-run `{PARTS[name]}` to refresh)" if code_changed_since(where) else ""
        lines += [f"Measured {when} at `{where}`{stale}.", ""]
        try:
            lines += [*render(part), ""]
        except (KeyError, TypeError) as exc:  # a result written by an older version of its script
            lines += [f"Could not read `{name}.json` ({type(exc).__name__}: {exc}); re-run `{PARTS[name]}`.", ""]
        summary["parts"][name] = part
    summary["headline"] = headline(summary["parts"])
    check = check_iteration(results, summary["parts"])
    summary["iteration_regression"] = check
    lines[2:2] = [*goal_lines(summary["headline"]["performance_goals"]), *(regression_lines(check) if check else [])]
    (results / "latest.json").write_text(json.dumps(summary, indent=2, default=str))
    (results / "latest.md").write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {results / 'latest.json'} and {results / 'latest.md'}")
    if check and check["verdict"] in ("new best", "no best result yet"):
        print(f"a new best iteration ratio: commit {results / BEST_ITERATION} so later runs are checked against it")
    if check and check["verdict"] == "regressed":
        raise SystemExit(f"REGRESSED: {regression_lines(check)[0]}")


BENCHMARK = Benchmark("latest", __doc__, main, flags, out=None, overrides=None)

if __name__ == "__main__":
    run(BENCHMARK)
