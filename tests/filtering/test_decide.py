"""decide(): the whole filter decision on hand-made [P, G] arrays, and the registries behind it."""

from __future__ import annotations

import numpy as np
import pytest

from agentcollapse.errors import UserError
from agentcollapse.filtering import (
    FilterDecision,
    check_settings,
    decide,
    get_score,
    register_score,
    register_strategy,
    required_feature,
    score_names,
    select_groups,
    strategy_names,
)
from agentcollapse.filtering import scores as scores_mod
from agentcollapse.filtering import strategies as strategies_mod
from agentcollapse.filtering.strategies import unit_open

# Group stds (ddof=1): g0 = 0.577, g1 = 0, g2 = 0.5, g3 = 0.05. top_p 0.9 linear keeps g0 and g2.
RETURNS = np.array([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0]])
SUCCESS = (RETURNS >= 1.0).astype(float)
RV_TOP_P = dict(
    name="rv_top_p",
    metric="reward_std",
    strategy="top_p",
    value=0.9,
    include_zero=False,
    top_p_mode="linear",
    selection_eps=0.01,
    loss_scale="none",
    trajectory_k=0,
)


def test_rv_top_p_decision() -> None:
    d = decide(RETURNS, SUCCESS, **RV_TOP_P)
    assert isinstance(d, FilterDecision)
    assert d.kept_groups.dtype == np.int64 and d.kept_groups.tolist() == [0, 2]
    assert d.trajectory_mask is None and d.loss_scale == 1.0
    m = d.metrics
    assert m["filter/kept_count"] == 2 and m["filter/kept_ratio"] == 0.5 and m["filter/zero_count"] == 1
    rv = RETURNS.var(axis=1, ddof=1)
    assert m["filter/all_rv_mean"] == pytest.approx(rv.mean())
    assert m["filter/chosen_rv_mean"] == pytest.approx(rv[[0, 2]].mean())
    assert m["filter/all_success_mean"] == pytest.approx(SUCCESS.mean())
    assert m["filter/chosen_success_mean"] == pytest.approx(SUCCESS[[0, 2]].mean())
    assert all(k.startswith("filter/") for k in m)


@pytest.mark.parametrize(("mode", "scale"), [("none", 1.0), ("linear", 0.5), ("sqrt", 0.5**0.5)])
def test_loss_scale_is_the_kept_fraction(mode: str, scale: float) -> None:
    assert decide(RETURNS, SUCCESS, **{**RV_TOP_P, "loss_scale": mode}).loss_scale == pytest.approx(scale)


def test_name_none_keeps_everything() -> None:
    d = decide(RETURNS, SUCCESS, **{**RV_TOP_P, "name": "none", "metric": "bogus"})  # nothing else is read
    assert d.kept_groups.tolist() == [0, 1, 2, 3] and d.trajectory_mask is None and d.loss_scale == 1.0
    assert d.metrics == {"filter/kept_count": 4.0, "filter/kept_ratio": 1.0}


def test_trajectory_k_is_the_trajectory_baseline() -> None:
    d = decide(RETURNS, SUCCESS, **{**RV_TOP_P, "trajectory_k": 1, "loss_scale": "linear"})
    assert d.kept_groups.tolist() == [0, 1, 2, 3] and d.loss_scale == 1.0  # unchanged: no scaling
    assert d.trajectory_mask.sum(axis=1).tolist() == [2, 2, 2, 2]
    assert d.trajectory_mask[0].tolist() == [False, True, True, False]  # bottom (0, idx 1), top (1, idx 2)
    assert d.metrics == {"filter/kept_ratio": 0.5, "filter/kept_count": 8.0}


def test_all_zero_std_keeps_nothing_whatever_the_strategy() -> None:
    equal = np.ones((3, 4))
    for strategy, value in (("top_k", 0.5), ("top_k_abs", 2), ("top_p", 1.0)):
        d = decide(equal, equal, **{**RV_TOP_P, "strategy": strategy, "value": value, "include_zero": True})
        assert d.kept_groups.tolist() == [], strategy
        assert d.loss_scale == 1.0 and d.metrics["filter/kept_count"] == 0
        assert d.metrics["filter/chosen_rv_mean"] == 0.0 and d.metrics["filter/chosen_in_group_std"] == 0.0
    # a score whose zero is no statement about task signal keeps its pick
    d = decide(
        np.zeros((3, 4)), np.zeros((3, 4)), **{**RV_TOP_P, "metric": "reward", "strategy": "top_k_abs", "value": 2, "include_zero": True}
    )
    assert d.kept_groups.tolist() == [0, 1]


