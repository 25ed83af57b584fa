"""PNG plots of finished runs, drawn with matplotlib's Agg canvas (no pyplot, no global backend).

* :func:`plot_trajectories`: MI proxy, conditional entropy and success against step for chosen runs,
  with each run's decline onsets (``agentcollapse.analysis.lag``) marked;
* :func:`plot_curves`: any metrics against step, one panel each, every run, coloured by its arm;
* :func:`plot_regimes`: the four regimes (docs/method.md section 2), conditional entropy vs MI, coloured by success;
* :func:`plot_grad_buckets`: task vs regulariser gradient norm by reward-variance bucket (docs/method.md section 4);
* :func:`plot_forest`: the Spearman table with its intervals and the paper's values;
* :func:`plot_simulator`: the template-collapse simulator sweep, H(Z|X) vs retrieval accuracy and MI.

Each writes one PNG and returns its path.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from agentcollapse.analysis.lag import lag_table
from agentcollapse.analysis.paper import HEADLINE_MI, SUCCESS
from agentcollapse.analysis.runs import RunSet

__all__ = [
    "CURVE_METRICS",
    "choose_runs",
    "plot_curves",
    "plot_forest",
    "plot_grad_buckets",
    "plot_regimes",
    "plot_simulator",
    "plot_trajectories",
]

COND_ENTROPY = "collapse_trajectory_sample/conditional_entropy_est"
# What template collapse moves (docs/method.md sections 2-3), beside held-out success: the MI proxy family (first turn,
# trajectory, beyond copying), what entropy monitoring sees, and whether the reasoning stays true
CURVE_METRICS = (
    SUCCESS,
    "val/success_rate_t1",
    HEADLINE_MI,
    "collapse_first_turn_sample/mi_zscore_ema",
    "collapse_first_turn_nocopy_sample/mi_zscore_ema",  # trajectory_nocopy is opt-in (diagnostics.skip_samplers)
    "collapse_first_turn_sample/retrieval_accuracy",
    COND_ENTROPY,
    "actor/entropy",
    "rollout/state_grounding",
)


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110)
    return path


def _placeholder(path: str | Path, title: str, text: str) -> Path:
    fig = Figure(figsize=(6, 2.5), layout="constrained")
    ax = fig.add_subplot()
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=10)
    return _save(fig, path)


def choose_runs(runset: RunSet, n: int = 6, by: str = f"peak/{SUCCESS}") -> list[str]:
    """Up to ``n`` run ids spread over the range of ``by`` (best, worst and between)."""
    runs = runset.runs
    if runs.empty:
        return []
    if by not in runs:
        return list(runs["run_id"][:n])
    ranked = runs.sort_values(by, ascending=False, na_position="last")["run_id"].tolist()
    if len(ranked) <= n:
        return ranked
    picks = np.unique(np.linspace(0, len(ranked) - 1, n).round().astype(int))
    return [ranked[i] for i in picks]


def _label(runset: RunSet, run_id: str) -> str:
    run = runset.runs.loc[run_id]
    axes = [a for a in runset.axes if not a.startswith("sweep/")]
    if "filter" in axes:  # the arm label already says what the filter.* keys do
        axes = [a for a in axes if not a.startswith("filter.")]
    axes = axes[:4]
    bits = []
    for a in axes:
        v = run.get(a)
        short = a.split(".")[-1]
        bits.append(f"{short}={v:g}" if isinstance(v, float) and math.isfinite(v) else f"{short}={v}")
    return f"{run_id}" + (f" ({', '.join(bits)})" if bits else "")


def plot_trajectories(
    runset: RunSet,
    path: str | Path,
    run_ids: Sequence[str] | None = None,
    mi: str = HEADLINE_MI,
    entropy: str = COND_ENTROPY,
    success: str = SUCCESS,
) -> Path:
    """Three stacked panels against step: ``mi`` (undefined steps at chance, dotted), ``entropy`` and
    ``success``; a triangle marks each run's decline onsets as ``lag.lag_table`` defines them."""
    run_ids = list(run_ids) if run_ids is not None else choose_runs(runset)
    h = runset.history
    fig = Figure(figsize=(8, 8.5), layout="constrained")
    axs = fig.subplots(3, 1, sharex=True)
    colours = [f"C{i % 10}" for i in range(len(run_ids))]
    lags = lag_table(runset, mi=mi, success=success).set_index("run_id")
    onsets = {(r, mi): lags.loc[r, "mi_onset"] for r in run_ids if r in lags.index}
    onsets |= {(r, success): lags.loc[r, "success_onset"] for r in run_ids if r in lags.index}
    panels = [
        (axs[0], mi, "MI proxy\n" + mi.split("/")[-1]),
        (axs[1], entropy, "conditional entropy\n(nats/token)"),
        (axs[2], success, success),
    ]
    for run_id, colour in zip(run_ids, colours):
        mine = h[h["run_id"] == run_id]
        for ax, metric, _ in panels:
            plain = mine[mine["metric"] == metric].sort_values("step")
            chance = mine[mine["metric"] == metric + "@chance"].sort_values("step") if metric == mi else plain.iloc[0:0]
            if len(chance):
                ax.plot(chance["step"], chance["value"], ls=":", color=colour, lw=1.2)
            label = _label(runset, run_id) if ax is axs[2] else None
            if len(plain):
                ax.plot(plain["step"], plain["value"], marker="o", ms=3, color=colour, lw=1.5, label=label)
            series = chance if len(chance) else plain
            t = onsets.get((run_id, metric), math.nan)
            if math.isfinite(t) and (series["step"] == t).any():
                y = float(series.loc[series["step"] == t, "value"].iloc[0])
                ax.plot([t], [y], marker="v", ms=9, color=colour, mec="black")
    for ax, metric, ylabel in panels:
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if not (h["metric"] == metric).any() and not (h["metric"] == metric + "@chance").any():
            ax.text(0.5, 0.5, f"{metric} not logged", transform=ax.transAxes, ha="center", va="center", color="grey")
    axs[2].set_xlabel("RL iteration (step 0: warm start)")
    axs[0].set_title("MI, conditional entropy and held-out success per run (v: onset of a sustained decline; dotted: MI at chance)")
    if run_ids:
        axs[2].legend(fontsize=7, loc="best")
    axs[0].title.set_fontsize(9)
    return _save(fig, path)


