"""The published tables under docs/results/ can be recomputed from the per-run tables beside them."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
TABLES = sorted(RESULTS.rglob("*spearman*.csv"))


def test_there_are_published_tables():
    assert TABLES, f"no *spearman*.csv under {RESULTS}"


@pytest.mark.parametrize("table", TABLES, ids=lambda p: p.parent.name)
def test_every_rho_is_recomputed_from_its_runs_csv(table):
    runs_csv = table.with_name(table.name.replace("spearman", "runs"))
    assert runs_csv.is_file(), f"{table} has no matching {runs_csv.name}"
    runs, rows = pd.read_csv(runs_csv), pd.read_csv(table)
    rows = rows[rows["group"] == "all"]
    assert len(rows)
    for row in rows.itertuples(index=False):
        col = f"{row.stat}/{row.diagnostic}"
        assert col in runs and row.target in runs, (col, row.target)
        pair = runs[[col, row.target]].dropna()
        assert len(pair) == row.n
        if np.isnan(row.rho):
            # An empty cell is published only where Spearman is undefined, and such a table cannot speak.
            assert len(pair) < 3 or pair[col].nunique() == 1 or pair[row.target].nunique() == 1, col
            assert not row.can_speak, col
        else:
            assert spearmanr(pair[col], pair[row.target]).statistic == pytest.approx(row.rho, abs=1e-9), col
