"""GSPO, CISPO and SAPO against the peer trainers' arithmetic: verl's ``core_algos``
(``compute_policy_loss_gspo`` / ``_sapo`` / ``_cispo`` with its ``agg_loss``) and TRL's
``GRPOTrainer._compute_loss`` (``loss_type="cispo"`` / ``"sapo"``, and GSPO as
``importance_sampling_level="sequence"`` with ``loss_type="grpo"``), each written out below as those
functions compute it (read from verl b178a3c, January 2026, and TRL f2cd577, July 2026): values,
gradients and the logged clip fraction on the same small tensors. Where ours departs on purpose
(docs/parity.md) the test shows the difference is the stated one and no other. The formulas
themselves, by hand: tests/algorithms/test_policy_losses.py."""

from __future__ import annotations

import pytest
import torch

from agentcollapse.algorithms import cispo_policy_loss, gspo_policy_loss, sapo_policy_loss

D = torch.float64
MASK = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
SEQ_ADV = torch.tensor([1.5, -0.7, 0.4, -1.1], dtype=D)


def logprobs(seed: int, spread: float, capped: bool = False):
    """(new, old) token log-probs [4, 5]; ``capped``: one token's ratio e^2 > CISPO's cap of 5."""
    torch.manual_seed(seed)
    old = -torch.rand(4, 5, dtype=D) * 3
    new = old + spread * torch.randn(4, 5, dtype=D)
    if capped:
        new[2, 1] = old[2, 1] + 2.0
    return new, old


def grad_of(loss_fn, new):
    """(loss, d loss / d new) of ``loss_fn(new)`` on a fresh leaf."""
    leaf = new.detach().clone().requires_grad_(True)
    out = loss_fn(leaf)
    loss = out if isinstance(out, torch.Tensor) else out[0] if isinstance(out, tuple) else out.loss
    (g,) = torch.autograd.grad(loss, leaf)
    return out, loss.detach(), g


# ---------------------------------------------------------------- verl, core_algos


def verl_agg(loss_mat, mask, mode):
    """verl's agg_loss on one process (dp_size 1, no global batch info)."""
    m = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        return (loss_mat * m).sum() / m.sum()
    if mode == "seq-mean-token-mean":
        count = m.sum(-1)
        per_seq = (loss_mat * m).sum(-1) / (count + 1e-8)  # verl's epsilon, not a clamp
        has = (count > 0).to(loss_mat.dtype)
        return (per_seq * has).sum() / has.sum()
    raise AssertionError(mode)


def verl_gspo(old, new, adv, mask, clip_low, clip_high, weights=None):
    m = mask.to(new.dtype)
    log_ratio = new - old
    seq = (log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1)
    log_s = torch.clamp(new - new.detach() + seq.detach()[:, None], max=10.0)
    s = log_s.exp()
    a = adv[:, None] if adv.dim() == 1 else adv
    pg1, pg2 = -a * s, -a * torch.clamp(s, 1 - clip_low, 1 + clip_high)
    losses = torch.maximum(pg1, pg2)
    if weights is not None:
        losses = losses * weights
    loss = verl_agg(losses, mask, "seq-mean-token-mean")  # forced, whatever loss_agg_mode says
    clipfrac = ((pg2 > pg1).to(new.dtype) * m).sum() / m.sum()
    ppo_kl = (-log_ratio * m).sum() / m.sum()  # unclamped
    return loss, clipfrac, ppo_kl


def verl_sapo(old, new, adv, mask, tau_pos, tau_neg, weights=None):
    log_ratio = torch.clamp(new - old, -20.0, 20.0)
    r = log_ratio.exp()
    a = (adv[:, None] if adv.dim() == 1 else adv).expand_as(r)
    tau = torch.where(a > 0, torch.tensor(tau_pos, dtype=D), torch.tensor(tau_neg, dtype=D))
    losses = -torch.sigmoid(tau * (r - 1.0)) * (4.0 / tau) * a
    if weights is not None:
        losses = losses * weights
    return verl_agg(losses, mask, "seq-mean-token-mean"), torch.tensor(0.0)  # verl logs clipfrac 0