def plot_curves(runset: RunSet, path: str | Path, metrics: Sequence[str] = CURVE_METRICS, arm: str = "filter") -> Path:
    """One panel per metric against step, every run a line: colour by its ``arm`` (a run-frame column,
    e.g. the filter), line style by seed, so arms compare seed by seed. Metrics no run logged are left out."""
    h = runset.history
    metrics = [m for m in metrics if (h["metric"] == m).any()] if len(h) else []
    if not metrics:
        return _placeholder(path, "curves", "none of the metrics was logged")
    runs = runset.runs
    arms = sorted(runs[arm].astype(str).unique()) if arm in runs else ["all"]
    seeds = sorted(runs["seed"].unique()) if "seed" in runs else [None]
    styles = ["-", "--", ":", "-."]
    ncols = 3
    nrows = math.ceil(len(metrics) / ncols)
    fig = Figure(figsize=(4.2 * ncols, 2.9 * nrows), layout="constrained")
    axs = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True)).ravel()
    for ax, metric in zip(axs, metrics):
        for run_id in runs["run_id"]:
            run = runs.loc[run_id]
            colour = f"C{arms.index(str(run[arm])) % 10}" if arm in runs else "C0"
            style = styles[seeds.index(run["seed"]) % len(styles)] if "seed" in runs else "-"
            series = h[(h["run_id"] == run_id) & (h["metric"] == metric)].sort_values("step")
            label = f"{arm}={run[arm]}" + (f" seed {run['seed']}" if "seed" in runs else "") if arm in runs else run_id
            ax.plot(series["step"], series["value"], ls=style, marker="o", ms=3, color=colour, lw=1.4, label=label)
        ax.set_title(metric, fontsize=8)
        ax.grid(alpha=0.3)
    for ax in axs[len(metrics) :]:
        ax.axis("off")
    axs[0].legend(fontsize=6, loc="best")
    for ax in axs[max(0, len(metrics) - ncols) : len(metrics)]:
        ax.set_xlabel("RL iteration (step 0: warm start)")
    return _save(fig, path)


