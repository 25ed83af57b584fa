import os
import warnings
from pathlib import Path

import pytest

from agentcollapse.analysis import (
    SkippedRunsWarning,
    load_runs,
    plot_curves,
    plot_forest,
    plot_grad_buckets,
    plot_regimes,
    plot_trajectories,
    spearman_table,
    write_report,
)

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def _is_png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 2000 and path.read_bytes()[:8] == PNG


def test_every_plot_is_a_png(sweep, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRunsWarning)
        runset = load_runs(sweep)
    table = spearman_table(runset, n_boot=200)
    for path in (
        plot_trajectories(runset, tmp_path / "t.png"),
        plot_curves(runset, tmp_path / "c.png"),
        plot_regimes(runset, tmp_path / "r.png"),
        plot_grad_buckets(runset, tmp_path / "g.png"),
        plot_forest(table, tmp_path / "f.png"),
    ):
        assert _is_png(path), path


def test_report_writes_tables_plots_and_report_md(sweep):
    with pytest.warns(SkippedRunsWarning):
        report = write_report(sweep, n_boot=200)
    assert report == sweep / "report.md"
    text = report.read_text()
    assert "## Spearman" in text and "can speak" in text and "## Does MI fall before success?" in text
    for name in ("9", "10", "11", "12"):
        assert str(sweep / name) in text  # the skipped runs are named
    out = sweep / "analysis"
    for name in ("spearman.csv", "spearman.md", "quartile.csv", "main.csv", "filter_metric.csv", "slip.csv", "lag.csv", "ablations.md"):
        assert (out / name).is_file(), name
    for name in ("forest.png", "trajectories.png", "curves.png", "regimes.png", "grad_buckets.png"):
        assert _is_png(out / name), name
        assert f"analysis/{name}" in text


def test_report_on_a_sweep_with_no_finished_run(tmp_path):
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "summary.json").write_text("{")
    with pytest.warns(SkippedRunsWarning):
        report = write_report(tmp_path, n_boot=50)
    assert "0 finished runs" in report.read_text()


def test_notebook_executes_top_to_bottom_in_a_kernel(sweep, tmp_path, monkeypatch):
    import ipykernel  # noqa: F401  (pinned in requirements.lock: the kernel nbclient starts)
    import jupytext
    import nbclient

    notebook = jupytext.read(ROOT / "analysis" / "explore.py")
    monkeypatch.setenv("AGENTCOLLAPSE_SWEEP", str(sweep))
    monkeypatch.setenv("AGENTCOLLAPSE_ANALYSIS_OUT", str(tmp_path / "plots"))
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert (tmp_path / "plots" / "forest.png").is_file() and (tmp_path / "plots" / "regimes.png").is_file()
    images = [o for c in notebook.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) >= 4


def test_runs_table_holds_every_column_the_spearman_table_ranks(sweep):
    from scipy.stats import spearmanr

    from agentcollapse.analysis import build_tables

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRunsWarning)
        runset = load_runs(sweep)
    tables = build_tables(runset, n_boot=50)
    runs, table = tables["runs"], tables["spearman"]
    rows = table[(table["group"] == "all") & table["rho"].notna()]
    assert len(rows)
    for row in rows.itertuples(index=False):
        pair = runs[[f"{row.stat}/{row.diagnostic}", row.target]].dropna()
        assert len(pair) == row.n
        assert spearmanr(pair.iloc[:, 0], pair.iloc[:, 1]).statistic == pytest.approx(row.rho), row.diagnostic
