"""A real (tiny) run logs the MI-beyond-copying samplers beside the plain ones (issue 17)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from agentcollapse import run


def test_a_smoke_run_logs_the_nocopy_samplers(make_cfg):
    cfg = make_cfg("trainer.max_steps=1", "trainer.val_every=0", "trainer.num_threads=1", "diagnostics.skip_samplers=[]")
    assert run.train(cfg)["status"] == "finished"
    row = pd.read_csv(Path(cfg.run_dir) / "metrics.csv").set_index("step").loc[1]  # NaN: logged as undefined
    for sampler in ("first_turn", "trajectory"):
        plain, nocopy = f"collapse_{sampler}_sample/", f"collapse_{sampler}_nocopy_sample/"
        names = {k.removeprefix(plain) for k in row.index if k.startswith(plain)}
        assert {k.removeprefix(nocopy) for k in row.index if k.startswith(nocopy)} == names | {"copied_token_frac"}
        assert "valid_thinking_rate" in names
    # the barely trained test policy writes reasoning on few first turns, but on enough to score
    first = "collapse_first_turn_nocopy_sample/"
    for metric in ("retrieval_accuracy", "retrieval_above_chance", "mi_estimate", "mi_zscore", "conditional_entropy_est"):
        assert first + metric in row and not pd.isna(row[first + metric]), metric
    assert 0.0 <= row[first + "copied_token_frac"] <= 1.0
    if row[first + "copied_token_frac"] == 0.0:  # nothing copied, and the same (uncapped) draw: the plain values
        assert row[first + "mi_estimate"] == pytest.approx(row["collapse_first_turn_sample/mi_estimate"])
