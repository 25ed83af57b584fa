"""KL estimators against explicit loops, plus a Monte Carlo check that k1/k3 are unbiased."""

import math

import pytest
import torch

from agentcollapse.algorithms import KL_ESTIMATORS, kl_penalty


def loop_kl(lp, r, estimator):
    d = lp - r
    if estimator == "k1":
        return d
    if estimator == "k2":
        return d * d / 2
    if estimator in ("k3", "low_var_kl"):
        x = min(max(r - lp, -20.0), 20.0)
        return min(max(math.exp(x) - x - 1, -10.0), 10.0)
    if estimator == "abs":
        return abs(d)
    raise AssertionError(estimator)


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 2)])
@pytest.mark.parametrize("seed", [0, 1])
def test_kl_matches_loop(estimator, shape, seed):
    torch.manual_seed(seed)
    lp = -torch.rand(shape, dtype=torch.float64) * 4
    ref = -torch.rand(shape, dtype=torch.float64) * 4
    got = kl_penalty(lp, ref, estimator)
    assert got.shape == lp.shape
    for g, a, b in zip(got.flatten().tolist(), lp.flatten().tolist(), ref.flatten().tolist()):
        assert g == pytest.approx(loop_kl(a, b, estimator), rel=1e-12, abs=1e-12)


def test_names_and_alias():
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3", "low_var_kl", "abs"}
    lp, ref = torch.tensor([-1.0, -3.0]), torch.tensor([-2.0, -0.5])
    assert torch.equal(kl_penalty(lp, ref, "k3"), kl_penalty(lp, ref, "low_var_kl"))


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(ValueError, match="low_var_kl") as err:
        kl_penalty(torch.zeros(2), torch.zeros(2), "k4")
    assert "k1" in str(err.value)


def test_k3_clamped_and_nonnegative():
    lp = torch.tensor([0.0, -100.0, -1e4, -2.0])
    ref = torch.tensor([-100.0, 0.0, 0.0, -2.0])
    k3 = kl_penalty(lp, ref, "k3")
    assert torch.isfinite(k3).all()
    assert (k3 >= 0).all() and (k3 <= 10).all()
    assert k3[1].item() == 10.0 and k3[2].item() == 10.0  # exp(20) capped at 10
    assert k3[3].item() == 0.0


@pytest.mark.parametrize("seed", [0, 1])
def test_k1_and_k3_are_unbiased_on_toy_categorical(seed):
    torch.manual_seed(seed)
    V, N = 6, 200_000
    logp = torch.log_softmax(torch.randn(V, dtype=torch.float64), -1)
    logq = torch.log_softmax(torch.randn(V, dtype=torch.float64), -1)
    exact = (logp.exp() * (logp - logq)).sum().item()
    tokens = torch.multinomial(logp.exp(), N, replacement=True)
    lp, r = logp[tokens], logq[tokens]
    for est in ("k1", "k3"):
        samples = kl_penalty(lp, r, est)
        se = samples.std().item() / math.sqrt(N)
        assert abs(samples.mean().item() - exact) < 3 * se, (est, samples.mean().item(), exact)
    # k3 is the low-variance one, as its name says.
    assert kl_penalty(lp, r, "k3").var() < kl_penalty(lp, r, "k1").var()
