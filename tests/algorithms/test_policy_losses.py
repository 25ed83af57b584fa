"""GSPO, CISPO and SAPO (``algorithm.policy_loss``) against their formulas written out by hand: values,
gradients (torch.autograd), masking, the clip/gate boundaries, micro-batching, and how choosing one
sets its own defaults while the clipped loss stays the default."""

import math

import pytest
import torch

from agentcollapse.algorithms import (
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    PRESETS,
    aggregate_loss,
    cispo_policy_loss,
    gspo_policy_loss,
    micro_batch_weight,
    policy_loss,
    rl_objective,
    sapo_policy_loss,
    with_overrides,
)
from agentcollapse.algorithms.presets import algorithm_preset
from agentcollapse.config.schema import AlgorithmConfig
from agentcollapse.errors import UserError

D = torch.float64
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
ADV = torch.tensor([1.5, -0.7, 0.4], dtype=D)


def inputs(seed: int, spread: float = 0.3):
    torch.manual_seed(seed)
    old = -torch.rand(3, 4, dtype=D) * 2
    new = (old + spread * torch.randn(3, 4, dtype=D)).requires_grad_(True)
    return new, old


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# ---------------------------------------------------------------- GSPO


def gspo_by_hand(new, old, adv, mask, lo, hi):
    """Loss (seq-mean-token-mean) and d loss / d logprob, one sequence at a time."""
    L, Old, M = new.tolist(), old.tolist(), mask.tolist()
    seq_losses, grad = [], [[0.0] * len(L[0]) for _ in L]
    valid = [b for b in range(len(L)) if sum(M[b])]
    for b in valid:
        toks = [t for t in range(len(L[b])) if M[b][t]]
        s = math.exp(sum(L[b][t] - Old[b][t] for t in toks) / len(toks))
        a = float(adv[b])
        unclipped, clipped = -a * s, -a * min(max(s, 1 - lo), 1 + hi)
        seq_losses.append(max(unclipped, clipped))
        if unclipped >= clipped:  # the unclipped branch carries the gradient d s_i,t / d l_t = s_i
            for t in toks:
                grad[b][t] = -a * s / len(toks) / len(valid)
    return sum(seq_losses) / len(valid), grad


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("clip", [(3e-4, 4e-4), (0.2, 0.2), (0.05, 0.5)])
def test_gspo_matches_the_formula_in_value_and_gradient(seed, clip):
    new, old = inputs(seed)
    out = gspo_policy_loss(new, old, ADV, MASK, *clip)
    out.loss.backward()
    loss, grad = gspo_by_hand(new, old, ADV, MASK, *clip)
    assert out.loss.item() == pytest.approx(loss, rel=1e-12)
    assert torch.allclose(new.grad, torch.tensor(grad, dtype=D), rtol=1e-12, atol=1e-15)
    assert out.lower_clipfrac.item() == 0.0
    assert out.approx_kl.item() == pytest.approx(((old - new) * MASK).sum().item() / MASK.sum().item(), rel=1e-12)


def test_gspo_clips_whole_sequences_at_its_boundaries():
    old = torch.zeros(4, 2, dtype=D)
    mask = torch.ones(4, 2)
    # mean log-ratio per sequence: just inside / outside 1 + 4e-4 (A > 0), and 1 - 3e-4 (A < 0)
    shift = torch.tensor([math.log(1 + 3.9e-4), math.log(1 + 4.1e-4), math.log(1 - 2.9e-4), math.log(1 - 3.1e-4)], dtype=D)
    new = (shift[:, None] + torch.tensor([[0.01, -0.01]], dtype=D)).requires_grad_(True)  # token ratios differ, their mean does not
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=D)
    out = gspo_policy_loss(new, old, adv, mask)
    out.loss.backward()
    moving = (new.grad != 0).all(dim=-1).tolist()
    assert moving == [True, False, True, False]  # the sequences outside the band get no gradient
    assert out.clipfrac.item() == 0.5
    # a clipped sequence's loss is the bound's: -A * (1 + clip_high)
    assert gspo_policy_loss(new[1:2].detach(), old[1:2], adv[1:2], mask[1:2]).loss.item() == pytest.approx(-(1 + 4e-4))


def test_gspo_ignores_padding_even_when_it_is_garbage():
    new, old = inputs(3)
    garbage = new.detach().clone()
    garbage[MASK == 0] = 50.0  # a huge log-ratio in padding must not enter s_i
    a = gspo_policy_loss(new.detach(), old, ADV, MASK).loss
    b = gspo_policy_loss(garbage, old, ADV, MASK).loss
    assert a.item() == b.item()


def test_gspo_on_policy_is_grpo_with_sequence_means():
    new, _ = inputs(4)
    out = gspo_policy_loss(new, new.detach(), ADV, MASK)
    out.loss.backward()
    ref = new.detach().clone().requires_grad_(True)
    aggregate_loss(-ADV[:, None] * ref, MASK, "seq-mean-token-mean").backward()
    assert torch.allclose(new.grad, ref.grad, rtol=1e-12)
    assert out.clipfrac.item() == 0.0


