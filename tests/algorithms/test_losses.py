"""Loss aggregation, PPO policy loss, value loss and entropy against explicit loops."""

import math

import pytest
import torch

from agentcollapse.algorithms import (
    LOSS_AGG_MODES,
    aggregate_loss,
    aggregation_pair,
    entropy_from_logits,
    grpo_advantages,
    micro_batch_weight,
    policy_loss,
    value_loss,
)


def loop_agg(L, M, mode, norm_length=None):
    B, T = len(L), len(L[0])
    if mode == "token-mean":
        s = n = 0.0
        for b in range(B):
            for t in range(T):
                if M[b][t]:
                    s += L[b][t]
                    n += 1
        return s / n if n else 0.0
    if mode == "seq-mean-token-sum-norm":
        s = 0.0
        for b in range(B):
            for t in range(T):
                if M[b][t]:
                    s += L[b][t]
        return s / (T if norm_length is None else norm_length)
    per_seq = []
    for b in range(B):
        toks = [L[b][t] for t in range(T) if M[b][t]]
        if not toks:
            continue
        per_seq.append(sum(toks) / len(toks) if mode == "seq-mean-token-mean" else sum(toks))
    return sum(per_seq) / len(per_seq) if per_seq else 0.0


def random_mask(B, T):
    mask = (torch.rand(B, T) > 0.4).long()
    mask[0, 0] = 1
    if B > 1:
        mask[-1] = 0  # one fully padded sequence
    return mask


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("shape", [(1, 1), (2, 5), (4, 9)])
@pytest.mark.parametrize("seed", [0, 1])
def test_aggregate_matches_loop(mode, shape, seed):
    torch.manual_seed(seed)
    L = torch.randn(shape, dtype=torch.float64)
    M = random_mask(*shape)
    got = aggregate_loss(L, M, mode)
    assert got.dim() == 0
    assert got.item() == pytest.approx(loop_agg(L.tolist(), M.tolist(), mode), rel=1e-12)


def test_sum_norm_uses_constant_normaliser():
    L = torch.ones(3, 4)
    M = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    assert aggregate_loss(L, M, "seq-mean-token-sum-norm").item() == pytest.approx(7 / 4)
    assert aggregate_loss(L, M, "seq-mean-token-sum-norm", norm_length=7).item() == 1.0
    # token-mean and seq-mean-token-mean differ when lengths differ.
    L2 = torch.tensor([[1.0, 1.0, 0, 0], [0.0, 0.0, 0.0, 0.0], [3.0, 0, 0, 0]])
    assert aggregate_loss(L2, M, "token-mean").item() == pytest.approx(5 / 7)
    assert aggregate_loss(L2, M, "seq-mean-token-mean").item() == pytest.approx(4 / 3)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_empty_mask_gives_differentiable_zero(mode):
    L = torch.randn(3, 4, requires_grad=True)
    padded = L + torch.where(torch.arange(4) == 3, float("nan"), 0.0)  # garbage in padding
    M = torch.zeros(3, 4)
    out = aggregate_loss(padded, M, mode)
    assert out.item() == 0.0
    out.backward()
    assert torch.equal(L.grad, torch.zeros(3, 4))
    # Garbage at masked positions never leaks into a non-empty aggregate either.
    M[:, 0] = 1
    assert torch.isfinite(aggregate_loss(padded, M, mode))


def test_unknown_mode_lists_valid():
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm"):
        aggregate_loss(torch.zeros(1, 2), torch.ones(1, 2), "sum")


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("sizes", [[1, 1, 1, 1, 1], [2, 3], [4, 1], [5]])
def test_aggregation_pairs_of_micro_batches_give_the_whole_batch_loss(mode, sizes):
    # Micro-batches of different sizes and token counts: their (sum, count) pairs, summed, give the loss
    # of the whole batch aggregated in one piece, the same as the gradient's micro_batch_weight sum.
    torch.manual_seed(0)
    L = torch.randn(5, 6, dtype=torch.float64)
    M = (torch.rand(5, 6) > 0.4).long()
    M[:, 0] = 1  # every sequence has a token (the update's sequences all do)
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    parts = [(L[a : a + n], M[a : a + n]) for a, n in zip(starts, sizes)]
    total_tokens, total_seqs = float(M.sum()), len(M)
    pairs = [aggregation_pair(mode, aggregate_loss(x, m, mode, norm_length=6).item(), float(m.sum()), len(m)) for x, m in parts]
    pooled = math.fsum(s for s, _ in pairs) / math.fsum(c for _, c in pairs)
    weighted = sum(
        micro_batch_weight(mode, float(m.sum()), total_tokens, len(m), total_seqs) * aggregate_loss(x, m, mode, norm_length=6).item()
        for x, m in parts
    )
    whole = aggregate_loss(L, M, mode, norm_length=6).item()
    if mode == "seq-mean-token-sum-norm":  # a sum over sequences: the gradient averages it over them
        whole /= total_seqs
    assert pooled == pytest.approx(whole, rel=1e-12) and weighted == pytest.approx(whole, rel=1e-12)


