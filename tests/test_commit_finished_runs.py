"""scripts.commit_finished_runs finds a sweep's finished runs that are not committed yet, by name only."""

import csv

import pytest

from scripts.commit_finished_runs import copy_run, sweep_running, uncommitted_runs


def _sweep(tmp_path, trials):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    with (sweep / "trials.csv").open("w", newline="") as f:
        # trials.csv's columns when the sweep fixes the filter (ARGS="filter=..."): no filter column.
        writer = csv.DictWriter(f, fieldnames=["trial", "status", "value", "run_dir"])
        writer.writeheader()
        for trial, (status, filt, seed, files) in enumerate(trials):
            run = sweep / str(trial)
            run.mkdir()
            for name in files:
                (run / name).write_text(f"seed: {seed}\nfilter:\n  name: {filt}\n" if name == "config.yaml" else "x\n")
            writer.writerow({"trial": trial, "status": status, "value": "", "run_dir": str(run)})
    return sweep


ALL = ("metrics.csv", "config.yaml", "summary.json")


def test_finished_runs_are_named_by_filter_and_seed_until_committed(tmp_path):
    sweep = _sweep(tmp_path, [("finished", "none", 100, ALL), ("running", "rv_top_p", 100, ("config.yaml",)), ("failed", "none", 3, ALL)])
    out = tmp_path / "docs" / "smollm2-ppo-sokoban"
    runs = uncommitted_runs(sweep, out)
    assert [(r.name, name) for r, name in runs] == [("0", "none-seed100")]
    run_dir, name = runs[0]
    copied = copy_run(run_dir, out, name)
    assert sorted(p.name for p in copied) == ["none-seed100-config.yaml", "none-seed100-metrics.csv", "none-seed100-summary.json"]
    assert uncommitted_runs(sweep, out) == []  # committed once
    assert uncommitted_runs(tmp_path / "no-sweep-yet", out) == []
    assert not sweep_running(tmp_path / "no-sweep-yet")


def test_a_finished_run_without_its_summary_is_named(tmp_path):
    sweep = _sweep(tmp_path, [("finished", "none", 0, ("metrics.csv", "config.yaml"))])
    with pytest.raises(FileNotFoundError, match="trial 0 finished without summary.json"):
        uncommitted_runs(sweep, tmp_path / "out")
