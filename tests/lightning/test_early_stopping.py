"""callbacks=with_early_stopping in a real (tiny) run: the run stops itself and its summary says why.
(The rule itself, on the collapse simulator's readings: tests/sweep/test_pruning.py.)"""

from __future__ import annotations

from agentcollapse import run


def test_a_run_stops_when_the_watched_metric_says_collapse(make_cfg):
    cfg = make_cfg(
        "callbacks=with_early_stopping",
        "trainer.max_steps=4",
        "trainer.num_threads=1",
        # a reading every step that is always "below the threshold": the plumbing, not the rule
        "diagnostics.early_stop_metric=rollout/response_length",
        "diagnostics.early_stop_threshold=1e9",
        "diagnostics.early_stop_patience=2",
    )
    summary = run.train(cfg)
    assert summary["status"] == "finished" and summary["last_step"] == 2
    assert summary["reason"].startswith("collapse: rollout/response_length below 1e+09 for 2 proxy step(s)")
    assert "stopped early at iteration 2 (CollapseEarlyStopping)" in summary["reason"]