def verl_cispo(old, new, adv, mask, clip_low, clip_high, mode, weights=None):
    m = mask.to(new.dtype)
    r = torch.clamp(new - old, -20.0, 20.0).exp()
    clipped = torch.clamp(r, 1 - clip_low, 1 + clip_high)
    a = adv[:, None] if adv.dim() == 1 else adv
    losses = -clipped.detach() * a * new
    if weights is not None:
        losses = losses * weights
    clipfrac = ((r != clipped).to(new.dtype) * m).sum() / m.sum()
    return verl_agg(losses, mask, mode), clipfrac


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("clip", [(3e-4, 4e-4), (0.2, 0.28)])
@pytest.mark.parametrize("weighted", [False, True])
def test_gspo_is_verls_compute_policy_loss_gspo(seed, clip, weighted):
    new, old = logprobs(seed, spread=0.05 if clip[0] < 0.01 else 0.4)
    weights = torch.rand(4, 5, dtype=D) + 0.5 if weighted else None
    ours, loss, grad = grad_of(lambda x: gspo_policy_loss(x, old, SEQ_ADV, MASK, *clip, token_weights=weights), new)
    peer, peer_loss, peer_grad = grad_of(lambda x: verl_gspo(old, x, SEQ_ADV, MASK, *clip, weights), new)
    # verl's per-sequence token mean divides by count + 1e-8: ~1e-9 relative at these lengths
    assert loss.item() == pytest.approx(peer_loss.item(), rel=1e-7, abs=1e-8)
    torch.testing.assert_close(grad, peer_grad, rtol=1e-8, atol=1e-14)
    assert ours.clipfrac.item() == pytest.approx(peer[1].item(), rel=1e-12)
    assert ours.approx_kl.item() == pytest.approx(peer[2].item(), rel=1e-12)  # equal while |l - l_old| < 20
    assert 0 < ours.clipfrac.item() < 1 or clip[0] > 0.01  # GSPO's small range clips some sequences here


def test_gspo_log_ratio_clamp_and_approx_kl_differ_from_verl_only_past_20():
    new, old = logprobs(3, spread=0.1)
    new = new.clone()
    new[0, 0] = old[0, 0] + 45.0  # one token far off: verl's ppo_kl takes it whole, ours clamps at 20
    ours = gspo_policy_loss(new, old, SEQ_ADV, MASK)
    _, _, verl_kl = verl_gspo(old, new, SEQ_ADV, MASK, 3e-4, 4e-4)
    shift = (45.0 - 20.0) / MASK.sum().item()
    assert ours.approx_kl.item() == pytest.approx(verl_kl.item() + shift, rel=1e-12)
    assert ours.loss.item() == pytest.approx(verl_gspo(old, new, SEQ_ADV, MASK, 3e-4, 4e-4)[0].item(), rel=1e-7, abs=1e-8)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("taus", [(1.0, 1.05), (2.0, 0.5)])
@pytest.mark.parametrize("token_adv", [False, True])
def test_sapo_is_verls_compute_policy_loss_sapo(seed, taus, token_adv):
    new, old = logprobs(seed, spread=0.8)
    adv = torch.randn(4, 5, dtype=D) if token_adv else SEQ_ADV
    weights = torch.rand(4, 5, dtype=D) + 0.5
    ours, loss, grad = grad_of(lambda x: sapo_policy_loss(x, old, adv, MASK, *taus, token_weights=weights), new)
    _, peer_loss, peer_grad = grad_of(lambda x: verl_sapo(old, x, adv, MASK, *taus, weights), new)
    assert loss.item() == pytest.approx(peer_loss.item(), rel=1e-7, abs=1e-8)
    torch.testing.assert_close(grad, peer_grad, rtol=1e-8, atol=1e-14)
    assert ours.clipfrac.item() > 0  # the documented difference: ours logs the gate's attenuation, verl 0


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_cispo_is_verls_compute_policy_loss_cispo_without_its_lower_bound(seed, mode):
    new, old = logprobs(seed, spread=1.2, capped=True)
    weights = torch.rand(4, 5, dtype=D) + 0.5
    ours, loss, grad = grad_of(lambda x: cispo_policy_loss(x, old, SEQ_ADV, MASK, 4.0, mode, token_weights=weights), new)
    # verl's clip_ratio_low = 1 puts its lower bound at 0, which no ratio reaches: the paper's and TRL's CISPO
    peer, peer_loss, peer_grad = grad_of(lambda x: verl_cispo(old, x, SEQ_ADV, MASK, 1.0, 4.0, mode, weights), new)
    assert loss.item() == pytest.approx(peer_loss.item(), rel=1e-7, abs=1e-8)
    torch.testing.assert_close(grad, peer_grad, rtol=1e-8, atol=1e-14)
    assert ours.clipfrac.item() == pytest.approx(peer[1].item(), rel=1e-12) and ours.clipfrac.item() > 0