# ---------------------------------------------------------------- CISPO


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_cispo_matches_the_formula_in_value_and_gradient(seed, mode):
    new, old = inputs(seed, spread=1.0)
    cap = 1.3
    out = cispo_policy_loss(new, old, ADV, MASK, clip_high=cap - 1, agg_mode=mode)
    out.loss.backward()
    w = torch.clamp(torch.exp(new.detach() - old), max=cap)
    per_token = -w * ADV[:, None] * new.detach()
    assert out.loss.item() == pytest.approx(aggregate_loss(per_token, MASK, mode).item(), rel=1e-12)
    # d/dl of -w A l is -w A, scaled by the aggregation's weight of that token
    probe = torch.zeros(3, 4, dtype=D, requires_grad=True)
    aggregate_loss(probe * (-w * ADV[:, None]), MASK, mode).backward()
    assert torch.allclose(new.grad, probe.grad, rtol=1e-12)
    capped = (torch.exp(new.detach() - old) > cap) & (MASK == 1)
    assert out.clipfrac.item() == pytest.approx(capped.sum().item() / MASK.sum().item())


def test_cispo_keeps_every_tokens_gradient_and_has_no_lower_bound():
    old = torch.zeros(1, 4, dtype=D)
    ratios = torch.tensor([[0.01, 0.5, 4.9, 50.0]], dtype=D)  # far below 1, inside, just under the cap 5, above it
    new = ratios.log().requires_grad_(True)
    out = cispo_policy_loss(new, old, torch.tensor([1.0], dtype=D), torch.ones(1, 4))
    out.loss.backward()
    assert torch.allclose(new.grad, -torch.tensor([[0.01, 0.5, 4.9, 5.0]], dtype=D) / 4, rtol=1e-12)
    assert out.clipfrac.item() == 0.25  # only the token above the cap


# ---------------------------------------------------------------- SAPO


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("taus", [(1.0, 1.05), (2.0, 0.5)])
def test_sapo_matches_the_formula_in_value_and_gradient(seed, taus):
    new, old = inputs(seed, spread=0.8)
    adv = torch.tensor([[1.5, -0.7, 0.0, 2.0], [-0.7, 0.3, 0.3, 0.3], [0.4, -0.4, 0.4, 1e-3]], dtype=D)  # token-level
    out = sapo_policy_loss(new, old, adv, MASK, *taus)
    out.loss.backward()
    L, Old, A, M = new.tolist(), old.tolist(), adv.tolist(), MASK.tolist()
    seq_losses, attn, grad = [], [], [[0.0] * 4 for _ in range(3)]
    for b in range(3):
        toks = [t for t in range(4) if M[b][t]]
        total = 0.0
        for t in toks:
            r = math.exp(L[b][t] - Old[b][t])
            tau = taus[0] if A[b][t] > 0 else taus[1]
            p = sigmoid(tau * (r - 1))
            total += -p * 4 / tau * A[b][t]
            grad[b][t] = -4 * p * (1 - p) * r * A[b][t] / len(toks) / 3  # f'(r) = 4 p (1 - p); dr/dl = r
            attn.append(1 - 4 * p * (1 - p))
        seq_losses.append(total / len(toks))
    assert out.loss.item() == pytest.approx(sum(seq_losses) / 3, rel=1e-12)
    assert torch.allclose(new.grad, torch.tensor(grad, dtype=D), rtol=1e-10, atol=1e-15)
    assert out.clipfrac.item() == pytest.approx(sum(attn) / len(attn), rel=1e-12)
    assert out.lower_clipfrac.item() == 0.0


def test_sapo_gate_is_open_on_policy_and_shuts_smoothly_off_policy():
    old = torch.zeros(1, 5, dtype=D)
    ratios = torch.tensor([[1.0, 1.5, 3.0, 6.0, 12.0]], dtype=D)
    new = ratios.log().requires_grad_(True)
    out = sapo_policy_loss(new, old, torch.tensor([1.0], dtype=D), torch.ones(1, 5), agg_mode="token-mean")
    out.loss.backward()
    g = (-new.grad * 5 / ratios)[0].tolist()  # the gate weight w = 4 p (1 - p)
    assert g[0] == pytest.approx(1.0)  # on-policy: PPO's gradient
    assert all(a > b for a, b in zip(g, g[1:])) and g[-1] < 1e-3  # decays, never a hard cut
    # on-policy the loss value is -2A/tau (the gate at r = 1), not PPO's -A
    on = sapo_policy_loss(old, old, torch.tensor([1.0], dtype=D), torch.ones(1, 5))
    assert on.loss.item() == pytest.approx(-2.0) and on.clipfrac.item() == 0.0
    with pytest.raises(ValueError, match="temperatures"):
        sapo_policy_loss(old, old, torch.tensor([1.0], dtype=D), torch.ones(1, 5), tau_pos=0.0)


