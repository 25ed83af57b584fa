"""benchmarks.bench_report (`make bench`'s last step) folds each benchmark's saved result (benchmarks.common.save_result)
into one report."""

from __future__ import annotations

import json
import sys

import pytest


@pytest.fixture(scope="module")
def bench_report():
    from benchmarks import bench_report  # the repository root is on pytest's path

    return bench_report


def filter_result() -> dict:
    rows = [{"rho": 1.0, "kept": 8, "median_s": 6.0, "ratio": 1.0}, {"rho": 0.6, "kept": 3, "median_s": 3.0, "ratio": 0.5}]
    return {"P": 8, "G": 16, "repeats": 2, "rows": rows}


def test_saved_results_carry_their_provenance(tmp_path):
    from benchmarks.common import save_result

    path = save_result("filter", filter_result(), tmp_path)
    record = json.loads(path.read_text())
    assert path == tmp_path / "filter.json"
    assert record["commit"] and record["measured_at"] and record["peak_rss_mib"] > 0
    assert record["rows"] == filter_result()["rows"]


def test_report_renders_what_exists_and_names_the_command_for_the_rest(bench_report, tmp_path, monkeypatch, capsys):
    from benchmarks.common import save_result

    save_result("filter", filter_result(), tmp_path)
    (tmp_path / "proxy.json").write_text("{not json")  # a half-written file reads as not measured
    monkeypatch.setattr(sys, "argv", ["bench_report.py", "--results", str(tmp_path)])
    bench_report.main()
    report = (tmp_path / "latest.md").read_text()
    assert "| 0.6 | 3 of 8 | 3.000 | 0.50 |" in report
    for name in ("iteration", "proxy", "rollout", "trl", "scaling"):
        assert f"`{bench_report.PARTS[name]}`" in report, name
    summary = json.loads((tmp_path / "latest.json").read_text())
    assert summary["headline"]["update_time_by_rho"] == {"1.0": 6.0, "0.6": 3.0}
    assert summary["headline"]["ours_over_trl"] is None
    assert set(summary["parts"]) == {"filter"}


def test_a_result_from_an_older_script_is_reported_not_raised(bench_report, tmp_path, monkeypatch):
    (tmp_path / "filter.json").write_text(json.dumps({"commit": "unknown", "measured_at": "then", "P": 8}))
    monkeypatch.setattr(sys, "argv", ["bench_report.py", "--results", str(tmp_path)])
    bench_report.main()
    report = (tmp_path / "latest.md").read_text()
    assert "Could not read `filter.json`" in report and "re-run `make bench-filter`" in report
    assert "the code has changed since" in report  # an unknown commit is never taken as current


def test_performance_goals_give_each_value_its_target_and_commit(bench_report):
    trl = {
        "commit": "abc1234",
        "summary": {
            "natural": {"ratio_ours_over_trl": 0.78},
            "smollm2": {"ratio_ours_over_trl": 0.9, "ours_s": {"step": 60.0, "proxy": 10.0}},
        },
    }
    dtype = {"commit": "def5678", "limit": {"float32": {"update_fraction": 0.3}, "bfloat16": {"update_fraction": 0.55}}}
    scaling = {"commit": "def5678", "rows": {"base": {"step": 10.0}, "P x2": {"step": 18.0}}}
    experiment = {"commit": "0a1b2c3", "summary": {"ratio": 0.42, "peak_gib": {"pilot": 12.5, "prereg": 8.5}}}
    goals = bench_report.performance_goals({"trl": trl, "dtype": dtype, "scaling_smollm2": scaling, "experiment": experiment})
    assert goals["1_trl_tiny_head_ratio"] == {
        "value": 0.78,
        "target": 0.8,
        "at_most": True,
        "met": True,
        "commit": "abc1234",
        "from": "make bench-trl",
    }
    assert not goals["2_trl_smollm2_ratio"]["met"]
    # SmolLM2's proxy ran every step of the TRL entry: at compute_freq=5 it costs 10 / (5 x (60 - 10))
    assert goals["3_proxy_cost_at_compute_freq_5_smollm2"]["value"] == pytest.approx(0.04)
    assert goals["3_proxy_cost_at_compute_freq_5_tiny"] is None  # not measured: no value, never "met"
    assert goals["4_smollm2_update_fraction_of_matmul_limit_bf16"]["met"]
    assert not goals["4_smollm2_update_fraction_of_matmul_limit_fp32"]["met"]
    assert goals["5_smollm2_scaling_step_over_base"] == {"base": 1.0, "P x2": 1.8}
    # the experiment's iteration against the pilot's (at most half), and its peak memory (at most 8 GiB)
    assert goals["6_smollm2_experiment_iteration_over_pilot"]["met"]
    assert not goals["6_smollm2_experiment_peak_gib"]["met"] and goals["6_smollm2_experiment_peak_gib"]["from"] == "make bench-experiment"
    table = "\n".join(bench_report.goal_lines(goals))  # latest.md's first table
    assert "| 1_trl_tiny_head_ratio | 0.780 | at most 0.8 | yes | `abc1234` | `make bench-trl` |" in table
    assert "| 4_smollm2_update_fraction_of_matmul_limit_fp32 | 0.300 | at least 0.5 | no |" in table
    assert "| 3_proxy_cost_at_compute_freq_5_tiny | not measured |" in table
