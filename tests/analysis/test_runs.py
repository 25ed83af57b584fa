import pytest

from agentcollapse.analysis import load_runs, spearman_table
from agentcollapse.records import RunRecorder


def _run(root, name, mi, ent, success, status="finished"):
    rec = RunRecorder(root / name)
    rec.log(0, {"val/success_rate": 0.0})
    for step in (1, 2):
        rec.log(step, {"collapse_trajectory_sample/mi_zscore_ema": mi, "actor/entropy": ent})
    rec.log(3, {"val/success_rate": success})
    rec.write_summary(status)


def test_spearman_of_monotone_diagnostic_is_one(tmp_path):
    for i in range(5):
        _run(tmp_path, f"r{i}", mi=float(i), ent=float((i * 3) % 5), success=0.1 * (i + 1))
    runs, skipped = load_runs(tmp_path)
    assert len(runs) == 5 and not skipped
    table = spearman_table(runs).set_index("diagnostic")
    assert table.loc["collapse_trajectory_sample/mi_zscore_ema", "spearman_rho"] == pytest.approx(1.0)
    assert abs(table.loc["actor/entropy", "spearman_rho"]) < 1.0
    assert table.loc["actor/entropy", "n_runs"] == 5


def test_unfinished_and_half_written_runs_are_skipped(tmp_path):
    _run(tmp_path, "ok", 1.0, 1.0, 0.5)
    _run(tmp_path, "failed", 1.0, 1.0, 0.5, status="failed")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "summary.json").write_text('{"status": "fini')  # a crash mid-write
    runs, skipped = load_runs(tmp_path)
    assert list(runs["run_dir"]) == [str(tmp_path / "ok")]
    assert len(skipped) == 2
