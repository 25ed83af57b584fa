import importlib.util
import math
import warnings
from pathlib import Path

import pandas as pd
import pytest
from scipy.stats import spearmanr

from agentcollapse.analysis import SkippedRunsWarning, load_runs, spearman_markdown, spearman_table, target_noise
from agentcollapse.analysis.correlations import COLUMNS
from agentcollapse.analysis.stats import EXACT_SPEARMAN_MAX_N, spearman_exact_p
from tests.analysis.conftest import ENT, MI, write_run

ROOT = Path(__file__).resolve().parents[2]


def _load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRunsWarning)
        return load_runs(path)


def _row(table, diag, target="peak/val/success_rate", group="all"):
    hit = table[(table["diagnostic"] == diag) & (table["target"] == target) & (table["group"] == group)]
    assert len(hit) == 1, (diag, target, group)
    return hit.iloc[0]


def test_rho_is_scipy_spearman_on_the_per_run_values_p_exact_at_small_n_and_n_counts_finished_runs(sweep):
    runset = _load(sweep)
    table = spearman_table(runset, n_boot=500, seed=1)
    assert list(table.columns[: len(COLUMNS)]) == COLUMNS
    runs = runset.runs
    for diag in (MI, ENT, "actor/entropy"):
        for target in ("peak/val/success_rate", "final/val/success_rate"):
            row = _row(table, diag, target)
            pair = runs[[f"mean/{diag}", target]].dropna()
            expected = spearmanr(pair.iloc[:, 0], pair.iloc[:, 1])
            assert row["rho"] == pytest.approx(expected.statistic)
            assert len(pair) <= EXACT_SPEARMAN_MAX_N and row["p_value"] == pytest.approx(spearman_exact_p(pair.iloc[:, 0], pair.iloc[:, 1]))
            assert row["n"] == len(pair)
            assert row["ci_low"] <= row["rho"] <= row["ci_high"]
    mi = _row(table, MI)
    assert mi["n"] == 8 and mi["rho"] == pytest.approx(1.0)  # the babbling run has no MI: it drops out ...
    assert mi["n_undefined"] == 1 and mi["n_at_chance"] == 9  # ... and is counted at chance beside
    assert mi["paper"] == "+0.39"
    assert _row(table, ENT)["n"] == 9  # 9 finished runs: the failed, interrupted, running and broken are not counted
    # rows are sorted by rho within each (target, group) block
    block = table[(table["target"] == "peak/val/success_rate") & (table["group"] == "all")]["rho"].dropna()
    assert list(block) == sorted(block, reverse=True)


def test_bootstrap_interval_is_reproducible_for_a_fixed_seed(sweep):
    runset = _load(sweep)
    a = spearman_table(runset, ["peak/val/success_rate"], [ENT], n_boot=300, seed=7)
    b = spearman_table(runset, ["peak/val/success_rate"], [ENT], n_boot=300, seed=7)
    c = spearman_table(runset, ["peak/val/success_rate"], [ENT], n_boot=300, seed=8)
    pd.testing.assert_frame_equal(a, b)
    assert (a["ci_low"].iloc[0], a["ci_high"].iloc[0]) != (c["ci_low"].iloc[0], c["ci_high"].iloc[0])


def test_runs_one_episode_apart_cannot_speak_whatever_rho_says(tmp_path):
    # today's default sweep: 8 runs whose success differs by one episode in 32, a diagnostic in perfect order
    for i in range(8):
        s = 0.8 + (1 / 32 if i >= 4 else 0.0)
        write_run(tmp_path, str(i), success=[s], mi=[float(i)], entropy=[1.0])
    runset = _load(tmp_path)
    table = spearman_table(runset, ["peak/val/success_rate"], [MI], n_boot=200)
    row = _row(table, MI)
    assert row["rho"] > 0.8 and row["p_value"] < 0.05  # looks convincing ...
    noise = target_noise(runset.runs, "peak/val/success_rate")
    assert noise["spread"] == pytest.approx(pd.Series([0.8] * 4 + [0.8 + 1 / 32] * 4).std())
    assert 0.06 < noise["se"] < 0.08 and noise["can_speak"] is False  # ... but it is under the noise
    assert not row["can_speak"] and row["target_spread"] < 2 * row["eval_se"]
    assert "cannot speak" in spearman_markdown(table, runset)


