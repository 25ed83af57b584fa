import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from agentcollapse.analysis import (
    SkippedRunsWarning,
    filter_metric_table,
    lag_summary,
    lag_table,
    load_runs,
    main_table,
    onset,
    quartile_table,
    slip_table,
)
from tests.analysis.conftest import write_run


def _load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRunsWarning)
        return load_runs(path)


QUARTILES = {"Q1": [0.0, 0.25], "Q2": [0.25, 0.5], "Q3": [0.5, 0.75], "Q4": [0.75, 1.0]}


def test_quartile_table_means_and_intervals_over_seeds(tmp_path):
    for qi, (q, value) in enumerate(QUARTILES.items()):
        for seed in range(3):
            write_run(
                tmp_path,
                f"{q}-{seed}",
                success=[0.4 - 0.1 * qi + 0.01 * seed],
                mi=[1.0 - 0.1 * qi],
                entropy=[2.0],
                **{"filter.name": "quartile", "filter.strategy": "percentile_range", "filter.value": value, "seed": seed},
            )
    write_run(tmp_path, "none", success=[0.5])  # not a quartile run: left out
    table = quartile_table(_load(tmp_path)).set_index("quartile")
    assert list(table.index) == ["Q1", "Q2", "Q3", "Q4"] and (table["n"] == 3).all()
    assert table.loc["Q1", "success"] == pytest.approx(0.41)
    assert table.loc["Q4", "success"] == pytest.approx(0.11)
    assert table.loc["Q2", "success_ci_low"] < table.loc["Q2", "success"] < table.loc["Q2", "success_ci_high"]
    assert table.loc["Q3", "mi_zscore_ema"] == pytest.approx(0.8)
    assert table.loc["Q1", "paper_success"] == 0.211 and math.isnan(table.loc["Q2", "paper_success"])


def test_main_table_gain_and_time_cut_against_no_filter(tmp_path):
    for seed in range(2):
        write_run(tmp_path, f"n{seed}", success=[0.5 + 0.02 * seed], seed=seed)
        write_run(tmp_path, f"f{seed}", success=[0.7 + 0.02 * seed], seed=seed, **{"filter.name": "rv_top_p", "filter.value": 0.9})
    table = main_table(_load(tmp_path)).set_index("filter")
    assert table.loc["none", "peak_success"] == pytest.approx(0.51)
    assert table.loc["rv_top_p 0.9", "gain"] == pytest.approx(0.2)
    assert table.loc["rv_top_p 0.9", "time_cut"] == pytest.approx(0.0)  # same synthetic step times
    assert table.loc["rv_top_p 0.9", "paper_filter"] == 0.779


def test_filter_metric_and_slip_tables(tmp_path):
    arms = {"none": {}, "rv": {"filter.name": "rv_top_p"}, "ent": {"filter.name": "entropy", "filter.metric": "entropy"}}
    arms["traj"] = {"filter.name": "trajectory", "filter.trajectory_k": 4}
    for slip in (0.0, 0.5):
        for arm, cfg in arms.items():
            for seed in range(2):
                bonus = 0.2 if arm == "rv" and slip == 0.0 else 0.0
                write_run(
                    tmp_path, f"{arm}-{slip}-{seed}", success=[0.5 + bonus + 0.01 * seed], seed=seed, **{"env.kwargs.slip": slip}, **cfg
                )
    runset = _load(tmp_path)
    fm = filter_metric_table(runset).set_index("filter_metric")
    assert set(fm.index) == {"none", "reward_std", "entropy", "trajectory"}
    assert fm.loc["reward_std", "peak_success"] == pytest.approx(0.605) and fm.loc["entropy", "n"] == 4
    assert fm.loc["entropy", "paper"] == "did not prevent collapse"
    slip = slip_table(runset)
    rv = slip[slip["filter"] == "rv_top_p 1.0"].set_index("slip")
    assert rv.loc[0.0, "advantage"] == pytest.approx(0.2) and rv.loc[0.5, "advantage"] == pytest.approx(0.0)
    assert rv.loc[0.0, "final_advantage"] == pytest.approx(0.2) and rv.loc[0.5, "final_success"] == pytest.approx(0.505)
    assert len(slip) == 6  # 3 filter arms x 2 slips