def test_feature_scores_read_the_features() -> None:
    lengths = np.array([[5.0, 5.0, 5.0, 5.0], [9.0, 9.0, 9.0, 9.0], [1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    opts = {**RV_TOP_P, "metric": "length", "strategy": "top_k_abs", "value": 2}
    d = decide(RETURNS, SUCCESS, {"length": lengths}, **opts)
    assert d.kept_groups.tolist() == [1, 0]
    assert d.metrics["filter/in_group_mean"] == pytest.approx(lengths.mean())  # the score's own values
    assert d.metrics["filter/chosen_in_group_max"] == pytest.approx(7.0)
    with pytest.raises(UserError, match=r"needs features\['length'\]"):
        decide(RETURNS, SUCCESS, **opts)
    with pytest.raises(UserError, match="pass \\[P, G\\]"):
        decide(RETURNS, SUCCESS, {"length": lengths[:2]}, **opts)


def test_required_feature() -> None:
    assert required_feature("reward_std") is None and required_feature("reward_sum") is None
    assert required_feature("entropy") == required_feature("entropy_variance") == "entropy"
    assert required_feature("entropy_std") == "entropy" and required_feature("length") == "length"
    with pytest.raises(UserError, match="choose one of reward_variance, reward_std"):
        required_feature("kl")


def test_value_lists_become_pairs() -> None:
    opts = {**RV_TOP_P, "strategy": "percentile_range", "value": [0.0, 0.5]}
    assert decide(RETURNS, SUCCESS, **opts).kept_groups.tolist() == [0, 2]  # 3 survivors: ranks [0, 2)


def test_filter_type_smallest_through_decide() -> None:
    opts = {**RV_TOP_P, "strategy": "top_k_abs", "value": 2, "filter_type": "smallest"}
    assert decide(RETURNS, SUCCESS, **opts).kept_groups.tolist() == [3, 2]


def test_shape_errors() -> None:
    with pytest.raises(UserError, match="pass both as \\[P, G\\]"):
        decide(RETURNS, SUCCESS[:2], **RV_TOP_P)
    with pytest.raises(UserError, match="reshape to \\[P, G\\]"):
        decide(RETURNS[0], SUCCESS[0], **RV_TOP_P)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"metric": "kl"}, "unknown filter metric 'kl'"),
        ({"strategy": "best"}, "unknown filter strategy 'best'; choose one of top_p, top_k"),
        ({"value": 1.5}, r"set value in \(0, 1\]"),
        ({"top_p_mode": "exp"}, "choose one of linear, softmax"),
        ({"selection_eps": -1.0}, ">= 0"),
        ({"filter_type": "middle"}, "choose one of largest, smallest"),
        ({"loss_scale": "log"}, "choose one of none, linear, sqrt"),
        ({"trajectory_k": -1}, "integer >= 0"),
        ({"strategy": "within_group", "value": 0.0}, r"set value in \(0, 1\]"),
    ],
)
def test_check_settings_rejects_bad_settings(override: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        check_settings(**{**RV_TOP_P, **override})
    with pytest.raises(UserError, match=message):
        decide(RETURNS, SUCCESS, **{**RV_TOP_P, **override})


def test_check_settings_group_size_and_presets() -> None:
    check_settings(**RV_TOP_P, group_size=2)
    with pytest.raises(UserError, match="set group_size>=2"):
        check_settings(**RV_TOP_P, group_size=1)
    check_settings(**{**RV_TOP_P, "metric": "reward"}, group_size=1)
    check_settings(**{**RV_TOP_P, "name": "none", "strategy": "bogus"})  # none reads nothing
    check_settings(**{**RV_TOP_P, "trajectory_k": 4, "strategy": "bogus"})  # neither does the baseline


# -- registries -----------------------------------------------------------------------------------
def test_registry_names() -> None:
    assert score_names()[:2] == ("reward_variance", "reward_std")
    assert strategy_names("group") == ("top_p", "top_k", "top_k_abs", "min_p", "percentile_range")
    assert strategy_names("trajectory") == ("within_group",)
    assert get_score("reward_std").needs == "returns" and get_score("reward_std").min_group_size == 2


def test_a_new_strategy_is_one_decorated_function() -> None:
    @register_strategy("bottom_half", check=unit_open)
    def _bottom_half(ranked, value, ctx):
        """Every other group of the ranking (a test strategy)."""
        return np.arange(0, ranked.size, 2)

    try:
        assert "bottom_half" in strategy_names()
        assert select_groups(np.array([0.1, 0.4, 0.3, 0.2]), "bottom_half", 1.0).tolist() == [1, 3]
        opts = {**RV_TOP_P, "strategy": "bottom_half", "value": 1.0}
        assert decide(RETURNS, SUCCESS, **opts).kept_groups.tolist() == [0, 3]  # ranking 0, 2, 3
        with pytest.raises(UserError, match="bottom_half"):
            select_groups(np.ones(2), "nope")  # the error lists the new name too
    finally:
        strategies_mod._STRATEGIES.remove("bottom_half")
    assert "bottom_half" not in strategy_names()


def test_a_new_score_is_one_decorated_function() -> None:
    @register_score("reward_range", min_group_size=2, zero_means_no_signal=True)
    def _reward_range(values):
        """max - min of the group's returns (a test score)."""
        return values.max(axis=1) - values.min(axis=1)

    try:
        opts = {**RV_TOP_P, "metric": "reward_range", "strategy": "top_k_abs", "value": 1}
        assert decide(RETURNS, SUCCESS, **opts).kept_groups.tolist() == [0]
        assert required_feature("reward_range") is None
    finally:
        scores_mod._SCORES.remove("reward_range")


def test_duplicate_registration_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        register_strategy("top_p", check=unit_open)(lambda ranked, value, ctx: ranked)


def test_group_strategies_only_in_select_groups() -> None:
    with pytest.raises(UserError, match="selects trajectories inside every group"):
        select_groups(np.ones(3), "within_group", 0.5)
