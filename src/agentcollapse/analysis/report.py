"""Every table as CSV + Markdown (``make tables``), and the plots and a ``report.md`` (``make report``).

Tables and plots go to ``<out>/`` (``<sweep dir>/analysis/`` by default); ``report.md`` to the sweep
directory, linking them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from agentcollapse.analysis.ablations import filter_metric_table, main_table, quartile_table, slip_table
from agentcollapse.analysis.correlations import spearman_markdown, spearman_table
from agentcollapse.analysis.lag import lag_summary, lag_table
from agentcollapse.analysis.markdown import fmt, fmt_ci, md_table
from agentcollapse.analysis.paper import PAPER_SLIP, PAPER_TIME_CUT
from agentcollapse.analysis.plots import plot_curves, plot_forest, plot_grad_buckets, plot_regimes, plot_trajectories
from agentcollapse.analysis.runs import RunSet, load_runs, value_column

__all__ = ["ablation_markdown", "build_tables", "lag_markdown", "write_plots", "write_report", "write_tables"]


def _ci_view(table: pd.DataFrame, keys: Sequence[str], labels: Sequence[str], extra: Sequence[str] = ()) -> pd.DataFrame:
    """Markdown view: the key columns, n, each ``label`` as 'mean [lo, hi]', then ``extra`` columns."""
    view = table[list(keys) + ["n"]].copy()
    for lab in labels:
        view[lab] = [fmt_ci(m, lo, hi) for m, lo, hi in zip(table[lab], table[f"{lab}_ci_low"], table[f"{lab}_ci_high"])]
    for col in extra:
        view[col] = table[col]
    return view


def ablation_markdown(tables: dict[str, pd.DataFrame]) -> str:
    """The four ablation tables in Markdown, with what the paper found beside each."""
    out = []
    q = tables["quartile"]
    out.append("## Quartile ablation (train on one RV quartile; Q1 = highest RV)\n")
    if q.empty:
        out.append("_No quartile runs here (`filter=quartile filter.value=[0.25,0.5]` ... per quartile)._\n")
    else:
        labels = ["success", "mi_zscore_ema", "mi_estimate", "retrieval_accuracy", "conditional_entropy", "actor_entropy"]
        out.append(md_table(_ci_view(q, ["env", "algorithm", "quartile"], labels, ["paper_success", "paper_mi", "paper_entropy"])))
        out.append("Paper: success 21.1% (Q1) down to 11.0% (Q4); MI 0.95 down to 0.73; entropy not ordered (2.02 Q1, 1.87 Q4).\n")
    m = tables["main"]
    out.append("## Filter vs no filter (the paper's main table: peak held-out success, time per step)\n")
    if m.empty:
        out.append("_No runs._\n")
    else:
        view = _ci_view(m, ["env", "algorithm", "filter"], ["peak_success", "step_time_s"])
        view["gain vs none [95% CI]"] = [fmt_ci(d, lo, hi) for d, lo, hi in zip(m["gain"], m["gain_ci_low"], m["gain_ci_high"])]
        view["time cut"] = [f"{c:.0%}" if math.isfinite(c) else "-" for c in m["time_cut"]]
        view["paper (PPO) none -> filter"] = [
            f"{a:.1%} -> {b:.1%}" if math.isfinite(a) else "-" for a, b in zip(m["paper_no_filter"], m["paper_filter"])
        ]
        out.append(md_table(view))
        out.append(f"Paper: PPO on Qwen2.5-3B, filter top_p rho=0.9; filtering cut time per step by {PAPER_TIME_CUT}.\n")
    f = tables["filter_metric"]
    out.append("## Filter metric (what ranks the groups)\n")
    if f.empty or f["filter_metric"].nunique() < 2:
        out.append("_Fewer than two filter metrics here (`filter=rv_top_p|entropy|entropy_variance|length|trajectory|none`)._\n")
    if not f.empty:
        labels = ["peak_success", "final_success", "mi_zscore_ema", "retrieval_accuracy", "conditional_entropy"]
        out.append(md_table(_ci_view(f, ["env", "algorithm", "filter_metric"], labels, ["paper"])))
    s = tables["slip"]
    out.append("## Slip (filter advantage by FrozenLake slip)\n")
    if s.empty:
        out.append(f"_Runs here share one slip (sweep `env.kwargs.slip`). Paper: {PAPER_SLIP}._\n")
    else:
        view = s[["env", "algorithm", "slip", "filter", "n", "peak_success", "no_filter_success"]].copy()
        view["advantage [95% CI]"] = [fmt_ci(d, lo, hi) for d, lo, hi in zip(s["advantage"], s["advantage_ci_low"], s["advantage_ci_high"])]
        view[["final_success", "no_filter_final"]] = s[["final_success", "no_filter_final"]]
        view["final advantage [95% CI]"] = [
            fmt_ci(d, lo, hi) for d, lo, hi in zip(s["final_advantage"], s["final_advantage_ci_low"], s["final_advantage_ci_high"])
        ]
        out.append(md_table(view))
        out.append(f"Paper: {PAPER_SLIP}.\n")
    return "\n".join(out)


def lag_markdown(table: pd.DataFrame, summary: dict) -> str:
    out = ["## Does MI fall before success?\n"]
    counts = ("runs", "both", "mi_only", "success_only", "neither", "mi_first", "same_step", "success_first")
    summary = {k: int(v) if k in counts else v for k, v in summary.items()}
    if not len(table):
        return out[0] + "_No runs._\n"
    out.append(
        f"{summary['runs']} runs: MI and success both declined in {summary['both']}, MI only in {summary['mi_only']}, "
        f"success only in {summary['success_only']}, neither in {summary['neither']}. "
    )
    if summary["both"]:
        out.append(
            f"Where both declined, success's onset came a median {fmt(summary['median_lag'], 1)} iterations after MI's "
            f"(IQR {fmt(summary['lag_q25'], 1)} to {fmt(summary['lag_q75'], 1)}); MI first in {summary['mi_first']}, "
            f"same step in {summary['same_step']}, success first in {summary['success_first']} "
            f"(sign test p = {fmt(summary['sign_test_p'])}).\n"
        )
    else:
        out.append("No run shows both declines, so the lag is undefined here.\n")
    out.append("Paper: MI falls before success falls, while conditional entropy stays high.\n")
    out.append(
        "Onset rule (`agentcollapse.analysis.lag`): the first step from which the series stays at least "
        "delta below its running peak until the end of the run; delta = max(1/4 of the run's range, the noise floor: "
        "twice the binomial SE for success, 0 for MI); MI with undefined steps at chance.\n"
    )
    view = table[["run_id", "mi_onset", "success_onset", "lag", "category"]]
    out.append(md_table(view, digits=0))
    return "\n".join(out)


def build_tables(
    runset: RunSet, targets: Sequence[str] | None = None, *, stat: str = "mean", n_boot: int = 2000, seed: int = 0
) -> dict[str, pd.DataFrame]:
    """Every table by name: ``spearman``, ``quartile``, ``main``, ``filter_metric``, ``slip``, ``lag``,
    ``lag_summary`` (one row), ``runs`` (settings and held-out success per run) and ``skipped``."""
    tables = {
        "spearman": spearman_table(runset, targets, stat=stat, n_boot=n_boot, seed=seed),
        "quartile": quartile_table(runset),
        "main": main_table(runset),
        "filter_metric": filter_metric_table(runset),
        "slip": slip_table(runset),
    }
    tables["lag"] = lag_table(runset)
    tables["lag_summary"] = pd.DataFrame([lag_summary(tables["lag"])])
    cols = ["run_id", "status", "reason", "stopped_early", "env", "algorithm", "filter", "seed", *runset.axes]
    cols += [c for c in runset.runs.columns if c.startswith(("peak/val/", "final/val/"))]
    # Every column the Spearman table ranks, so its rho can be recomputed from runs.csv alone.
    for row in tables["spearman"][["diagnostic", "stat"]].drop_duplicates().itertuples(index=False):
        cols += [value_column(row.diagnostic, row.stat), value_column(row.diagnostic, row.stat, chance=True)]
    tables["runs"] = runset.runs[[c for c in dict.fromkeys(cols) if c in runset.runs]]
    tables["skipped"] = runset.skipped
    return tables


def write_tables(
    runset: RunSet,
    out_dir: str | Path,
    targets: Sequence[str] | None = None,
    *,
    stat: str = "mean",
    n_boot: int = 2000,
    seed: int = 0,
    tables: dict[str, pd.DataFrame] | None = None,
) -> dict[str, Path]:
    """Every table of :func:`build_tables` as ``<name>.csv`` in ``out_dir``, plus ``spearman.md`` and
    ``ablations.md`` (the ablation tables and the lag summary). Returns every path by file name."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tables = tables if tables is not None else build_tables(runset, targets, stat=stat, n_boot=n_boot, seed=seed)
    paths = {f"{name}.csv": _csv(table, out / f"{name}.csv") for name, table in tables.items()}
    paths["spearman.md"] = _text(spearman_markdown(tables["spearman"], runset), out / "spearman.md")
    summary = tables["lag_summary"].iloc[0].to_dict() if len(tables["lag_summary"]) else {}
    text = "# Ablations\n\n" + ablation_markdown(tables) + "\n" + lag_markdown(tables["lag"], summary)
    paths["ablations.md"] = _text(text, out / "ablations.md")
    return paths


