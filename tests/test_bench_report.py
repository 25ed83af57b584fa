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
    bench_report.run(bench_report.BENCHMARK)
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
    bench_report.run(bench_report.BENCHMARK)
    report = (tmp_path / "latest.md").read_text()
    assert "Could not read `filter.json`" in report and "re-run `make bench-filter`" in report
    assert "the code has changed since" in report  # an unknown commit is never taken as current


def test_performance_goals_give_each_value_its_target_and_commit(bench_report):
    trl = {
        "commit": "abc1234",
        "summary": {
            "natural": {"ratio_ours_over_trl": 0.78},
            "smollm2": {
                "ratio_ours_over_trl": 0.9,
                "ours_s": {"step": 60.0, "proxy": 10.0},
                "fair": {
                    "equal_tokens": True,
                    "ratio_every5_over_trl": 0.62,
                    "phases": {"ours_every5": {"update": {"fraction_of_limit": 0.64}}},
                },
            },
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
    # issue 64: the equal-work SmolLM2 comparison, the proxy every 5; a ratio at unequal tokens is no reading
    assert not goals["7_trl_smollm2_equal_work_ratio"]["met"] and goals["7_trl_smollm2_equal_work_ratio"]["value"] == 0.62
    assert goals["7_smollm2_update_fraction_of_bf16_limit"]["met"]
    own = {"commit": "9f8e7d6", "summary": {"smollm2": {"fair": {"equal_tokens": True, "ratio_every5_over_trl": 0.48}}}}
    mine = bench_report.performance_goals({"trl": trl, "trl_smollm2": own})["7_trl_smollm2_equal_work_ratio"]
    assert mine["met"] and mine["commit"] == "9f8e7d6" and mine["from"] == bench_report.PARTS["trl_smollm2"]  # its own run first
    trl["summary"]["smollm2"]["fair"]["equal_tokens"] = False
    assert bench_report.performance_goals({"trl": trl})["7_trl_smollm2_equal_work_ratio"] is None
    table = "\n".join(bench_report.goal_lines(goals))  # latest.md's first table
    assert "| 1_trl_tiny_head_ratio | 0.780 | at most 0.8 | yes | `abc1234` | `make bench-trl` |" in table
    assert "| 4_smollm2_update_fraction_of_matmul_limit_fp32 | 0.300 | at least 0.5 | no |" in table
    assert "| 3_proxy_cost_at_compute_freq_5_tiny | not measured |" in table


def iteration_result(pairs: list[tuple[float, float]], commit: str = "abc1234") -> dict:
    """An iteration result whose alternating pairs took these (baseline, current) seconds a step."""
    raw = {"baseline": [{"step": [30.0, b, b]} for b, _ in pairs], "current": [{"step": [20.0, c, c]} for _, c in pairs]}
    ratio = sum(c for _, c in pairs) / sum(b for b, _ in pairs)
    config = ["env=frozenlake", "rollout.num_prompts=8"]
    return {
        "commit": commit,
        "measured_at": "now",
        "config": config,
        "baseline_commit": "5bfa7f0",
        "threads": 1,
        "repeats": len(pairs),
        "raw": raw,
        "ratio_current_over_baseline": {"step": ratio},
    }


def test_the_iteration_regression_check_compares_with_the_best_committed_ratio_beyond_the_noise(bench_report, tmp_path, monkeypatch):
    best = bench_report.iteration_record(iteration_result([(14.0, 7.0), (14.0, 7.2)], commit="good"))
    assert best["pair_ratios"] == pytest.approx([0.5, 7.2 / 14.0]) and best["ratio"] == pytest.approx(14.2 / 28)
    # the case: 0.50x before, 0.57x now with pairs that agree: beyond a 5% noise floor
    slow = bench_report.iteration_regression(iteration_result([(18.0, 10.3), (18.5, 10.5)]), best)
    assert slow["verdict"] == "regressed" and slow["noise"] == pytest.approx(0.05)
    # the same ratio with pairs far apart is within this run's own noise
    noisy = bench_report.iteration_regression(iteration_result([(18.0, 8.5), (18.0, 11.5)]), best)
    assert noisy["verdict"] == "within noise" and noisy["noise"] > 0.3
    assert bench_report.iteration_regression(iteration_result([(18.0, 8.5), (18.0, 8.6)]), best)["verdict"] == "new best"
    other = iteration_result([(18.0, 10.3)])
    other["threads"] = 2
    assert bench_report.iteration_regression(other, best)["verdict"].startswith("not comparable")
    cpu = iteration_result([(18.0, 10.3)])
    cpu["clock"] = "cpu"  # CPU seconds are not compared with a wall-clock best
    assert bench_report.iteration_regression(cpu, best)["verdict"].startswith("not comparable")

    # make bench's report: a regression is a line in latest.md and a failing exit; a new best is written for committing
    (tmp_path / "iteration_best.json").write_text(json.dumps(best))
    (tmp_path / "iteration.json").write_text(json.dumps(iteration_result([(18.0, 10.3), (18.5, 10.5)])))
    monkeypatch.setattr(sys, "argv", ["bench_report.py", "--results", str(tmp_path)])
    with pytest.raises(SystemExit, match="REGRESSED"):
        bench_report.run(bench_report.BENCHMARK)
    assert "Iteration regression check: **REGRESSED**: now 0.57x" in (tmp_path / "latest.md").read_text()
    (tmp_path / "iteration.json").write_text(json.dumps(iteration_result([(18.0, 8.5), (18.0, 8.6)], commit="faster")))
    bench_report.run(bench_report.BENCHMARK)
    assert json.loads((tmp_path / "iteration_best.json").read_text())["commit"] == "faster"


def test_the_cpu_clock_makes_a_childs_phase_timers_read_its_cpu_time(tmp_path):
    import subprocess

    from benchmarks.common import ROOT, subprocess_env

    probe = "import time; t = time.perf_counter(); time.sleep(0.3); print(time.perf_counter is time.process_time, time.perf_counter() - t)"
    for clock, same, slept in (("cpu", "True", False), ("wall", "False", True)):
        out = subprocess.run(
            [sys.executable, "-c", probe], env=subprocess_env(ROOT / "src", 1, clock), capture_output=True, text=True, check=True
        )
        is_cpu, elapsed = out.stdout.split()
        assert is_cpu == same and (float(elapsed) >= 0.3) == slept, (clock, out.stdout)
