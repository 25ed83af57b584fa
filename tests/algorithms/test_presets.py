"""Algorithm presets hold the literature's settings and validate themselves."""

import dataclasses

import pytest

from agentcollapse.algorithms import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    LOSS_AGG_MODES,
    PRESETS,
    AlgorithmPreset,
    get_preset,
)


def test_preset_values():
    assert set(PRESETS) == {"grpo", "dr_grpo", "dapo", "ppo"}
    g, d, dapo, ppo = (get_preset(n) for n in ("grpo", "dr_grpo", "dapo", "ppo"))
    assert (g.advantage, g.loss_agg_mode, g.clip_low, g.clip_high) == ("grpo", "token-mean", 0.2, 0.2)
    assert (g.kl_coef, g.kl_estimator, g.use_critic) == (0.001, "k3", False)
    assert (d.advantage, d.loss_agg_mode, d.kl_coef) == ("dr_grpo", "seq-mean-token-sum-norm", 0.0)
    assert (dapo.advantage, dapo.clip_low, dapo.clip_high, dapo.kl_coef) == ("grpo", 0.2, 0.28, 0.0)
    assert dapo.loss_agg_mode == "token-mean"
    assert (ppo.advantage, ppo.use_critic, ppo.gamma, ppo.lam) == ("gae", True, 1.0, 1.0)
    assert (ppo.kl_coef, ppo.kl_estimator, ppo.loss_agg_mode) == (0.001, "k3", "token-mean")
    for name, p in PRESETS.items():
        assert p.name == name
        assert p.entropy_coef == 0.001  # docs/method.md section 6
        assert p.loss_agg_mode in LOSS_AGG_MODES and p.kl_estimator in KL_ESTIMATORS
        assert p.use_critic or p.advantage in ADVANTAGE_ESTIMATORS


def test_frozen_and_validated():
    p = get_preset("grpo")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.clip_high = 0.5  # type: ignore[misc]
    for bad in (
        {"advantage": "reinforce"},
        {"loss_agg_mode": "sum"},
        {"kl_estimator": "k9"},
        {"use_critic": True},
        {"clip_ratio_c": 0.5},
        {"kl_coef": -1.0},
    ):
        with pytest.raises(ValueError):
            dataclasses.replace(p, **bad)
    assert isinstance(dataclasses.replace(p, clip_high=0.28), AlgorithmPreset)


def test_unknown_preset_lists_valid_names():
    with pytest.raises(ValueError, match="dapo") as err:
        get_preset("trpo")
    assert "dr_grpo" in str(err.value) and "ppo" in str(err.value)