def test_onset_is_the_start_of_a_sustained_decline():
    assert onset([0, 1, 2, 3, 4, 5], [1.0, 1.0, 1.0, 0.5, 0.4, 0.3]) == 3
    assert math.isnan(onset([0, 1, 2, 3], [1.0, 0.2, 1.0, 1.0]))  # recovered: no sustained decline
    assert math.isnan(onset([0, 1, 2, 3], [0.1, 0.2, 0.3, 0.4]))  # rising
    assert math.isnan(onset([0, 1, 2], [0.5, 0.5, 0.5]))  # flat
    assert math.isnan(onset([1, 2, 3], [0.80, 0.78, 0.78], min_drop=0.1))  # under the noise floor
    assert onset([1, 2, 3, 4], [np.nan, 1.0, 0.0, 0.0]) == 3  # NaN points are not points


def test_lag_of_mi_before_success(tmp_path):
    # MI falls from step 3, success from step 5 (a two-step early warning); another run never declines
    write_run(tmp_path, "a", success=[0.8, 0.8, 0.8, 0.8, 0.3, 0.2], mi=[2.0, 2.0, 0.5, 0.4, 0.3, 0.2], warm_start_success=0.8)
    write_run(tmp_path, "b", success=[0.5, 0.6, 0.7, 0.8, 0.8, 0.9], mi=[1.0, 1.2, 1.4, 1.6, 1.8, 2.0], warm_start_success=0.5)
    # babbling from step 4 on: MI undefined counts at chance (0), success falls at step 5
    write_run(tmp_path, "c", success=[0.8, 0.8, 0.8, 0.8, 0.2, 0.1], mi=[1.0, 1.0, 1.0, np.nan, np.nan, np.nan], warm_start_success=0.8)
    table = lag_table(_load(tmp_path)).set_index("run_id")
    assert table.loc["a", "mi_onset"] == 3 and table.loc["a", "success_onset"] == 5 and table.loc["a", "lag"] == 2
    assert table.loc["b", "category"] == "neither"
    assert table.loc["c", "mi_onset"] == 4 and table.loc["c", "lag"] == 1
    summary = lag_summary(table.reset_index())
    assert summary["both"] == 2 and summary["neither"] == 1 and summary["median_lag"] == 1.5
    assert summary["mi_first"] == 2 and summary["share_mi_first"] == 1.0


def _categories(**counts: int):
    import pandas as pd

    return pd.DataFrame({"category": [k for k, n in counts.items() for _ in range(n)]})


def test_warning_quality_counts_recall_and_precision():
    from agentcollapse.analysis import warning_quality

    q = warning_quality(_categories(both=6, mi_only=4, success_only=2, neither=8))
    assert q["recall"] == 6 / 8 and q["precision"] == 6 / 10 and q["success_decline_without_mi"] == 2 / 10
    assert 0 < q["fisher_p"] < 0.1 and math.isnan(q["cmh_p"])
    assert math.isnan(warning_quality(_categories(neither=3))["recall"])


def test_the_stratified_test_does_not_take_base_rates_for_an_association():
    import pandas as pd
    from scipy.stats import norm

    from agentcollapse.analysis import warning_quality
    from agentcollapse.analysis.stats import mantel_haenszel_p

    # Sweep a: both declines common; sweep b: both rare; within each, MI says nothing about success.
    a = _categories(both=16, mi_only=4, success_only=4, neither=1).assign(sweep="a")
    b = _categories(both=1, mi_only=4, success_only=4, neither=16).assign(sweep="b")
    q = warning_quality(pd.concat([a, b]), strata="sweep")
    assert q["fisher_p"] < 0.05  # pooled naively: a strong "association"
    assert q["cmh_p"] > 0.5  # within sweeps: none
    # One stratum: the continuity-corrected normal approximation of the hypergeometric, by hand.
    e, v = 10 * 10 / 20, 10 * 10 * 10 * 10 / (20 * 20 * 19)
    assert mantel_haenszel_p([[[8, 2], [2, 8]]]) == pytest.approx(float(norm.sf((8 - e - 0.5) / math.sqrt(v))))
    assert math.isnan(mantel_haenszel_p([[[1, 0], [0, 0]]]))


def test_the_committed_pooled_lag_table_recomputes_from_the_committed_lag_tables():
    """``analysis/pooled_lag.py`` is a thin command over ``pooled_lag``: the library reproduces the
    committed table from the lag tables of the sweeps it names (those committed when it was made)."""
    import pandas as pd

    from agentcollapse.analysis import pooled_lag

    results = Path(__file__).resolve().parents[2] / "docs" / "results"
    committed = pd.read_csv(results / "lag-pooled" / "lag_pooled.csv")
    frame = pooled_lag([results / sweep / "lag.csv" for sweep in committed["sweep"] if sweep != "all"])
    assert list(frame["sweep"]) == list(committed["sweep"])
    pd.testing.assert_frame_equal(frame[committed.columns], committed, check_dtype=False, rtol=1e-9)
