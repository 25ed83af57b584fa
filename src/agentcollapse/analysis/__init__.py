"""Reading finished runs: run records into tidy frames, the Spearman table with intervals and its
can-it-speak check, the ablation tables, the MI-before-success lag, plots and the report (pure
pandas/scipy/matplotlib; ``docs/analysis.md``)."""

from agentcollapse.analysis.ablations import filter_metric_table, main_table, quartile_table, slip_table
from agentcollapse.analysis.correlations import spearman_markdown, spearman_table, target_noise
from agentcollapse.analysis.lag import lag_summary, lag_table, onset, pooled_lag, warning_quality
from agentcollapse.analysis.plots import plot_curves, plot_forest, plot_grad_buckets, plot_regimes, plot_simulator, plot_trajectories
from agentcollapse.analysis.report import build_tables, write_report, write_tables
from agentcollapse.analysis.runs import RunSet, SkippedRunsWarning, find_run_dirs, load_runs

__all__ = [
    "RunSet",
    "SkippedRunsWarning",
    "build_tables",
    "filter_metric_table",
    "find_run_dirs",
    "lag_summary",
    "lag_table",
    "load_runs",
    "main_table",
    "onset",
    "plot_curves",
    "plot_forest",
    "plot_grad_buckets",
    "plot_regimes",
    "plot_simulator",
    "plot_trajectories",
    "pooled_lag",
    "quartile_table",
    "slip_table",
    "spearman_markdown",
    "spearman_table",
    "target_noise",
    "warning_quality",
    "write_report",
    "write_tables",
]