# ---------------------------------------------------------------- all of them


@pytest.mark.parametrize("name", ["gspo", "cispo", "sapo"])
def test_token_weights_scale_each_tokens_loss(name):
    new, old = inputs(5)
    weights = torch.rand(3, 4, dtype=D) + 0.5
    algo = with_overrides(PRESETS["grpo"], policy_loss=name, loss_agg_mode="token-mean")
    compute = POLICY_LOSSES.get(name).compute
    weighted = compute(new, old, ADV, MASK, algo, "token-mean", None, weights).loss
    # the same per-token losses, read back through a unit token's weight
    parts = [
        compute(new, old, ADV, MASK, algo, "token-mean", None, torch.where(torch.arange(12).view(3, 4) == k, 1.0, 0.0).to(D)).loss
        for k in range(12)
    ]
    assert weighted.item() == pytest.approx(sum(w * p.item() for w, p in zip(weights.flatten().tolist(), parts)), rel=1e-10)


@pytest.mark.parametrize("name", ["clipped", "gspo", "cispo", "sapo"])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batches_add_up_to_the_whole_batch(name, mode):
    """The update's micro-batch weights give each loss the whole batch's value and gradient (GSPO's
    sequence ratio lives inside one sequence, so any split by sequences is exact)."""
    new, old = inputs(6, spread=0.5)
    algo = with_overrides(PRESETS["grpo"], policy_loss=name, loss_agg_mode=mode, clip_low=0.1, clip_high=0.1)
    compute = POLICY_LOSSES.get(name).compute
    whole = compute(new, old, ADV, MASK, algo, mode, 4, None).loss
    if mode == "seq-mean-token-sum-norm":  # a sum over sequences: the update averages it over them
        whole = whole / 3
    (g_whole,) = torch.autograd.grad(whole, new)
    parts = whole.new_zeros(())
    tokens, seqs = float(MASK.sum()), 3
    for idx in ([0], [1, 2]):
        m = MASK[idx]
        w = micro_batch_weight(mode, float(m.sum()), tokens, len(idx), seqs)
        parts = parts + w * compute(new[idx], old[idx], ADV[idx], m, algo, mode, 4, None).loss
    (g_parts,) = torch.autograd.grad(parts, new)
    assert parts.item() == pytest.approx(whole.item(), rel=1e-12)
    assert torch.allclose(g_parts, g_whole, rtol=1e-12, atol=1e-15)


def test_the_default_loss_is_the_clipped_one_bit_for_bit():
    new, old = inputs(7, spread=0.5)
    entropy = torch.rand(3, 4, dtype=D)
    for preset in PRESETS.values():
        assert preset.policy_loss == "clipped"
        terms = rl_objective(preset, entropy, new, old, ADV, MASK, 4, ref_logp=old)
        direct = policy_loss(
            new, old, ADV, MASK, preset.clip_low, preset.clip_high, preset.clip_ratio_c, preset.dual_clip, preset.loss_agg_mode, 4
        )
        assert torch.equal(terms.policy.loss, direct.loss) and torch.equal(terms.policy.clipfrac, direct.clipfrac)


def test_choosing_a_loss_brings_its_defaults_and_explicit_settings_win():
    gspo = algorithm_preset(AlgorithmConfig(name="dapo", policy_loss="gspo"))
    assert (gspo.clip_low, gspo.clip_high, gspo.loss_agg_mode, gspo.dual_clip) == (3e-4, 4e-4, "seq-mean-token-mean", False)
    cispo = algorithm_preset(AlgorithmConfig(policy_loss="cispo", loss_agg_mode="seq-mean-token-sum-norm"))
    assert (cispo.clip_high, cispo.loss_agg_mode, cispo.dual_clip) == (4.0, "seq-mean-token-sum-norm", False)
    sapo = algorithm_preset(AlgorithmConfig(policy_loss="sapo", sapo_tau_neg=2.0))
    assert (sapo.sapo_tau_pos, sapo.sapo_tau_neg, sapo.loss_agg_mode) == (1.0, 2.0, "seq-mean-token-mean")
    assert algorithm_preset(AlgorithmConfig(name="dapo")) == PRESETS["dapo"]  # nothing chosen, nothing changes


def test_bad_choices_are_one_line_errors():
    with pytest.raises(UserError, match="algorithm.policy_loss 'ppo2'; valid: clipped, gspo, cispo, sapo"):
        algorithm_preset(AlgorithmConfig(policy_loss="ppo2"))
    with pytest.raises(UserError, match="dual_clip applies to policy_loss=clipped only"):
        algorithm_preset(AlgorithmConfig(policy_loss="gspo", dual_clip=True))
    with pytest.raises(UserError, match="temperatures"):
        algorithm_preset(AlgorithmConfig(policy_loss="sapo", sapo_tau_pos=0.0))
