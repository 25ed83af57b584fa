"""Reading finished runs: run records into tables, and the paper's correlation table (pure pandas/scipy)."""

from agentcollapse.analysis.runs import load_runs, spearman_table

__all__ = ["load_runs", "spearman_table"]