def plot_regimes(
    runset: RunSet,
    path: str | Path,
    mi: str = f"final/{HEADLINE_MI}",
    entropy: str = f"final/{COND_ENTROPY}",
    success: str = f"peak/{SUCCESS}",
) -> Path:
    """Each run at (conditional entropy, MI), coloured by ``success``, with the four regimes marked by
    the medians (docs/method.md section 2). A run with undefined MI is drawn at MI's chance value (hollow)."""
    runs = runset.runs
    x = pd.to_numeric(runs.get(entropy, pd.Series(np.nan, index=runs.index)), errors="coerce")
    y = pd.to_numeric(runs.get(mi, pd.Series(np.nan, index=runs.index)), errors="coerce")
    yc = pd.to_numeric(runs.get(mi + "@chance", y), errors="coerce")
    c = pd.to_numeric(runs.get(success, pd.Series(np.nan, index=runs.index)), errors="coerce")
    ok = x.notna() & yc.notna()
    if not ok.any():
        return _placeholder(path, "Four regimes", f"no run has both {entropy} and {mi}")
    fig = Figure(figsize=(7, 5.5), layout="constrained")
    ax = fig.add_subplot()
    defined = ok & y.notna()
    chance = ok & y.isna()
    vmin, vmax = (float(np.nanmin(c)), float(np.nanmax(c))) if c.notna().any() else (0.0, 1.0)
    if vmin == vmax:
        vmin, vmax = vmin - 0.05, vmax + 0.05
    sc = ax.scatter(x[defined], y[defined], c=c[defined], cmap="viridis", vmin=vmin, vmax=vmax, s=60, edgecolors="black")
    if chance.any():
        ax.scatter(x[chance], yc[chance], facecolors="none", edgecolors="red", s=70, label="MI undefined (at chance)")
        ax.legend(fontsize=8, loc="center right")
    fig.colorbar(sc, ax=ax, label=success)
    mx, my = float(x[ok].median()), float(yc[ok].median())
    ax.axvline(mx, color="grey", ls="--", lw=1)
    ax.axhline(my, color="grey", ls="--", lw=1)
    for tx, ty, text, ha, va in [
        (0.98, 0.98, "diverse reasoning", "right", "top"),
        (0.98, 0.02, "template collapse", "right", "bottom"),
        (0.02, 0.98, "compressed reasoning", "left", "top"),
        (0.02, 0.02, "low-entropy collapse", "left", "bottom"),
    ]:
        ax.text(tx, ty, text, transform=ax.transAxes, ha=ha, va=va, fontsize=9, color="dimgrey", style="italic")
    ax.set_xlabel(f"H(Z|X): {entropy}")
    ax.set_ylabel(f"I(X;Z): {mi}")
    ax.set_title("Four regimes (lines: medians across runs)", fontsize=10)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_simulator(frame: pd.DataFrame, path: str | Path) -> Path:
    """The simulator sweep (one row per template weight, diversity and seed, as
    ``python -m scripts.collapse_simulator_demo --out`` writes it): conditional entropy against retrieval
    accuracy (left, with its chance level) and against the MI estimate (right), coloured by template
    weight, one marker per diversity. Template collapse is the move down at constant entropy."""
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    axs = fig.subplots(1, 2)
    markers = {d: m for d, m in zip(sorted(frame["diversity"].unique()), "osD^v")}
    for ax, y, label in ((axs[0], "retrieval_accuracy", "retrieval accuracy"), (axs[1], "mi_estimate", "MI estimate (nats/token)")):
        for d, marker in markers.items():
            part = frame[frame["diversity"] == d]
            sc = ax.scatter(
                part["conditional_entropy_est"],
                part[y],
                c=part["template_weight"],
                cmap="plasma",
                vmin=0,
                vmax=1,
                marker=marker,
                s=55,
                edgecolors="black",
                label=f"diversity {d:g}",
            )
        if y == "retrieval_accuracy":
            ax.axhline(float(frame["retrieval_chance_level"].mean()), color="grey", ls="--", lw=1, label="chance (1/P)")
        ax.set_xlabel("H(Z|X) estimate (nats/token)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.colorbar(sc, ax=axs, label="template weight w")
    fig.suptitle("Template-collapse simulator: input dependence falls with w while H(Z|X) stays put", fontsize=10)
    return _save(fig, path)


def grad_bucket_frame(runset: RunSet) -> pd.DataFrame:
    """Per bucket: mean (over steps, then runs) task and regulariser gradient norms and RV, with the
    spread across runs (std) and the number of runs."""
    h = runset.history
    pattern = re.compile(r"^grad_bucket/(\d+)/(task_norm|reg_norm|rv_mean)$")
    g = h[h["metric"].str.match(pattern.pattern)] if len(h) else h
    if g.empty:
        return pd.DataFrame(columns=["bucket", "task_norm", "task_norm_std", "reg_norm", "reg_norm_std", "rv_mean", "runs"])
    parts = g["metric"].str.extract(pattern.pattern)
    g = g.assign(bucket=parts[0].astype(int), what=parts[1])
    per_run = g.groupby(["run_id", "bucket", "what"])["value"].mean().unstack("what")
    agg = per_run.groupby("bucket").agg(["mean", "std", "count"])
    out = pd.DataFrame({"bucket": agg.index})
    for what in ("task_norm", "reg_norm", "rv_mean"):
        if what in agg.columns.get_level_values(0):
            out[what] = agg[(what, "mean")].to_numpy()
            out[f"{what}_std"] = agg[(what, "std")].to_numpy()
        else:
            out[what] = out[f"{what}_std"] = np.nan
    out["runs"] = agg[(agg.columns.get_level_values(0)[0], "count")].to_numpy()
    return out


def plot_grad_buckets(runset: RunSet, path: str | Path) -> Path:
    """Grouped bars: task vs regulariser gradient norm per RV bucket (0 = lowest RV), error bars the
    std across runs; the paper: task norm rises with RV, regulariser norm stays flat."""
    frame = grad_bucket_frame(runset)
    if frame.empty:
        return _placeholder(
            path, "Gradient norm by RV bucket", "no grad_bucket/* metrics in these runs\n(train with callbacks=with_grad_buckets)"
        )
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    b = frame["bucket"].to_numpy()
    w = 0.38
    ax.bar(b - w / 2, frame["task_norm"], w, yerr=frame["task_norm_std"].fillna(0), capsize=3, label="task (policy gradient)", color="C0")
    ax.bar(b + w / 2, frame["reg_norm"], w, yerr=frame["reg_norm_std"].fillna(0), capsize=3, label="regulariser (KL + entropy)", color="C3")
    labels = [f"{k}\nRV {rv:.2g}" if math.isfinite(rv) else str(k) for k, rv in zip(b, frame["rv_mean"])]
    ax.set_xticks(b, labels, fontsize=8)
    ax.set_xlabel("reward-variance bucket (0 = lowest RV)")
    ax.set_ylabel("gradient norm (LoRA parameters)")
    ax.set_title(f"Task vs regulariser gradient by RV bucket ({int(frame['runs'].max())} runs, mean over steps)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def plot_forest(table: pd.DataFrame, path: str | Path, group: str = "all") -> Path:
    """The Spearman table (``correlations.spearman_table``) as a forest plot, one panel per target:
    rho with its bootstrap interval, the paper's value or band in red, the verdict in the title."""
    table = table[table["group"] == group] if "group" in table else table
    targets = list(dict.fromkeys(table["target"]))
    if table.empty:
        return _placeholder(path, "Spearman correlations", "no diagnostic could be correlated")
    diags = list(dict.fromkeys(table[table["target"] == targets[0]]["diagnostic"]))[::-1]
    fig = Figure(figsize=(5.2 * len(targets) + 2.5, 0.38 * len(diags) + 1.6), layout="constrained")
    axs = fig.subplots(1, len(targets), sharey=True, squeeze=False)[0]
    ypos = {d: i for i, d in enumerate(diags)}
    for ax, target in zip(axs, targets):
        block = table[table["target"] == target]
        for row in block.itertuples(index=False):
            y = ypos.get(row.diagnostic)
            if y is None:
                continue
            if not math.isfinite(row.rho):
                why = "n < 3" if row.n < 3 else "constant across runs"
                ax.text(0.02, y, f"undefined ({why})", fontsize=7, color="grey", va="center")
            else:
                lo, hi = row.ci_low, row.ci_high
                if math.isfinite(lo) and math.isfinite(hi):
                    ax.plot([lo, hi], [y, y], color="black", lw=1.4)
                ax.plot([row.rho], [y], "o", color="C0", ms=6)
            if row.n_undefined and math.isfinite(row.rho_at_chance):
                ax.plot([row.rho_at_chance], [y], "s", mfc="none", color="C1", ms=6)
            if math.isfinite(row.paper_low):
                if row.paper_low == row.paper_high:
                    ax.plot([row.paper_low], [y], "x", color="red", ms=8, mew=2)
                else:
                    ax.plot([row.paper_low, row.paper_high], [y, y], color="red", lw=5, alpha=0.5)
        ax.axvline(0, color="grey", lw=1)
        ax.set_xlim(-1.05, 1.05)
        ax.set_ylim(-0.7, len(diags) - 0.3)
        ax.set_xlabel("Spearman rho")
        first = block.iloc[0]
        can = first["can_speak"]
        verdict = "cannot speak" if can is False or can == 0 else ("can speak" if can is True or can == 1 else "noise unknown")
        ax.set_title(
            f"{target}\n{int(block['n'].max())} runs, spread {first['target_spread']:.3f} vs noise {first['eval_se']:.3f}: {verdict}",
            fontsize=9,
            color="firebrick" if verdict == "cannot speak" else "black",
        )
        if verdict == "cannot speak":
            ax.set_facecolor("#f3eeee")
        ax.grid(alpha=0.3, axis="x")
    axs[0].set_yticks(range(len(diags)), diags, fontsize=7)
    fig.suptitle("o ours with 95% bootstrap CI, [] undefined MI at chance, x / band: paper (RAGEN-2)", fontsize=8)
    return _save(fig, path)
