"""``make bench-headroom``'s reading of a cell, its group counts, and one cell measured on the suite's tiny policy."""

from __future__ import annotations

from benchmarks.bench_headroom import cell_key, headroom_reading, measure_cell, success_varied_groups, table
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


def test_a_lever_is_a_row_of_its_own_listed_apart_from_the_shipped_cells():
    def row(variant: str | None, success: float) -> dict:
        r = {
            "policy": "tiny",
            "env": "webshop",
            "success_t1": success,
            "success_t1_ci": [0.0, 1.0],
            "success_t05": 0.0,
            "success_t05_ci": [0.0, 1.0],
            "format_t1": 1.0,
            "rv_std_over_mean": 0.5,
            "varied_groups": 0.5,
            "varied_groups_ci": [0.2, 0.8],
            "success_varied_groups": 0.5,
            "reading": "x",
            "overrides": ["env.kwargs.num_products=100"],
        }
        return r if variant is None else {**r, "variant": variant}

    shipped, lever = row(None, 0.0), row("small-catalogue", 0.25)  # a row saved before variants existed is the shipped one
    assert cell_key(shipped) != cell_key(lever)
    text = table([lever, shipped])
    main, levers = text.split("## Levers tried")
    assert "| tiny | webshop | 0.000" in main and "small-catalogue" not in main
    assert "| tiny | webshop | small-catalogue | env.kwargs.num_products=100 | 0.250" in levers
