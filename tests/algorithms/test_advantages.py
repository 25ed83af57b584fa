"""Advantage estimators against explicit Python loops (the way verl tests core_algos)."""

import math

import pytest
import torch

from agentcollapse.algorithms import (
    ADVANTAGE_ESTIMATORS,
    compute_group_advantages,
    dr_grpo_advantages,
    gae_advantages,
    group_advantages,
    grpo_advantages,
    masked_whiten,
)


def loop_group_adv(values, eps=1e-6, normalize_std=True):
    """Reference for one group, as plain Python floats."""
    n = len(values)
    if n < 2:
        return [0.0] * n
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    out = []
    for v in values:
        a = v - mean
        if normalize_std:
            a = a / (std + eps)
        out.append(a)
    return out


@pytest.mark.parametrize("shape", [(1, 2), (3, 4), (8, 16), (2, 5)])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("normalize_std", [True, False])
def test_grpo_matches_loop(shape, seed, normalize_std):
    torch.manual_seed(seed)
    R = torch.randn(shape, dtype=torch.float64)
    got = grpo_advantages(R, normalize_std=normalize_std)
    assert got.shape == R.shape
    for p in range(shape[0]):
        expected = loop_group_adv(R[p].tolist(), normalize_std=normalize_std)
        for g in range(shape[1]):
            assert got[p, g].item() == pytest.approx(expected[g], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 3])
def test_dr_grpo_is_mean_centred_only(seed):
    torch.manual_seed(seed)
    R = torch.rand(4, 6, dtype=torch.float64) * 5
    got = dr_grpo_advantages(R)
    for p in range(4):
        mean = sum(R[p].tolist()) / 6
        for g in range(6):
            assert got[p, g].item() == pytest.approx(R[p, g].item() - mean, abs=1e-12)
    torch.testing.assert_close(got.sum(dim=-1), torch.zeros(4, dtype=torch.float64))


def test_singleton_group_gives_zero():
    R = torch.tensor([[3.0], [-1.5]])
    assert torch.equal(grpo_advantages(R), torch.zeros(2, 1))
    assert torch.equal(dr_grpo_advantages(R), torch.zeros(2, 1))
    flat = group_advantages(torch.tensor([3.0, 1.0, 2.0]), torch.tensor([7, 9, 9]))
    assert flat[0].item() == 0.0
    assert flat[1].item() != 0.0


@pytest.mark.parametrize("value", [0.1, 1.0 / 3.0, -7.3, 0.0, 1e6 + 0.1])
@pytest.mark.parametrize("normalize_std", [True, False])
def test_all_equal_rewards_give_exact_zero(value, normalize_std):
    R = torch.full((3, 7), value, dtype=torch.float32)
    R[2] = torch.arange(7, dtype=torch.float32)  # one non-constant group stays non-zero
    got = grpo_advantages(R, normalize_std=normalize_std)
    assert torch.equal(got[:2], torch.zeros(2, 7))
    assert got[2].abs().sum() > 0
    flat = group_advantages(R.flatten(), torch.arange(3).repeat_interleave(7), normalize_std=normalize_std)
    assert torch.equal(flat[:14], torch.zeros(14))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("normalize_std", [True, False])
def test_ragged_groups_match_loop(seed, normalize_std):
    torch.manual_seed(seed)
    sizes = torch.randint(1, 6, (5,)).tolist()
    labels = [10 * k + 3 for k in range(5)]  # arbitrary, non-contiguous ids
    ids = torch.tensor([labels[k] for k, s in enumerate(sizes) for _ in range(s)])
    perm = torch.randperm(len(ids))
    ids = ids[perm]
    R = torch.randn(len(ids), dtype=torch.float64)
    got = group_advantages(R, ids, normalize_std=normalize_std)
    for label in labels:
        idx = [i for i in range(len(ids)) if ids[i].item() == label]
        expected = loop_group_adv([R[i].item() for i in idx], normalize_std=normalize_std)
        for i, e in zip(idx, expected):
            assert got[i].item() == pytest.approx(e, rel=1e-9, abs=1e-12)


def test_flat_form_equals_matrix_form_for_equal_groups():
    torch.manual_seed(0)
    R = torch.randn(4, 8, dtype=torch.float64)
    flat = group_advantages(R.flatten(), torch.arange(4).repeat_interleave(8))
    torch.testing.assert_close(flat.view(4, 8), grpo_advantages(R))