def loop_policy(lp, old, A, M, clip_low, clip_high, c, dual, mode):
    B, T = len(lp), len(lp[0])
    L = [[0.0] * T for _ in range(B)]
    clipped_n = lower_n = kl_s = n = 0.0
    for b in range(B):
        for t in range(T):
            a = A[b][t]
            lr = min(max(lp[b][t] - old[b][t], -20.0), 20.0)
            ratio = math.exp(lr)
            pg1 = -a * ratio
            pg2 = -a * min(max(ratio, 1 - clip_low), 1 + clip_high)
            loss = max(pg1, pg2)
            lower = False
            if dual and a < 0:
                lower = loss > -a * c
                loss = min(loss, -a * c)
            L[b][t] = loss
            if M[b][t]:
                n += 1
                clipped_n += pg2 > pg1
                lower_n += lower
                kl_s += -lr
    return loop_agg(L, M, mode), clipped_n / n, kl_s / n, lower_n / n


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("adv_per_seq", [True, False])
@pytest.mark.parametrize("dual,clip_high", [(True, 0.2), (True, 0.28), (False, 0.28)])
@pytest.mark.parametrize("seed", [0, 1])
def test_policy_loss_matches_loop(mode, adv_per_seq, dual, clip_high, seed):
    torch.manual_seed(seed)
    B, T = 4, 7
    old = -torch.rand(B, T, dtype=torch.float64) * 3
    lp = old + torch.randn(B, T, dtype=torch.float64) * 0.8  # many ratios outside the clip range
    A = torch.randn(B, dtype=torch.float64) * 2 if adv_per_seq else torch.randn(B, T).double()
    A_full = A.unsqueeze(-1).expand(B, T) if adv_per_seq else A
    M = random_mask(B, T)
    out = policy_loss(lp, old, A, M, clip_high=clip_high, dual_clip=dual, agg_mode=mode)
    e_loss, e_clip, e_kl, e_lower = loop_policy(lp.tolist(), old.tolist(), A_full.tolist(), M.tolist(), 0.2, clip_high, 3.0, dual, mode)
    assert out.loss.item() == pytest.approx(e_loss, rel=1e-10, abs=1e-12)
    assert out.clipfrac.item() == pytest.approx(e_clip)
    assert out.approx_kl.item() == pytest.approx(e_kl, rel=1e-10)
    assert out.lower_clipfrac.item() == pytest.approx(e_lower)
    assert 0 < out.clipfrac.item() < 1


def _one_token(ratio, adv, **kw):
    old = torch.tensor([[-1.0]], dtype=torch.float64)
    lp = (old + math.log(ratio)).requires_grad_(True)
    out = policy_loss(lp, old, torch.tensor([adv], dtype=torch.float64), torch.ones(1, 1), **kw)
    out.loss.backward()
    return out, lp.grad.item()


def test_clip_high_with_positive_advantage():
    out, grad = _one_token(1.5, 2.0, clip_low=0.2, clip_high=0.28)
    assert out.loss.item() == pytest.approx(-2.0 * 1.28)
    assert grad == 0.0 and out.clipfrac.item() == 1.0
    out, grad = _one_token(1.1, 2.0, clip_low=0.2, clip_high=0.28)  # inside the range
    assert out.loss.item() == pytest.approx(-2.2) and grad == pytest.approx(-2.2)
    assert out.clipfrac.item() == 0.0
    out, grad = _one_token(0.5, 2.0)  # A>0, ratio below 1-clip_low: not clipped
    assert out.loss.item() == pytest.approx(-1.0) and grad != 0.0


def test_clip_low_with_negative_advantage():
    out, grad = _one_token(0.5, -1.0, clip_low=0.2)
    assert out.loss.item() == pytest.approx(0.8)
    assert grad == 0.0 and out.clipfrac.item() == 1.0
    assert out.lower_clipfrac.item() == 0.0


