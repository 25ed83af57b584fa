"""Tests for the SNR-aware filtering core; expected index arrays are computed by hand.

The boundary cases where our semantics follow the authors' code (issue 12) are in test_parity.py.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from agentcollapse.errors import UserError
from agentcollapse.filtering import (
    METRICS,
    SCALE_MODES,
    STRATEGIES,
    group_scores,
    interpret_rv_ratio,
    loss_scale,
    rv_quantile_buckets,
    rv_std_over_mean,
    select_groups,
    trajectory_filter,
)

# Index:            0    1    2    3    4
# Descending non-zero ranking: 1 (0.4), 3 (0.3), 4 (0.2), 0 (0.1); group 2 is zero. Total = 1.0.
SCORES = np.array([0.1, 0.4, 0.0, 0.3, 0.2])


def assert_kept(got: np.ndarray, expected: list[int]) -> None:
    assert got.dtype == np.int64
    assert got.tolist() == expected


# --------------------------------------------------------------------------- constants


def test_constants() -> None:
    assert METRICS == (
        "reward_variance",
        "reward_std",
        "reward",
        "reward_sum",
        "entropy",
        "entropy_variance",
        "entropy_std",
        "length",
    )
    assert STRATEGIES == ("top_p", "top_k", "top_k_abs", "min_p", "percentile_range", "within_group")
    assert SCALE_MODES == ("none", "linear", "sqrt")


# --------------------------------------------------------------------------- group_scores


def test_group_scores_match_hand_loop() -> None:
    rng = np.random.default_rng(0)
    vals = rng.normal(size=(5, 4))
    rows = [list(map(float, r)) for r in vals]
    np.testing.assert_allclose(group_scores(vals, "reward_variance"), [statistics.variance(r) for r in rows])
    np.testing.assert_allclose(group_scores(vals, "reward_std"), [statistics.stdev(r) for r in rows])
    np.testing.assert_allclose(group_scores(vals, "reward"), [statistics.mean(r) for r in rows])
    np.testing.assert_allclose(group_scores(vals, "entropy"), [statistics.mean(r) for r in rows])
    np.testing.assert_allclose(group_scores(vals, "entropy_variance"), [statistics.variance(r) for r in rows])
    np.testing.assert_allclose(group_scores(vals, "length"), [statistics.mean(r) for r in rows])
    np.testing.assert_allclose(group_scores(vals, "reward_sum"), [math.fsum(r) for r in rows])
    np.testing.assert_allclose(group_scores(vals, "entropy_std"), [statistics.stdev(r) for r in rows])


def test_group_scores_small_hand_values() -> None:
    returns = [[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
    np.testing.assert_allclose(group_scores(returns, "reward_variance"), [0.5, 0.0, 0.0])
    np.testing.assert_allclose(group_scores(returns, "reward_std"), [math.sqrt(0.5), 0.0, 0.0])
    np.testing.assert_allclose(group_scores(returns, "reward"), [0.5, 1.0, 0.0])


def test_group_scores_default_is_reward_std() -> None:
    # Issue 12: the default score is the std (what the authors' "reward_variance" computes).
    vals = np.array([[1.0, 3.0, 5.0]])
    assert group_scores(vals).tolist() == [2.0]
    assert group_scores(vals, "reward_variance").tolist() == [4.0]


def test_group_scores_single_rollout_mean_metrics_ok() -> None:
    vals = np.array([[2.0], [3.0]])
    assert group_scores(vals, "reward").tolist() == [2.0, 3.0]
    assert group_scores(vals, "length").tolist() == [2.0, 3.0]


@pytest.mark.parametrize("metric", ["reward_variance", "reward_std", "entropy_variance", "entropy_std"])
def test_group_scores_variance_needs_two_rollouts(metric: str) -> None:
    with pytest.raises(UserError, match="set group_size>=2"):
        group_scores(np.ones((3, 1)), metric)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_group_scores_rejects_non_finite(bad: float) -> None:
    vals = np.ones((2, 3))
    vals[1, 2] = bad
    with pytest.raises(UserError, match="every value is finite"):
        group_scores(vals)


@pytest.mark.parametrize("shape", [(4,), (2, 2, 2)])
def test_group_scores_rejects_non_2d(shape: tuple[int, ...]) -> None:
    with pytest.raises(UserError, match=r"reshape to \[P, G\]"):
        group_scores(np.ones(shape))


def test_group_scores_unknown_metric_lists_valid() -> None:
    with pytest.raises(UserError, match="choose one of reward_variance, reward_std"):
        group_scores(np.ones((2, 2)), "kl")


def test_group_scores_non_numeric() -> None:
    with pytest.raises(UserError, match="pass a float array"):
        group_scores(np.array([["a", "b"]]))


# --------------------------------------------------------------------------- top_p


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.5, [1, 3]),  # threshold 0.49: cumsum 0.4, 0.7
        (0.9, [1, 3, 4]),  # threshold 0.89: cumsum 0.4, 0.7, 0.9
        (0.95, [1, 3, 4, 0]),  # threshold 0.94: needs all four
        (1.0, [1, 3, 4, 0]),  # all non-zero groups
        (0.02, [1]),  # threshold 0.01: the first group reaches it
        (1e-6, []),  # value * total = 1e-6 <= eps: nothing (test_parity.py)
    ],
)
def test_top_p_linear(value: float, expected: list[int]) -> None:
    assert_kept(select_groups(SCORES, "top_p", value), expected)


def test_top_p_value_one_with_include_zero_keeps_all() -> None:
    assert_kept(select_groups(SCORES, "top_p", 1.0, include_zero=True), [1, 3, 4, 0, 2])


def test_top_p_value_one_keeps_last_group_despite_rounding() -> None:
    # Many tiny groups: float cumsum may never reach total exactly; value=1 must keep all.
    scores = np.full(1000, 0.1)
    assert select_groups(scores, "top_p", 1.0, selection_eps=0.0).size == 1000


def test_top_p_selection_eps() -> None:
    scores = np.array([4.0, 3.0, 2.0, 1.0])  # total 10
    # threshold = 7.5 - 0.5 = 7.0 -> cumsum 4, 7 -> keep 2
    assert_kept(select_groups(scores, "top_p", 0.75, selection_eps=0.5), [0, 1])
    # without eps the threshold is 7.5 -> cumsum 4, 7, 9 -> keep 3
    assert_kept(select_groups(scores, "top_p", 0.75, selection_eps=0.0), [0, 1, 2])


def test_top_p_softmax_differs_from_linear() -> None:
    scores = np.array([1.0, 2.0, 0.5, 0.0])
    # survivors by rank: 1 (2.0), 0 (1.0), 2 (0.5); softmax -> 0.6285, 0.2312, 0.1402
    # softmax, value 0.6: threshold 0.59 -> keep 1
    assert_kept(select_groups(scores, "top_p", 0.6, top_p_mode="softmax"), [1])
    # softmax, value 0.7: threshold 0.69 -> cumsum 0.6285, 0.8597 -> keep 2
    assert_kept(select_groups(scores, "top_p", 0.7, top_p_mode="softmax"), [1, 0])
    # linear, value 0.6: total 3.5, threshold 2.09 -> cumsum 2, 3 -> keep 2
    assert_kept(select_groups(scores, "top_p", 0.6, top_p_mode="linear"), [1, 0])


def test_top_p_softmax_accepts_negative_scores() -> None:
    scores = np.array([-1.0, 0.0, 1.0])
    # softmax of [1, 0, -1] = 0.665, 0.245, 0.090; value 0.8 -> threshold 0.79 -> keep 2
    assert_kept(select_groups(scores, "top_p", 0.8, include_zero=True, top_p_mode="softmax"), [2, 1])


def test_top_p_linear_negative_scores_rank_like_any_other() -> None:
    # Issue 12 (item 5): no error. total 1, threshold 0.49: group 1 (2.0) reaches it.
    assert_kept(select_groups(np.array([-1.0, 2.0]), "top_p", 0.5, include_zero=True), [1])


def test_negative_scores_are_candidates_without_include_zero() -> None:
    # Issue 12 (item 5): only |score| <= 1e-10 is dropped; rho=1 keeps every candidate.
    assert_kept(select_groups(np.array([-1.0, 2.0, 0.0]), "top_p", 1.0), [1, 0])


# --------------------------------------------------------------------------- top_k / top_k_abs


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # int(value * 5 groups), at least 1, at most the 4 non-zero ones (test_parity.py)
        (0.5, [1, 3]),  # int(2.5) = 2
        (0.6, [1, 3, 4]),  # int(3.0) = 3
        (0.7, [1, 3, 4]),  # int(3.5) = 3
        (0.01, [1]),  # at least one
        (1.0, [1, 3, 4, 0]),  # int(5) capped at 4
    ],
)
def test_top_k(value: float, expected: list[int]) -> None:
    assert_kept(select_groups(SCORES, "top_k", value), expected)


def test_top_k_include_zero() -> None:
    assert_kept(select_groups(SCORES, "top_k", 1.0, include_zero=True), [1, 3, 4, 0, 2])


@pytest.mark.parametrize(
    ("value", "include_zero", "expected"),
    [
        (2, False, [1, 3]),
        (2.0, False, [1, 3]),
        (10, False, [1, 3, 4, 0]),
        (5, True, [1, 3, 4, 0, 2]),
    ],
)
def test_top_k_abs(value: float, include_zero: bool, expected: list[int]) -> None:
    assert_kept(select_groups(SCORES, "top_k_abs", value, include_zero=include_zero), expected)


def test_ties_keep_lower_index_first() -> None:
    scores = np.array([0.2, 0.5, 0.2, 0.5, 0.0])
    assert_kept(select_groups(scores, "top_k_abs", 3), [1, 3, 0])
    assert_kept(select_groups(scores, "top_p", 1.0), [1, 3, 0, 2])
    assert_kept(select_groups(scores, "min_p", 1.0), [1, 3])


# --------------------------------------------------------------------------- min_p


@pytest.mark.parametrize(
    ("value", "include_zero", "expected"),
    [
        (0.5, False, [1, 3, 4]),  # score >= 0.2
        (1.0, False, [1]),
        (0.0, False, [1, 3, 4, 0]),
        (0.0, True, [1, 3, 4, 0, 2]),
    ],
)
def test_min_p(value: float, include_zero: bool, expected: list[int]) -> None:
    assert_kept(select_groups(SCORES, "min_p", value, include_zero=include_zero), expected)


def test_min_p_negative_best_keeps_what_the_rule_keeps() -> None:
    # Issue 12 (item 5): no error; threshold 0.5 * -1 = -0.5 and no score reaches it.
    assert_kept(select_groups(np.array([-1.0, -2.0]), "min_p", 0.5, include_zero=True), [])
    # value 1: score >= max - 1e-10 keeps the best
    assert_kept(select_groups(np.array([-1.0, -2.0]), "min_p", 1.0, include_zero=True), [0])


# --------------------------------------------------------------------------- percentile_range

# Index:     0    1    2    3    4    5    6    7
PR_SCORES = np.array([0.8, 0.1, 0.5, 0.0, 0.3, 0.7, 0.2, 0.6])
# Descending ranking: 0, 5, 7, 2, 4, 6, 1, 3


@pytest.mark.parametrize(
    ("lo_hi", "expected"),
    [
        ((0.0, 0.25), [0, 5]),
        ((0.25, 0.5), [7, 2]),
        ((0.5, 0.75), [4, 6]),
        ((0.75, 1.0), [1, 3]),
        ([0.0, 1.0], [0, 5, 7, 2, 4, 6, 1, 3]),
    ],
)
def test_percentile_range_quartiles(lo_hi: tuple[float, float], expected: list[int]) -> None:
    assert_kept(select_groups(PR_SCORES, "percentile_range", lo_hi, include_zero=True), expected)


def test_percentile_range_band_after_zero_exclusion() -> None:
    # Issue 12 (item 6): without include_zero the band is over the 7 non-zero groups
    # 0, 5, 7, 2, 4, 6, 1: Q4 = ranks [round(5.25), 7) = [5, 7).
    assert_kept(select_groups(PR_SCORES, "percentile_range", (0.75, 1.0)), [6, 1])
    assert_kept(select_groups(PR_SCORES, "percentile_range", (0.75, 1.0), include_zero=True), [1, 3])


@pytest.mark.parametrize("n", list(range(4, 14)) + [100])
def test_quartiles_partition_all_groups(n: int) -> None:
    # Rounded edges (the authors' rule) partition the groups once there are >= 4 of them.
    rng = np.random.default_rng(n)
    scores = rng.integers(0, 3, size=n).astype(float)  # many ties and zeros
    quartiles = [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]
    parts = [select_groups(scores, "percentile_range", q, include_zero=True) for q in quartiles]
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == list(range(n))
    # concatenated quartiles are exactly the full descending ranking
    full = select_groups(scores, "percentile_range", (0.0, 1.0), include_zero=True)
    assert joined.tolist() == full.tolist()
    if n % 4 == 0:
        assert [p.size for p in parts] == [n // 4] * 4


def test_percentile_range_float_boundaries_partition() -> None:
    scores = np.arange(100, dtype=float)
    a = select_groups(scores, "percentile_range", (0.0, 0.29), include_zero=True)
    b = select_groups(scores, "percentile_range", (0.29, 1.0), include_zero=True)
    assert a.size == 29  # 0.29 * 100 is 28.999... in floating point
    assert a.size + b.size == 100
    assert set(a.tolist()).isdisjoint(b.tolist())


# --------------------------------------------------------------------------- all-zero / one group


@pytest.mark.parametrize(("strategy", "value"), [("top_p", 0.9), ("top_k", 0.5), ("top_k_abs", 3), ("min_p", 0.5)])
def test_all_zero_gives_empty(strategy: str, value: float) -> None:
    got = select_groups(np.zeros(4), strategy, value)
    assert_kept(got, [])


@pytest.mark.parametrize(("strategy", "value"), [("top_p", 0.9), ("top_k", 0.5), ("top_k_abs", 3), ("min_p", 0.5)])
def test_one_nonzero_group(strategy: str, value: float) -> None:
    assert_kept(select_groups(np.array([0.0, 0.0, 0.3, 0.0]), strategy, value), [2])


def test_near_zero_counts_as_zero() -> None:
    assert_kept(select_groups(np.array([1e-15, 0.5]), "top_p", 1.0), [1])


def test_empty_scores() -> None:
    assert_kept(select_groups(np.zeros(0), "top_p", 0.9), [])
    assert_kept(select_groups(np.zeros(0), "percentile_range", (0.0, 0.25)), [])


# --------------------------------------------------------------------------- select_groups errors


def test_unknown_strategy_lists_valid() -> None:
    with pytest.raises(UserError, match="choose one of top_p, top_k, top_k_abs, min_p"):
        select_groups(SCORES, "best")


def test_unknown_top_p_mode_lists_valid() -> None:
    with pytest.raises(UserError, match="choose one of linear, softmax"):
        select_groups(SCORES, "top_p", 0.9, top_p_mode="exp")


@pytest.mark.parametrize(
    ("strategy", "value", "fix"),
    [
        ("top_p", 0.0, r"set value in \(0, 1\]"),
        ("top_p", 1.5, r"set value in \(0, 1\]"),
        ("top_p", float("nan"), r"set value in \(0, 1\]"),
        ("top_k", 0.0, r"set value in \(0, 1\]"),
        ("top_k", 2.0, r"set value in \(0, 1\]"),
        ("min_p", -0.1, r"set value in \[0, 1\]"),
        ("min_p", 1.1, r"set value in \[0, 1\]"),
        ("top_k_abs", 0, "set value=<count>"),
        ("top_k_abs", 2.5, "use strategy top_k for a fraction"),
        ("percentile_range", (0.5, 0.25), r"e.g. value=\(0.0, 0.25\)"),
        ("percentile_range", (-0.1, 0.5), r"e.g. value=\(0.0, 0.25\)"),
        ("percentile_range", (0.0, 1.5), r"e.g. value=\(0.0, 0.25\)"),
        ("percentile_range", 0.25, r"e.g. value=\(0.0, 0.25\)"),
        ("percentile_range", (0.0, 0.25, 0.5), r"e.g. value=\(0.0, 0.25\)"),
    ],
)
def test_value_out_of_range(strategy: str, value: object, fix: str) -> None:
    with pytest.raises(UserError, match=fix):
        select_groups(SCORES, strategy, value)


def test_value_not_a_number() -> None:
    with pytest.raises(UserError, match="must be a number"):
        select_groups(SCORES, "top_p", "high")


def test_top_k_abs_rejects_bool() -> None:
    with pytest.raises(UserError, match="integer >= 1"):
        select_groups(SCORES, "top_k_abs", True)


def test_negative_selection_eps() -> None:
    with pytest.raises(UserError, match=">= 0"):
        select_groups(SCORES, "top_p", 0.9, selection_eps=-0.1)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_select_groups_rejects_non_finite_scores(bad: float) -> None:
    with pytest.raises(UserError, match="every value is finite"):
        select_groups(np.array([0.1, bad]), "top_p", 0.9)


def test_select_groups_rejects_2d_scores() -> None:
    with pytest.raises(UserError, match="one score per group"):
        select_groups(np.ones((2, 2)), "top_p", 0.9)


# --------------------------------------------------------------------------- trajectory_filter


def test_trajectory_filter_hand_example() -> None:
    returns = np.array(
        [
            [5.0, 1.0, 3.0, 2.0, 4.0, 0.0],  # bottom-2: idx 5, 1; top-2: idx 0, 4
            [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],  # all tied: bottom idx 0, 1; top idx 4, 5
        ]
    )
    mask = trajectory_filter(returns, 2)
    assert mask.dtype == np.bool_
    assert mask.tolist() == [
        [True, True, False, False, True, True],
        [True, True, False, False, True, True],
    ]


def test_trajectory_filter_ties_keep_exactly_2k() -> None:
    returns = np.array([[0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0]])
    # ranking by (reward, index): 0, 4, 6, 1, 2, 3, 5 -> bottom-2 {0, 4}, top-2 {3, 5}
    mask = trajectory_filter(returns, 2)
    assert mask.tolist() == [[True, False, False, True, True, True, False]]
    assert int(mask.sum()) == 4


def test_trajectory_filter_paper_shape() -> None:
    rng = np.random.default_rng(1)
    returns = rng.normal(size=(3, 16))
    mask = trajectory_filter(returns, 8)  # 2k == G: keep everything
    assert mask.all()
    mask = trajectory_filter(returns, 4)
    assert mask.sum(axis=1).tolist() == [8, 8, 8]
    for row, m in zip(returns, mask, strict=True):
        kept = np.sort(row[m])
        srt = np.sort(row)
        np.testing.assert_allclose(kept, np.concatenate([srt[:4], srt[-4:]]))


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_trajectory_filter_bad_k(k: object) -> None:
    with pytest.raises(UserError, match="set k>=1"):
        trajectory_filter(np.ones((2, 4)), k)  # type: ignore[arg-type]


def test_trajectory_filter_rejects_nan() -> None:
    with pytest.raises(UserError, match="every value is finite"):
        trajectory_filter(np.array([[0.0, float("nan")]]), 1)


# --------------------------------------------------------------------------- loss_scale


def test_loss_scale_values() -> None:
    assert loss_scale(4, 16, "none") == 1.0
    assert loss_scale(4, 16, "linear") == 0.25
    assert loss_scale(4, 16, "sqrt") == 0.5
    assert loss_scale(16, 16, "sqrt") == 1.0
    assert loss_scale(0, 16, "linear") == 0.0


def test_loss_scale_errors() -> None:
    with pytest.raises(UserError, match="choose one of none, linear, sqrt"):
        loss_scale(1, 2, "log")
    with pytest.raises(UserError, match="number of groups before filtering"):
        loss_scale(0, 0, "linear")
    with pytest.raises(UserError, match="pass the number of kept groups"):
        loss_scale(3, 2, "linear")


# --------------------------------------------------------------------------- RV diagnostics


def test_rv_std_over_mean_hand_values() -> None:
    # RV = [0.5, 0.0]: mean 0.25, population std 0.25 -> 1.0
    assert rv_std_over_mean([[0.0, 1.0], [0.0, 0.0]]) == pytest.approx(1.0)
    # equal RV everywhere -> 0
    assert rv_std_over_mean([[0.0, 1.0], [1.0, 0.0]]) == pytest.approx(0.0)
    # RV = [1, 4] (ddof=1 variances of [0,1,2] and [0,2,4]): mean 2.5, population std 1.5
    assert rv_std_over_mean([[0.0, 1.0, 2.0], [0.0, 2.0, 4.0]]) == pytest.approx(0.6)


def test_rv_std_over_mean_all_zero_is_nan() -> None:
    assert math.isnan(rv_std_over_mean(np.ones((4, 3))))


def test_rv_std_over_mean_needs_two_rollouts() -> None:
    with pytest.raises(UserError, match="set group_size>=2"):
        rv_std_over_mean(np.ones((4, 1)))


@pytest.mark.parametrize(
    ("ratio", "phrase"),
    [
        (1.16, "SNR filtering likely helps"),
        (1.0, "SNR filtering likely helps"),
        (0.33, "filtering unlikely to help and may hurt"),
        (0.7, "borderline"),
        (0.5, "borderline"),
        (float("nan"), "no reward variance in any group"),
    ],
)
def test_interpret_rv_ratio(ratio: float, phrase: str) -> None:
    text = interpret_rv_ratio(ratio)
    assert phrase in text
    assert "\n" not in text


def test_interpret_rv_ratio_all_zero_end_to_end() -> None:
    text = interpret_rv_ratio(rv_std_over_mean(np.zeros((3, 4))))
    assert "filtering would empty the batch" in text


def test_a_batch_with_no_success_says_where_its_reward_variance_comes_from() -> None:
    # SearchQA/WebShop with a policy that never succeeds: the variance is format penalties and partial credit
    returns = np.array([[0.0, -0.1, 0.0, -0.1], [0.0, 0.0, 0.0, -0.1]])
    text = interpret_rv_ratio(rv_std_over_mean(returns), success_rate=0.0)
    assert text.startswith("no trajectory succeeded") and "Std(RV)/Mean(RV) = " in text and "\n" not in text
    assert interpret_rv_ratio(1.2, success_rate=0.25) == interpret_rv_ratio(1.2)  # some success: the plain reading


def test_interpret_rv_ratio_negative() -> None:
    with pytest.raises(UserError, match="must be >= 0"):
        interpret_rv_ratio(-1.0)


def test_rv_quantile_buckets_hand_example() -> None:
    scores = np.array([0.6, 0.1, 0.5, 0.2, 0.4, 0.3])
    buckets = rv_quantile_buckets(scores, 3)
    assert [b.tolist() for b in buckets] == [[1, 3], [5, 4], [2, 0]]
    assert all(b.dtype == np.int64 for b in buckets)


def test_rv_quantile_buckets_default_six() -> None:
    # Issue 12: leftover groups join the top bucket (the authors' split), not the first ones.
    buckets = rv_quantile_buckets(np.arange(7, dtype=float))
    assert [b.tolist() for b in buckets] == [[0], [1], [2], [3], [4], [5, 6]]
    few = rv_quantile_buckets(np.array([2.0, 1.0]))
    assert [b.tolist() for b in few] == [[1], [0], [], [], [], []]


def test_rv_quantile_buckets_errors() -> None:
    with pytest.raises(UserError, match="e.g. 6"):
        rv_quantile_buckets(np.ones(4), 0)
    with pytest.raises(UserError, match="every value is finite"):
        rv_quantile_buckets(np.array([1.0, float("nan")]))


# --------------------------------------------------------------------------- torch input


def test_torch_tensors_accepted() -> None:
    torch = pytest.importorskip("torch")
    returns = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]], requires_grad=True)
    scores = group_scores(returns, "reward_variance")
    np.testing.assert_allclose(scores, [1.0 / 3.0, 0.0])
    kept = select_groups(torch.tensor(scores), "top_p", 0.9)
    assert_kept(kept, [0])
    # row 0 ranked by (reward, index): 0, 3, 1, 2 -> keep idx 0 (bottom) and 2 (top)
    assert trajectory_filter(returns, 1).tolist() == [
        [True, False, True, False],
        [True, False, False, True],
    ]
    assert rv_std_over_mean(returns) == pytest.approx(1.0)
    bf16 = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=torch.bfloat16)
    np.testing.assert_allclose(group_scores(bf16, "reward_variance"), [0.5, 0.0])
    assert [b.tolist() for b in rv_quantile_buckets(torch.tensor([0.3, 0.1]), 2)] == [[1], [0]]