def test_registry_and_unknown_name():
    assert set(ADVANTAGE_ESTIMATORS) == {"grpo", "dr_grpo"}
    R = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    torch.testing.assert_close(compute_group_advantages("grpo", R), grpo_advantages(R))
    torch.testing.assert_close(compute_group_advantages("dr_grpo", R), R - 0.5)
    with pytest.raises(ValueError, match="dr_grpo") as err:
        compute_group_advantages("gpro", R)
    assert "grpo" in str(err.value)


@pytest.mark.parametrize("shape", [(1, 1), (2, 5), (4, 9)])
@pytest.mark.parametrize("seed", [0, 1])
def test_gae_gamma_lam_one_values_zero_is_reward_to_go(shape, seed):
    torch.manual_seed(seed)
    r = torch.randn(shape, dtype=torch.float64)
    v = torch.zeros(shape, dtype=torch.float64)
    mask = torch.ones(shape)
    adv, ret = gae_advantages(r, v, mask, gamma=1.0, lam=1.0)
    B, T = shape
    for b in range(B):
        for t in range(T):
            to_go = sum(r[b, k].item() for k in range(t, T))
            assert adv[b, t].item() == pytest.approx(to_go, abs=1e-12)
            assert ret[b, t].item() == pytest.approx(to_go, abs=1e-12)


def loop_gae(r, v, m, gamma, lam):
    """Per-sequence GAE that only visits valid positions (masked ones skipped)."""
    B, T = len(r), len(r[0])
    adv = [[0.0] * T for _ in range(B)]
    ret = [[0.0] * T for _ in range(B)]
    for b in range(B):
        valid = [t for t in range(T) if m[b][t] == 1]
        next_v, next_gae = 0.0, 0.0
        for t in reversed(valid):
            delta = r[b][t] + gamma * next_v - v[b][t]
            gae = delta + gamma * lam * next_gae
            adv[b][t] = gae
            ret[b][t] = gae + v[b][t]
            next_v, next_gae = v[b][t], gae
    return adv, ret


@pytest.mark.parametrize("shape", [(1, 4), (3, 7), (5, 12)])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)])
def test_gae_skipping_masked_positions_matches_loop(shape, seed, gamma, lam):
    torch.manual_seed(seed)
    r = torch.randn(shape, dtype=torch.float64)
    v = torch.randn(shape, dtype=torch.float64)
    mask = (torch.rand(shape) > 0.35).long()
    mask[0, 0] = 1
    adv, ret = gae_advantages(r, v, mask, gamma=gamma, lam=lam)
    e_adv, e_ret = loop_gae(r.tolist(), v.tolist(), mask.tolist(), gamma, lam)
    torch.testing.assert_close(adv, torch.tensor(e_adv, dtype=torch.float64))
    torch.testing.assert_close(ret, torch.tensor(e_ret, dtype=torch.float64))


def test_gae_multi_turn_example_by_hand():
    # Turn 1 tokens (valid), observation tokens (masked), turn 2 tokens (valid); reward at the end.
    r = torch.tensor([[0.0, 0.0, 5.0, 5.0, 0.0, 1.0]])  # rewards on masked tokens are ignored
    v = torch.tensor([[0.5, 0.2, 9.0, 9.0, 0.3, 0.1]])
    mask = torch.tensor([[1, 1, 0, 0, 1, 1]])
    adv, ret = gae_advantages(r, v, mask)
    # gamma = lam = 1: A_t = (sum of valid rewards from t) - V_t; masked positions -> 0.
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.8, 0.0, 0.0, 0.7, 0.9]]))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 1.0]]))


@pytest.mark.parametrize("seed", [0, 1])
def test_masked_whiten_matches_loop(seed):
    torch.manual_seed(seed)
    x = torch.randn(3, 6, dtype=torch.float64) * 3 + 2
    mask = (torch.rand(3, 6) > 0.3).long()
    mask[0, :2] = 1
    got = masked_whiten(x, mask)
    vals = [x[b, t].item() for b in range(3) for t in range(6) if mask[b, t] == 1]
    mean = sum(vals) / len(vals)
    var = sum((a - mean) ** 2 for a in vals) / (len(vals) - 1)
    for b in range(3):
        for t in range(6):
            e = (x[b, t].item() - mean) / math.sqrt(var + 1e-8) if mask[b, t] == 1 else 0.0
            assert got[b, t].item() == pytest.approx(e, abs=1e-9)
    assert torch.equal(masked_whiten(x, torch.zeros(3, 6)), torch.zeros(3, 6, dtype=torch.float64))