def test_cispo_differs_from_verls_default_range_only_where_its_lower_bound_acts():
    """verl's default CISPO range is PPO's (0.8, 1.2); ours caps at 5 and has no lower bound. With
    ratios inside [0.8, 1.2] the two agree exactly; a token below 0.8 is weighted by its own ratio
    here and by 0.8 there."""
    old = torch.zeros(1, 4, dtype=D)
    inside = torch.tensor([[0.85, 1.0, 1.1, 1.19]], dtype=D).log()
    adv, mask = torch.tensor([1.0], dtype=D), torch.ones(1, 4)
    _, a, ga = grad_of(lambda x: cispo_policy_loss(x, old, adv, mask, clip_high=0.2), inside)
    _, b, gb = grad_of(lambda x: verl_cispo(old, x, adv, mask, 0.2, 0.2, "token-mean"), inside)
    assert a.item() == pytest.approx(b.item(), rel=1e-12) and torch.allclose(ga, gb, rtol=1e-12)
    below = torch.tensor([[0.5, 1.0, 1.1, 1.19]], dtype=D).log()
    _, _, ga = grad_of(lambda x: cispo_policy_loss(x, old, adv, mask, clip_high=0.2), below)
    _, _, gb = grad_of(lambda x: verl_cispo(old, x, adv, mask, 0.2, 0.2, "token-mean"), below)
    assert torch.allclose(ga[:, 1:], gb[:, 1:], rtol=1e-12)
    assert ga[0, 0].item() == pytest.approx(-0.5 / 4) and gb[0, 0].item() == pytest.approx(-0.8 / 4)


# ---------------------------------------------------------------- TRL, GRPOTrainer._compute_loss


def trl_loss(new, old, adv, mask, loss_type, level="token", eps_low=0.2, eps_high=0.2, taus=(1.0, 1.05)):
    """TRL's per-token loss and its aggregation for ``loss_type`` (one process, no KL, no vLLM)."""
    m = mask.to(new.dtype)
    a = adv[:, None] if adv.dim() == 1 else adv
    log_w = new - old
    if level == "sequence":
        log_w = ((log_w * m).sum(-1) / m.sum(-1).clamp(min=1.0))[:, None]
    coef_1 = log_w.exp()
    if loss_type == "cispo":
        per_token = -torch.clamp(coef_1, max=eps_high).detach() * a * new  # epsilon_high is the cap itself
    elif loss_type == "grpo":
        coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
        per_token = -torch.min(coef_1 * a, coef_2 * a)
    elif loss_type == "sapo":
        t = torch.where(a > 0, torch.tensor(taus[0], dtype=D), torch.tensor(taus[1], dtype=D))
        per_token = -torch.sigmoid(t * (coef_1 - 1)) * 4 / t * a
    per_token = per_token.expand_as(new)
    if loss_type in ("grpo", "sapo"):  # the mean over sequences of each one's token mean
        return ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    return (per_token * m).sum() / m.sum()  # cispo: over the batch's tokens (num_items_in_batch)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("clip", [(3e-4, 4e-4), (0.2, 0.2)])
def test_gspo_is_trls_sequence_level_importance_sampling(seed, clip):
    """TRL's GSPO (``importance_sampling_level="sequence"``, ``loss_type="grpo"``) lets the gradient
    through exp(mean log-ratio) itself; verl's GSPO-token form (ours) through sg[s_i] * exp(l - sg[l]).
    With one advantage per sequence the two are the same loss and the same gradient, s_i * A / |y_i|
    per token (GSPO paper section 4.3)."""
    new, old = logprobs(seed, spread=0.05 if clip[0] < 0.01 else 0.4)
    _, loss, grad = grad_of(lambda x: gspo_policy_loss(x, old, SEQ_ADV, MASK, *clip), new)
    _, peer_loss, peer_grad = grad_of(lambda x: trl_loss(x, old, SEQ_ADV, MASK, "grpo", "sequence", *clip), new)
    assert loss.item() == pytest.approx(peer_loss.item(), rel=1e-12)
    torch.testing.assert_close(grad, peer_grad, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("seed", [0, 1])
def test_cispo_is_trls_loss_type_cispo_with_cap_one_plus_clip_high(seed):
    new, old = logprobs(seed, spread=1.2, capped=True)
    ours, loss, grad = grad_of(lambda x: cispo_policy_loss(x, old, SEQ_ADV, MASK), new)  # clip_high 4.0
    _, peer_loss, peer_grad = grad_of(lambda x: trl_loss(x, old, SEQ_ADV, MASK, "cispo", eps_high=5.0), new)
    assert loss.item() == pytest.approx(peer_loss.item(), rel=1e-12)
    torch.testing.assert_close(grad, peer_grad, rtol=1e-12, atol=1e-15)
    assert ours.clipfrac.item() > 0  # some tokens reach the cap at this spread


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("taus", [(1.0, 1.05), (0.7, 2.0)])
def test_sapo_is_trls_loss_type_sapo(seed, taus):
    new, old = logprobs(seed, spread=0.8)
    _, loss, grad = grad_of(lambda x: sapo_policy_loss(x, old, SEQ_ADV, MASK, *taus), new)
    _, peer_loss, peer_grad = grad_of(lambda x: trl_loss(x, old, SEQ_ADV, MASK, "sapo", taus=taus), new)
    assert loss.item() == pytest.approx(peer_loss.item(), rel=1e-12)
    torch.testing.assert_close(grad, peer_grad, rtol=1e-12, atol=1e-15)