def _csv(df: pd.DataFrame, path: Path) -> Path:
    df.to_csv(path, index=False)
    return path


def _text(text: str, path: Path) -> Path:
    path.write_text(text)
    return path


def write_plots(runset: RunSet, out_dir: str | Path, spearman: pd.DataFrame) -> dict[str, Path]:
    out = Path(out_dir)
    return {
        "trajectories.png": plot_trajectories(runset, out / "trajectories.png"),
        "curves.png": plot_curves(runset, out / "curves.png"),
        "regimes.png": plot_regimes(runset, out / "regimes.png"),
        "grad_buckets.png": plot_grad_buckets(runset, out / "grad_buckets.png"),
        "forest.png": plot_forest(spearman, out / "forest.png"),
    }


def write_report(
    sources: str | Path | Sequence[str | Path],
    out_dir: str | Path | None = None,
    report: str | Path | None = None,
    *,
    targets: Sequence[str] | None = None,
    stat: str = "mean",
    n_boot: int = 2000,
    seed: int = 0,
    last_k: int = 3,
) -> Path:
    """Load ``sources``, write every table and plot to ``out_dir`` (default ``<first source>/analysis``)
    and ``report.md`` (default ``<first source>/report.md``); return the report's path."""
    first = Path(sources if isinstance(sources, str | Path) else sources[0])
    out = Path(out_dir) if out_dir is not None else first / "analysis"
    report_path = Path(report) if report is not None else first / "report.md"
    runset = load_runs(sources, last_k=last_k)
    tables = build_tables(runset, targets, stat=stat, n_boot=n_boot, seed=seed)
    paths = write_tables(runset, out, tables=tables)
    plots = write_plots(runset, out, tables["spearman"])
    rel = _relative(out, report_path.parent)
    lines = [f"# Report: {', '.join(runset.sources)}\n"]
    lines.append(_overview(runset))
    lines.append(Path(paths["spearman.md"]).read_text().replace("# Spearman", "## Spearman", 1).replace("\n## `", "\n### `"))
    lines.append(f"![Spearman forest plot]({rel}/forest.png)\n")
    lines.append(Path(paths["ablations.md"]).read_text().replace("# Ablations\n", "", 1))
    lines.append(f"![MI, entropy and success per run]({rel}/trajectories.png)\n")
    lines.append(f"![every run's diagnostics by arm]({rel}/curves.png)\n")
    lines.append("## Plots\n")
    lines.append(f"![four regimes]({rel}/regimes.png)\n\n![gradient norm by RV bucket]({rel}/grad_buckets.png)\n")
    lines.append("## Files\n")
    lines.append("\n".join(f"- [`{name}`]({rel}/{name})" for name in [*paths, *plots]) + "\n")
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text("\n".join(lines))
    return report_path


def _relative(target: Path, base: Path) -> str:
    try:
        return target.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return target.resolve().as_posix()


def _overview(runset: RunSet) -> str:
    runs = runset.runs
    out = [f"{len(runs)} finished runs loaded"]
    if len(runset.skipped):
        out.append(f", {len(runset.skipped)} skipped")
    out.append(".")
    if len(runs):
        early = int(runs["stopped_early"].sum()) if "stopped_early" in runs else 0
        if early:
            out.append(f" {early} stopped early (pruned or collapse; kept: they are the collapsed runs).")
        axes = runset.axes
        out.append(f" Settings that vary: {', '.join(f'`{a}`' for a in axes) if axes else 'none'}.")
        envs = ", ".join(sorted(map(str, runs["env"].unique())))
        out.append(f" Envs: {envs}. Held-out success per run: {trainer_episodes(runs)} episodes per evaluation.\n")
    text = "".join(out) + "\n"
    if len(runset.skipped):
        text += "\nSkipped:\n\n" + md_table(runset.skipped) + "\n"
    return text


def trainer_episodes(runs: pd.DataFrame) -> str:
    values = sorted({str(v) for v in runs.get("trainer.val_episodes", pd.Series(dtype=object)).dropna()})
    return "/".join(values) or "?"