def test_dual_clip_caps_large_ratio_with_negative_advantage():
    out, grad = _one_token(10.0, -1.5, clip_ratio_c=3.0)
    assert out.loss.item() == pytest.approx(1.5 * 3.0)
    assert grad == 0.0 and out.lower_clipfrac.item() == 1.0
    out, _ = _one_token(10.0, -1.5, dual_clip=False)
    assert out.loss.item() == pytest.approx(15.0) and out.lower_clipfrac.item() == 0.0
    out, _ = _one_token(10.0, 1.5, clip_ratio_c=3.0)  # A>0: dual clip does not apply
    assert out.loss.item() == pytest.approx(-1.5 * 1.2)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("seed", [0, 1])
def test_all_equal_rewards_give_exactly_zero_gradient(mode, seed):
    torch.manual_seed(seed)
    returns = torch.full((2, 4), 0.7)  # two prompts, four rollouts each, all equal
    A = grpo_advantages(returns).flatten()
    old = -torch.rand(8, 5) * 3
    lp = (old + torch.randn(8, 5) * 30).requires_grad_(True)  # even with extreme ratios
    out = policy_loss(lp, old, A, torch.ones(8, 5), agg_mode=mode)
    out.loss.backward()
    assert torch.isfinite(lp.grad).all()
    assert torch.equal(lp.grad, torch.zeros(8, 5))
    assert out.loss.item() == 0.0


def test_policy_loss_empty_mask_is_zero_not_nan():
    lp = torch.randn(3, 4, requires_grad=True)
    out = policy_loss(lp, torch.randn(3, 4), torch.randn(3), torch.zeros(3, 4))
    for v in (out.loss, out.clipfrac, out.approx_kl, out.lower_clipfrac):
        assert v.item() == 0.0
    out.loss.backward()
    assert torch.equal(lp.grad, torch.zeros(3, 4))


def loop_entropy(row):
    mx = max(row)
    z = sum(math.exp(x - mx) for x in row)
    h = 0.0
    for x in row:
        p = math.exp(x - mx) / z
        if p > 0:
            h -= p * math.log(p)
    return h


@pytest.mark.parametrize("shape", [(1, 2), (3, 11), (2, 3, 50)])
@pytest.mark.parametrize("scale", [1.0, 10.0, 1e4])
@pytest.mark.parametrize("seed", [0, 1])
def test_entropy_matches_loop(shape, scale, seed):
    torch.manual_seed(seed)
    logits = torch.randn(shape, dtype=torch.float64) * scale
    got = entropy_from_logits(logits)
    assert got.shape == shape[:-1]
    rows = logits.reshape(-1, shape[-1]).tolist()
    for g, row in zip(got.flatten().tolist(), rows):
        assert g == pytest.approx(loop_entropy(row), rel=1e-9, abs=1e-12)


def test_entropy_edge_cases():
    assert entropy_from_logits(torch.zeros(7)).item() == pytest.approx(math.log(7))
    huge = torch.tensor([1e30, 0.0, -1e30], requires_grad=True)
    assert entropy_from_logits(huge).item() == 0.0
    banned = torch.tensor([1.0, float("-inf"), 1.0], requires_grad=True)
    h = entropy_from_logits(banned)
    assert h.item() == pytest.approx(math.log(2))
    h.backward()
    assert torch.isfinite(banned.grad).all()
    half = entropy_from_logits(torch.zeros(4, 16, dtype=torch.bfloat16))
    assert half.dtype == torch.bfloat16
    assert half.float().allclose(torch.full((4,), math.log(16)), atol=1e-2)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("seed", [0, 1])
def test_value_loss_matches_loop(mode, seed):
    torch.manual_seed(seed)
    B, T, cr = 3, 6, 0.2
    v, ret, old = (torch.randn(B, T, dtype=torch.float64) for _ in range(3))
    M = random_mask(B, T)
    loss, clipfrac = value_loss(v, ret, old, M, clip_range=cr, agg_mode=mode)
    L = [[0.0] * T for _ in range(B)]
    n = c = 0
    for b in range(B):
        for t in range(T):
            vc = min(max(v[b, t].item(), old[b, t].item() - cr), old[b, t].item() + cr)
            l1 = (v[b, t].item() - ret[b, t].item()) ** 2
            l2 = (vc - ret[b, t].item()) ** 2
            L[b][t] = max(l1, l2)
            if M[b, t]:
                n += 1
                c += l2 > l1
    assert loss.item() == pytest.approx(0.5 * loop_agg(L, M.tolist(), mode), rel=1e-12)
    assert clipfrac.item() == pytest.approx(c / n)
