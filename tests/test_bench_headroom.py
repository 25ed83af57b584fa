"""``make bench-headroom``'s reading of a cell, its group counts, and one cell measured on the suite's tiny policy."""

from __future__ import annotations

from benchmarks.bench_headroom import headroom_reading, measure_cell, success_varied_groups, table
from tests.conftest import TINY_OVERRIDES


def test_the_reading_names_what_keeps_a_cell_from_the_goal():
    assert headroom_reading(0.3, 0.75) == "meets the goal"
    assert headroom_reading(0.0, 0.0) == "T=1 success 0.00 below 0.1; 0% of groups with reward variance, under 50%"
    assert headroom_reading(0.9, 0.5) == "T=1 success 0.90 above 0.8: little room"


def test_groups_with_reward_variance_and_with_varied_success_are_told_apart(tiny_policy):
    from agentcollapse.diagnostics.collapse import reward_variance_stats
    from tests.helpers import hand_batch

    # a format penalty gives the second group variance without any success to learn from
    batch = hand_batch(tiny_policy, [[1.0, 0.0, 0.0, 0.0], [-0.1, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    assert 1.0 - reward_variance_stats(batch)["collapse/zero_rv_group_frac"] == 0.5  # the count the bench reads
    assert success_varied_groups(batch.successes()) == 0.25


def test_a_cell_measured_on_the_tiny_policy_reads_and_tabulates(cache_dir):
    overrides = [o for o in TINY_OVERRIDES if not o.startswith(("rollout.num_prompts", "rollout.group_size"))]
    row = measure_cell("tiny", "frozenlake", 4, [*overrides, f"cache_dir={cache_dir}"])
    assert (row["policy"], row["env"], row["n"]) == ("tiny", "frozenlake", 4)
    assert 0 <= row["success_t1_ci"][0] <= row["success_t1"] <= row["success_t1_ci"][1] <= 1
    assert row["varied_groups"] in {k / 8 for k in range(9)}  # P=8 groups
    assert row["reading"] == headroom_reading(row["success_t1"], row["varied_groups"])
    assert "| tiny | frozenlake |" in table([row])