def test_runs_far_apart_can_speak(sweep):
    runset = _load(sweep)
    noise = target_noise(runset.runs, "peak/val/success_rate")
    assert noise["spread"] > 2 * noise["se"] and noise["can_speak"] is True
    assert "The table can speak" in spearman_markdown(spearman_table(runset, n_boot=200), runset)


def test_four_runs_cannot_speak_however_far_apart_and_their_p_is_exact(tmp_path):
    # 4 runs far apart (spread ~0.35 against an SE ~0.06) in perfect order: the smallest exact p is 2 / 4!
    for i, s in enumerate([0.1, 0.4, 0.7, 0.95]):
        write_run(tmp_path, str(i), success=[s], mi=[float(i)], entropy=[1.0 + i])
    runset = _load(tmp_path)
    noise = target_noise(runset.runs, "peak/val/success_rate")
    assert noise["spread"] > 2 * noise["se"] and noise["min_p"] == pytest.approx(1 / 12)
    assert noise["can_speak"] is False
    table = spearman_table(runset, ["peak/val/success_rate"], [MI], n_boot=200)
    row = _row(table, MI)
    assert row["rho"] == pytest.approx(1.0) and row["p_value"] == pytest.approx(2 / 24) and not row["can_speak"]
    text = spearman_markdown(table, runset)
    assert "This table cannot speak" in text and "2 / 4!" in text and "can speak:" not in text
    assert "| 0.083 |" in text
    # a fifth run: 2 / 5! < 0.05, and the spread decides again
    write_run(tmp_path, "4", success=[0.5], mi=[2.5], entropy=[1.0])
    assert target_noise(_load(tmp_path).runs, "peak/val/success_rate")["can_speak"] is True


def test_per_env_blocks(tmp_path):
    for i in range(4):
        write_run(tmp_path, f"f{i}", success=[0.2 * i], mi=[float(i)], entropy=[1.0 + i])
        write_run(tmp_path, f"s{i}", success=[0.1 * i], mi=[float(-i)], entropy=[1.0], **{"env.name": "sokoban"})
    table = spearman_table(_load(tmp_path), ["peak/val/success_rate"], [MI], n_boot=200)
    assert set(table["group"]) == {"all", "frozenlake", "sokoban"}
    assert _row(table, MI, group="frozenlake")["rho"] == pytest.approx(1.0)
    assert _row(table, MI, group="sokoban")["rho"] == pytest.approx(-1.0)
    assert _row(table, MI, group="all")["n"] == 8


def test_correlations_script_writes_csv_and_markdown(sweep, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("correlations_script", ROOT / "analysis" / "correlations.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "out"
    with pytest.warns(SkippedRunsWarning):
        assert script.main(["--runs", str(sweep), "--out", str(out), "--n-boot", "200", "--target", "val/success_rate"]) == 0
    table = pd.read_csv(out / "spearman.csv")
    assert list(table.columns[:7]) == ["diagnostic", "target", "rho", "p_value", "n", "ci_low", "ci_high"]
    assert set(table["target"]) == {"peak/val/success_rate", "final/val/success_rate"}
    assert "can_speak" in table and (out / "spearman.md").read_text().startswith("# Spearman")
    assert "rho [95% CI]" in capsys.readouterr().out
    assert not math.isnan(table["rho"].iloc[0])


def test_a_target_no_run_has_is_a_clear_error_and_t1_joins_the_defaults_where_logged(sweep):
    from agentcollapse.analysis.correlations import default_targets

    with pytest.warns(SkippedRunsWarning):
        runset = load_runs(sweep)
    with pytest.raises(ValueError, match=r"no run has target\(s\) peak/val/success_rate_t1; these do: .*peak/val/success_rate"):
        spearman_table(runset, ["peak/val/success_rate_t1"], n_boot=20)
    assert default_targets(runset) == ["peak/val/success_rate", "final/val/success_rate"]
    runset.runs["peak/val/success_rate_t1"] = runset.runs["peak/val/success_rate"]
    assert "peak/val/success_rate_t1" in default_targets(runset)
    assert "peak/val/success_rate_t1" in set(spearman_table(runset, n_boot=20)["target"])
