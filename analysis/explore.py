# ---
# jupyter:
#   jupytext:
#     formats: py:percent,ipynb
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exploring a sweep: did mutual information predict success better than entropy?
#
# A walk through one sweep's finished runs: load them, check whether the held-out success of the runs
# differs by more than evaluation noise, read the Spearman table and its forest plot, the ablation
# tables, whether MI fell before success, and the plots.
#
# Open it as a notebook with `.venv/bin/jupytext --to ipynb analysis/explore.py` (jupytext pairs the
# two files), or run it as a script. The sweep directory comes from `AGENTCOLLAPSE_SWEEP` (default: the
# newest `multirun/*/*/`); every table and plot is also written by `make report SWEEP=<dir>`. Each cell
# calls a function of the library `agentcollapse.analysis` (`load_runs`, `build_tables`, `target_noise`,
# `lag_summary`, `plot_*`); nothing is computed here that the library does not.

# %%
import os
import tempfile
import warnings
from pathlib import Path

import pandas as pd
from IPython.display import Image, Markdown, display

from agentcollapse.analysis import (
    build_tables,
    lag_summary,
    load_runs,
    plot_forest,
    plot_grad_buckets,
    plot_regimes,
    plot_trajectories,
    spearman_markdown,
    target_noise,
)
from agentcollapse.analysis.report import ablation_markdown, lag_markdown


def newest_sweep() -> str:
    found = sorted(Path("multirun").glob("*/*/"), key=lambda p: p.stat().st_mtime)
    return str(found[-1]) if found else "multirun"


SWEEP = os.environ.get("AGENTCOLLAPSE_SWEEP") or newest_sweep()
OUT = Path(os.environ.get("AGENTCOLLAPSE_ANALYSIS_OUT") or tempfile.mkdtemp(prefix="explore-"))
pd.set_option("display.width", 160, "display.max_columns", 30)
print("sweep:", SWEEP, "| plots in:", OUT)

# %% [markdown]
# ## Load the runs
# One row per finished run: its resolved config, the sweep's axes (`sweep/*`, from `trials.csv`) and,
# per metric, `final/` (mean of the last 3 logged values), `peak/` (over post-update evaluations: the
# step-0 warm start is left out), `mean/`. Runs that did not finish are skipped and named.

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    runset = load_runs(SWEEP)
for w in caught:
    print("warning:", w.message)
print(len(runset), "finished runs; settings that vary:", runset.axes)
display(runset.runs[["run_id", "env", "algorithm", "filter", *[a for a in runset.axes if "." in a][:4], "peak/val/success_rate"]])

# %%
display(runset.skipped)

# %% [markdown]
# ## Can a table over these runs speak?
# Each run's held-out success carries a binomial standard error from its episode count. When the
# spread across runs is under twice that noise, no correlation with success means anything.

# %%
for target in ("peak/val/success_rate", "final/val/success_rate"):
    print(target, target_noise(runset.runs, target, runset.last_k))

# %% [markdown]
# ## The Spearman table
# Every diagnostic against peak and final held-out success, with seeded bootstrap intervals over runs
# and the paper's values; runs whose MI was undefined are also counted at MI's chance value.

# %%
tables = build_tables(runset, n_boot=1000)
display(Markdown(spearman_markdown(tables["spearman"], runset)))

# %%
display(Image(filename=str(plot_forest(tables["spearman"], OUT / "forest.png"))))

# %% [markdown]
# ## Ablations and the early-warning lag

# %%
display(Markdown(ablation_markdown(tables)))

# %%
display(Markdown(lag_markdown(tables["lag"], lag_summary(tables["lag"]))))

# %% [markdown]
# ## Plots: runs over time, the four regimes, gradient norm by RV bucket

# %%
display(Image(filename=str(plot_trajectories(runset, OUT / "trajectories.png"))))

# %%
display(Image(filename=str(plot_regimes(runset, OUT / "regimes.png"))))

# %%
display(Image(filename=str(plot_grad_buckets(runset, OUT / "grad_buckets.png"))))

# %% [markdown]
# ## Your own questions
# `runset.history` is the long frame of every logged value (`run_id, step, metric, value`); join it
# with `runset.runs` on `run_id` to group by any config column.

# %%
h = runset.history
display(h[h["metric"] == "val/success_rate"].pivot_table(index="step", columns="run_id", values="value"))
