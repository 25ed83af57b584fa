"""Issue 12: the filter follows the authors' semantics (ragen/trainer/rollout_filter.py).

One hand-computed boundary case per difference the issue lists, plus the knobs theirs has that ours
lacked (filter_type=smallest, reward_sum, within_group, the in_group_* logs, bucket splits).
docs/parity.md states each rule in words.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentcollapse.filtering import (
    decide,
    group_scores,
    rv_buckets,
    rv_quantile_buckets,
    select_groups,
    within_group_mask,
)

NO_FILTER_KNOBS = dict(include_zero=False, top_p_mode="linear", selection_eps=0.01, loss_scale="none", trajectory_k=0)


def _decide(returns, metric="reward_std", strategy="top_p", value=0.9, **kw):
    opts = {**NO_FILTER_KNOBS, **kw}
    r = np.asarray(returns, dtype=float)
    return decide(r, np.zeros_like(r), name="test", metric=metric, strategy=strategy, value=value, **opts)


# -- 1. the default score is the std -------------------------------------------------------------
def test_default_score_is_std_and_keeps_a_different_set_than_the_variance() -> None:
    # stds sqrt(2), 1/sqrt(2), 1/sqrt(2) (total 2.828) vs variances 2, 0.5, 0.5 (total 3) at rho 0.6:
    # std threshold 1.687 needs two groups; variance threshold 1.79 is reached by the first.
    returns = [[0.0, 2.0], [0.0, 1.0], [1.0, 0.0]]
    assert _decide(returns, "reward_std", value=0.6).kept_groups.tolist() == [0, 1]
    assert _decide(returns, "reward_variance", value=0.6).kept_groups.tolist() == [0]
    np.testing.assert_allclose(group_scores(returns), [math.sqrt(2), math.sqrt(0.5), math.sqrt(0.5)])


# -- 2. top_k truncates a fraction of all groups -------------------------------------------------
def test_top_k_is_int_of_a_fraction_of_all_groups() -> None:
    scores = np.array([0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.0])  # P=8, one zero group
    # int(0.75 * 8) = 6 of the 7 survivors (rounding 0.75 * 7 would keep 5)
    assert select_groups(scores, "top_k", 0.75).tolist() == [0, 1, 2, 3, 4, 5]
    assert select_groups(scores, "top_k", 0.3).size == 2  # int(2.4)
    assert select_groups(scores, "top_k", 0.99).size == 7  # int(7.92) = 7 = every survivor
    assert select_groups(scores, "top_k", 1.0).size == 7  # 8 capped at the survivors
    assert select_groups(scores, "top_k", 0.1).size == 1  # int(0.8) = 0 -> at least one


# -- 3. softmax top_p has no eps -----------------------------------------------------------------
@pytest.mark.parametrize("eps", [0.0, 0.01, 0.1])
def test_softmax_top_p_ignores_selection_eps(eps: float) -> None:
    scores = np.log([5.0, 3.0, 2.0])  # softmax = 0.5, 0.3, 0.2
    # cumulative 0.5 < 0.505 <= 0.8: two groups, whatever eps (0.505 - 0.01 would keep one)
    got = select_groups(scores, "top_p", 0.505, top_p_mode="softmax", selection_eps=eps)
    assert got.tolist() == [0, 1]


# -- 4. linear top_p keeps nothing when the mass is below eps -----------------------------------
def test_linear_top_p_near_zero_mass_keeps_nothing() -> None:
    # the case: 0.9 * 0.01 - 0.01 < 0: threshold unreachable in a meaningful sense -> skip
    assert select_groups(np.array([0.006, 0.004, 0.0]), "top_p", 0.9, selection_eps=0.01).tolist() == []


def test_linear_top_p_boundary_is_rho_total_equal_eps() -> None:
    scores = np.array([0.012, 0.008])  # total 0.02
    assert select_groups(scores, "top_p", 0.5, selection_eps=0.01).tolist() == []  # 0.01 <= eps
    assert select_groups(scores, "top_p", 0.51, selection_eps=0.01).tolist() == [0]  # threshold 2e-4
    assert select_groups(scores, "top_p", 0.5, selection_eps=0.0).tolist() == [0]
    assert select_groups(scores, "top_p", 1.0, selection_eps=0.01).tolist() == [0, 1]  # rho=1: all


def test_batch_without_signal_is_skipped() -> None:
    d = _decide([[0.0, 0.001, 0.0, 0.0], [0.0, 0.0, 0.0, 0.002], [1.0, 1.0, 1.0, 1.0]])
    assert d.kept_groups.tolist() == []  # stds 5e-4 and 1e-3: 0.9 * 1.5e-3 <= 0.01
    assert d.metrics["filter/kept_count"] == 0.0


# -- 5. zero is |score| <= 1e-10, negative scores rank ------------------------------------------
def test_zero_tolerance_is_1e_10() -> None:
    scores = np.array([1e-10, 2e-10, 0.5, -1e-11])
    assert select_groups(scores, "top_k_abs", 4).tolist() == [2, 1]  # 1e-10 and -1e-11 are zero


def test_negative_scores_rank_like_any_other() -> None:
    scores = np.array([-0.5, 0.3, 0.0])
    assert select_groups(scores, "top_k_abs", 2).tolist() == [1, 0]
    assert select_groups(scores, "top_k_abs", 2, filter_type="smallest").tolist() == [0, 1]
    # linear top_p walks 0.3 (reaching 0.9 * -0.2 - 0.01 < 0 at once): nothing; softmax keeps ranks
    assert select_groups(scores, "top_p", 0.9).tolist() == []
    # softmax over the candidates 0.3, -0.5: 0.69, 0.31
    assert select_groups(scores, "top_p", 0.6, top_p_mode="softmax").tolist() == [1]
    assert select_groups(scores, "top_p", 0.7, top_p_mode="softmax").tolist() == [1, 0]
    # the mean-reward ablation on negative returns goes through decide without an error
    d = _decide([[-1.0, -0.5], [-0.2, -0.1], [-0.1, -0.1]], "reward", "top_k", 0.5)
    assert d.kept_groups.tolist() == [2]  # means -0.75, -0.15, -0.1: int(1.5) = 1, the largest


# -- 6. percentile_range after zero exclusion, rounded edges ------------------------------------
def test_percentile_range_rounds_edges_over_the_survivors() -> None:
    # 8 groups, 2 zero -> 6 survivors ranked 0..5 (group = 7 - rank for these scores)
    scores = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.0])
    ranked = [6, 5, 4, 3, 2, 1]
    # edges round(0.25 * 6) = round(1.5) = 2 and round(0.75 * 6) = round(4.5) = 4 (half to even)
    assert select_groups(scores, "percentile_range", (0.0, 0.25)).tolist() == ranked[0:2]
    assert select_groups(scores, "percentile_range", (0.25, 0.5)).tolist() == ranked[2:3]
    assert select_groups(scores, "percentile_range", (0.5, 0.75)).tolist() == ranked[3:4]
    assert select_groups(scores, "percentile_range", (0.75, 1.0)).tolist() == ranked[4:6]


def test_percentile_range_keeps_at_least_one_group() -> None:
    two = np.array([0.9, 0.1])
    assert select_groups(two, "percentile_range", (0.0, 0.25)).tolist() == [0]  # hi 0 -> lo + 1
    assert select_groups(two, "percentile_range", (0.25, 0.5)).tolist() == [0]  # [0, 1)
    assert select_groups(two, "percentile_range", (0.5, 0.75)).tolist() == [1]  # [1, 2)
    # the authors' rule has one hole: a lower edge that rounds to N keeps nothing (round(1.5) = 2)
    assert select_groups(two, "percentile_range", (0.75, 1.0)).tolist() == []


def test_percentile_range_agrees_with_floor_at_p8() -> None:
    scores = np.array([0.8, 0.1, 0.5, 0.05, 0.3, 0.7, 0.2, 0.6])
    order = np.argsort(-scores, kind="stable").tolist()
    for q, (lo, hi) in enumerate([(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]):
        got = select_groups(scores, "percentile_range", (lo, hi), include_zero=True).tolist()
        assert got == order[2 * q : 2 * q + 2]


# -- filter_type=smallest, for every strategy ----------------------------------------------------
SMALL = np.array([0.4, 0.1, 0.3, 0.2])


@pytest.mark.parametrize(
    ("strategy", "value", "mode", "expected"),
    [
        ("top_p", 0.5, "linear", [1, 3, 2]),  # threshold 0.49: 0.1, 0.3, 0.6
        ("top_p", 0.3, "softmax", [1, 3]),  # softmax(-s): 0.289, 0.261, ...: cumulative 0.289, 0.550
        ("top_k", 0.5, "linear", [1, 3]),
        ("top_k_abs", 3, "linear", [1, 3, 2]),
        ("min_p", 0.5, "linear", [1, 3]),  # score <= 0.1 / 0.5 = 0.2
        ("percentile_range", (0.0, 0.25), "linear", [1]),  # rank 0 of the ascending ranking
        ("percentile_range", (0.75, 1.0), "linear", [0]),
    ],
)
def test_smallest_keeps_the_low_end(strategy: str, value: object, mode: str, expected: list[int]) -> None:
    got = select_groups(SMALL, strategy, value, top_p_mode=mode, filter_type="smallest")
    assert got.tolist() == expected


def test_smallest_linear_top_p_stops_at_a_zero_score() -> None:
    # with zeros kept, the ascending walk meets 0 first and cannot reach the threshold: nothing
    assert select_groups(np.array([0.4, 0.0, 0.3]), "top_p", 0.5, include_zero=True, filter_type="smallest").tolist() == []


def test_unknown_filter_type_lists_valid() -> None:
    from agentcollapse.errors import UserError

    with pytest.raises(UserError, match="choose one of largest, smallest"):
        select_groups(SMALL, "top_k", 0.5, filter_type="middle")


# -- reward_sum ----------------------------------------------------------------------------------
def test_reward_sum_score() -> None:
    returns = [[3.0, 2.0], [1.0, 4.0], [2.0, 1.0], [0.0, 1.0]]  # sums 5, 5, 3, 1
    np.testing.assert_allclose(group_scores(returns, "reward_sum"), [5.0, 5.0, 3.0, 1.0])
    d = _decide(returns, "reward_sum", "top_k", 0.5)
    assert d.kept_groups.tolist() == [0, 1]


# -- within_group -------------------------------------------------------------------------------
def test_within_group_keeps_the_max_variance_subset() -> None:
    returns = np.array([[0.0, 0.2, 0.5, 0.9, 1.0, 1.0]])
    # k = round(0.5 * 6) = 3; splits bottom-j + top-(3-j): variances 0.0033, 0.333, 0.28, 0.0633
    assert within_group_mask(returns, 0.5).tolist() == [[True, False, False, False, True, True]]
    # k = round(0.25 * 6) = round(1.5) = 2: bottom-1 + top-1 = {0, 5}
    assert within_group_mask(returns, 0.25).tolist() == [[True, False, False, False, False, True]]
    # k = 1: every split has variance 0, the first (top-1) wins; ties rank by (return, index)
    assert within_group_mask(returns, 0.1).tolist() == [[False, False, False, False, False, True]]


def test_within_group_exact_tie_prefers_fewer_bottom_ones() -> None:
    # keep 3 of 0, 1, 2, 3: {0, 2, 3} and {0, 1, 3} both have variance 7/3; the first split wins
    assert within_group_mask(np.array([[0.0, 1.0, 2.0, 3.0]]), 0.75).tolist() == [[True, False, True, True]]


def test_within_group_through_decide_keeps_every_group() -> None:
    returns = [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    d = _decide(returns, strategy="within_group", value=0.5, loss_scale="linear")
    assert d.kept_groups.tolist() == [0, 1]
    # row 0: top-2 {0, 3} and bottom-1 + top-1 {1, 0} tie at variance 0.5, the first split wins;
    # row 1: all equal, top-2 by (return, index) = {2, 3}
    assert d.trajectory_mask.tolist() == [[True, False, False, True], [False, False, True, True]]
    assert d.loss_scale == 0.5  # the kept share of trajectories
    assert d.metrics["filter/kept_count"] == 4 and d.metrics["filter/kept_ratio"] == 0.5
    assert d.metrics["filter/within_group_keep_k"] == 2 and d.metrics["filter/within_group_keep_ratio"] == 0.5


# -- in_group_* metrics ---------------------------------------------------------------------------
def test_in_group_metrics_all_and_chosen() -> None:
    returns = [[0.0, 2.0], [1.0, 1.0], [0.0, 1.0]]  # std sqrt(2), 0, sqrt(.5); max 2, 1, 1; mean 1, 1, .5
    d = _decide(returns, value=0.5)  # threshold 0.5 * 2.121 - 0.01 = 1.05: group 0 alone
    assert d.kept_groups.tolist() == [0]
    m = d.metrics
    assert m["filter/in_group_std"] == pytest.approx((math.sqrt(2) + math.sqrt(0.5)) / 3)
    assert m["filter/in_group_max"] == pytest.approx(4 / 3)
    assert m["filter/in_group_mean"] == pytest.approx(2.5 / 3)
    assert m["filter/chosen_in_group_std"] == pytest.approx(math.sqrt(2))
    assert m["filter/chosen_in_group_max"] == 2.0 and m["filter/chosen_in_group_mean"] == 1.0
    assert m["filter/zero_count"] == 1.0


# -- gradient buckets ----------------------------------------------------------------------------
def test_quantile_buckets_give_leftovers_to_the_top_bucket() -> None:
    buckets = rv_quantile_buckets(np.arange(8, dtype=float))
    assert [b.size for b in buckets] == [1, 1, 1, 1, 1, 3]
    assert buckets[-1].tolist() == [5, 6, 7]


def test_fixed_rv_buckets() -> None:
    stds = np.array([0.2, 1.0, 5.5, 2.9, 0.99, 7.0])
    got = [b.tolist() for b in rv_buckets(stds, mode="fixed_rv")]
    assert got == [[0, 4], [1], [3], [], [], [2, 5]]  # [0,1) [1,2) [2,3) [3,4) [4,5) [5,inf)
    assert [b.tolist() for b in rv_buckets(stds, mode="fixed_rv", edges=[0.0, 3.0])] == [[0, 1, 3, 4], [2, 5]]
