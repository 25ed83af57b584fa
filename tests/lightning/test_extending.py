"""Adding a filter strategy is one decorated function: registered, it is a valid ``filter.strategy``
that a real run trains with through the config (compose -> validate -> SNRFilter callback -> update)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from agentcollapse import run
from agentcollapse.filtering import register_strategy, strategies, strategy_names
from agentcollapse.filtering.strategies import unit_open


def test_a_registered_strategy_trains_through_the_config(make_cfg):
    @register_strategy("first_group_only", check=unit_open)
    def _first(ranked: np.ndarray, value, ctx) -> np.ndarray:
        """Keep the best-scoring group alone (a test strategy)."""
        return np.arange(min(1, ranked.size))

    try:
        assert "first_group_only" in strategy_names()
        # ranked by response length, which (unlike the tiny test policy's rewards) always varies
        cfg = make_cfg(
            "filter=rv_top_p",
            "filter.metric=length",
            "filter.strategy=first_group_only",
            "filter.include_zero=true",
            "trainer.num_threads=1",
            "trainer.val_every=0",
        )
        summary = run.train(cfg)
        assert summary["status"] == "finished"
        rows = pd.read_csv(Path(cfg.run_dir) / "metrics.csv")
        assert len(rows) == 2 and (rows["filter/kept_count"] == 1).all() and (rows["rollout/empty_after_filter"] == 0).all()
        # one kept group of G=4 trajectories: the update trained on their sequences only
        assert (rows["actor/num_sequences"] <= cfg.rollout.group_size * cfg.env.kwargs["max_turns"]).all()
    finally:
        strategies._STRATEGIES.remove("first_group_only")
