import math
import random

import pytest
import torch

from agentcollapse.diagnostics import PROXY_KEYS, column_equivalence, proxy_metrics, zscore_with_sigma


def _lse(xs):
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def _reference(L, zlen, row_col, equiv):
    """Plain-Python loop over docs/method.md section 3 (no ties in random float matrices)."""
    R, C = len(L), len(L[0])
    mt, mg, ms, gs, acc = [], [], [], [], {1: [], 2: [], 4: [], 8: []}
    chance = []
    chance_k = {2: [], 4: [], 8: []}
    for r in range(R):
        own = row_col[r]
        tok = [x / zlen[r] for x in L[r]]
        mt.append(tok[own])
        mg.append(_lse(tok) - math.log(C))
        ms.append(L[r][own])
        gs.append(_lse(L[r]) - math.log(C))
        order = sorted(range(C), key=lambda j: -L[r][j])
        for k in acc:
            acc[k].append(float(any(equiv[j] == equiv[own] for j in order[:k])))
        m = sum(equiv[j] == equiv[own] for j in range(C))
        chance.append(m / C)
        for k in chance_k:
            # P(an own-class column among k of C drawn at random), by counting k-subsets
            chance_k[k].append(1.0 if k >= C else 1.0 - math.comb(C - m, k) / math.comb(C, k))

    def mean(xs):
        return sum(xs) / len(xs)

    def pstd(xs):
        m = mean(xs)
        return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))

    st, ss = pstd(mg), pstd(gs)
    return {
        "mi_estimate": mean([a - b for a, b in zip(mt, mg)]),
        "mi_seq_estimate": mean([a - b for a, b in zip(ms, gs)]),
        "mi_upper_bound": math.log(C),
        "matched_log_prob_mean": mean(mt),
        "marginal_log_prob_mean": mean(mg),
        "conditional_entropy_est": -mean(mt),
        "reasoning_entropy_est": -mean(mg),
        "conditional_entropy_seq_est": -mean(ms),
        "reasoning_entropy_seq_est": -mean(gs),
        "retrieval_accuracy": mean(acc[1]),
        "retrieval_accuracy@2": mean(acc[2]),
        "retrieval_accuracy@4": mean(acc[4]),
        "retrieval_accuracy@8": mean(acc[8]),
        "retrieval_chance_level": mean(chance),
        "retrieval_above_chance": mean(acc[1]) - mean(chance),
        **{f"retrieval_chance_level@{k}": mean(chance_k[k]) for k in chance_k},
        **{f"retrieval_above_chance@{k}": mean(acc[k]) - mean(chance_k[k]) for k in chance_k},
        "marginal_std": st,
        "mi_zscore": mean([(a - b) / (st + 1e-3) for a, b in zip(mt, mg)]),
        "mi_zscore_seq": mean([(a - b) / (ss + 1e-3) for a, b in zip(ms, gs)]),
        "marginal_std_seq": ss,
        "num_traces": R,
        "num_contexts": C,
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("with_equiv", [False, True])
def test_matches_python_loop(seed, with_equiv):
    rnd = random.Random(seed)
    R, C = rnd.randint(5, 30), rnd.randint(2, 12)
    L = [[rnd.uniform(-60, -5) for _ in range(C)] for _ in range(R)]
    # make own columns somewhat better so retrieval is non-trivial
    row_col = [rnd.randrange(C) for _ in range(R)]
    for r in range(R):
        L[r][row_col[r]] += rnd.uniform(0, 15)
    zlen = [rnd.randint(1, 40) for _ in range(R)]
    equiv = [rnd.randrange(max(1, C // 2)) for _ in range(C)] if with_equiv else list(range(C))
    got = proxy_metrics(
        torch.tensor(L),
        torch.tensor(zlen),
        torch.tensor(row_col),
        torch.tensor(equiv) if with_equiv else None,
    )
    ref = _reference(L, zlen, row_col, equiv)
    assert tuple(got) == PROXY_KEYS
    assert set(got) == set(ref)
    for k in ref:
        assert got[k] == pytest.approx(ref[k], rel=1e-5, abs=1e-5), k


def test_diagonal_dominant_retrieves_everything():
    C, G = 6, 3
    L = torch.full((C * G, C), -50.0)
    row_col = torch.arange(C).repeat_interleave(G)
    L[torch.arange(C * G), row_col] = -10.0
    m = proxy_metrics(L, torch.full((C * G,), 10), row_col)
    assert m["retrieval_accuracy"] == 1.0
    assert m["retrieval_chance_level"] == pytest.approx(1 / C)
    assert m["retrieval_above_chance"] == pytest.approx(1 - 1 / C)
    assert m["mi_seq_estimate"] == pytest.approx(math.log(C), abs=1e-6)  # close to the bound
    assert 0 < m["mi_estimate"] <= m["mi_upper_bound"]


def test_constant_columns_give_chance_and_zero_mi():
    R, C = 20, 5
    rows = torch.linspace(-40, -5, R).unsqueeze(1).expand(R, C).contiguous()
    row_col = torch.arange(R) % C
    m = proxy_metrics(rows, torch.arange(1, R + 1), row_col)
    assert m["retrieval_accuracy"] == pytest.approx(m["retrieval_chance_level"]) == pytest.approx(1 / C)
    assert m["retrieval_above_chance"] == pytest.approx(0.0, abs=1e-12)
    # top-k under random tie-breaking: k / C
    assert m["retrieval_accuracy@2"] == pytest.approx(2 / C)
    assert m["retrieval_accuracy@4"] == pytest.approx(4 / C)
    assert m["retrieval_accuracy@8"] == 1.0
    assert m["mi_estimate"] == pytest.approx(0.0, abs=1e-9)
    assert m["mi_seq_estimate"] == pytest.approx(0.0, abs=1e-9)
    assert m["mi_zscore"] == pytest.approx(0.0, abs=1e-6)


def test_ties_fractional_credit():
    L = torch.tensor([[-5.0, -5.0, -9.0], [-5.0, -5.0, -9.0], [-9.0, -5.0, -5.0]])
    m = proxy_metrics(L, torch.ones(3), torch.tensor([0, 2, 1]))
    # row0: own col 0 tied with col 1 -> 1/2; row1: own col 2 below the max -> 0; row2: 1/2
    assert m["retrieval_accuracy"] == pytest.approx(1 / 3)
    # @2: row0 and row2 -> 1, row1 -> 0 (2 columns strictly above)
    assert m["retrieval_accuracy@2"] == pytest.approx(2 / 3)


def test_equivalent_columns():
    contexts = [[1, 2], [3], [1, 2], [4, 5]]
    eq = column_equivalence(contexts)
    assert eq.tolist() == [0, 1, 0, 2]
    # row 0 belongs to column 0 but scores best under the identical column 2 -> retrieved
    L = torch.tensor([[-10.0, -30.0, -9.0, -30.0], [-30.0, -8.0, -30.0, -30.0]])
    row_col = torch.tensor([0, 1])
    m = proxy_metrics(L, torch.ones(2), row_col, eq)
    assert m["retrieval_accuracy"] == 1.0
    assert m["retrieval_chance_level"] == pytest.approx((2 / 4 + 1 / 4) / 2)
    m_plain = proxy_metrics(L, torch.ones(2), row_col)
    assert m_plain["retrieval_accuracy"] == 0.5
    assert m_plain["retrieval_chance_level"] == pytest.approx(1 / 4)
    # a fully constant matrix with equivalent columns scores exactly the per-row chance
    m_const = proxy_metrics(torch.zeros(2, 4), torch.ones(2), row_col, eq)
    assert m_const["retrieval_accuracy"] == pytest.approx(m_const["retrieval_chance_level"])


def test_empty_rows_give_nan():
    m = proxy_metrics(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert set(m) == set(PROXY_KEYS)
    assert math.isnan(m["mi_estimate"]) and math.isnan(m["retrieval_accuracy"]) and math.isnan(m["mi_zscore"])
    assert m["num_traces"] == 0 and m["num_contexts"] == 4
    assert m["mi_upper_bound"] == pytest.approx(math.log(4))


def test_invalid_inputs():
    with pytest.raises(ValueError):
        proxy_metrics(torch.zeros(2, 3), torch.tensor([1, 0]), torch.tensor([0, 1]))  # |Z| = 0
    with pytest.raises(ValueError):
        proxy_metrics(torch.zeros(2, 3), torch.tensor([1, 1]), torch.tensor([0, 3]))  # bad column


def test_zscore_with_sigma_matches_metrics():
    rnd = torch.Generator().manual_seed(0)
    L = -torch.rand(10, 4, generator=rnd) * 30
    z = torch.randint(1, 20, (10,), generator=rnd)
    rc = torch.arange(10) % 4
    m = proxy_metrics(L, z, rc)
    assert zscore_with_sigma(L, z, rc, m["marginal_std"]) == pytest.approx(m["mi_zscore"])
    assert zscore_with_sigma(L, z, rc, m["marginal_std_seq"], per_token=False) == pytest.approx(m["mi_zscore_seq"])


def test_chance_at_k_distinct_columns_is_k_over_c():
    # the authors' chance_k = min(k, C) / C when every column is its own prompt
    R, C = 6, 5
    L = -torch.rand(R, C, generator=torch.Generator().manual_seed(3)) * 20
    m = proxy_metrics(L, torch.ones(R), torch.arange(R) % C)
    assert m["retrieval_chance_level@2"] == pytest.approx(2 / 5)
    assert m["retrieval_chance_level@4"] == pytest.approx(4 / 5)
    assert m["retrieval_chance_level@8"] == 1.0
    for k in (2, 4, 8):
        assert m[f"retrieval_above_chance@{k}"] == pytest.approx(m[f"retrieval_accuracy@{k}"] - m[f"retrieval_chance_level@{k}"])


def test_chance_at_k_with_equivalent_columns_is_exact():
    # one row, 4 columns, 2 of them its own prompt: P(own among 2 random) = 1 - C(2,2)/C(4,2) = 5/6
    # (the authors' min(1, k * 2/4) says 1.0); a constant row scores exactly that chance
    eq = torch.tensor([0, 1, 0, 2])
    m = proxy_metrics(torch.zeros(1, 4), torch.ones(1), torch.tensor([0]), eq)
    assert m["retrieval_chance_level@2"] == pytest.approx(5 / 6)
    assert m["retrieval_accuracy@2"] == pytest.approx(5 / 6)
    assert m["retrieval_above_chance@2"] == pytest.approx(0.0, abs=1e-12)
    assert m["retrieval_chance_level@4"] == 1.0


def test_sequence_entropy_estimates():
    L = torch.tensor([[-4.0, -6.0], [-8.0, -2.0]])
    m = proxy_metrics(L, torch.tensor([2, 4]), torch.tensor([0, 1]))
    assert m["conditional_entropy_seq_est"] == pytest.approx(3.0)  # -mean(-4, -2)
    marg = [math.log((math.exp(-4) + math.exp(-6)) / 2), math.log((math.exp(-8) + math.exp(-2)) / 2)]
    assert m["reasoning_entropy_seq_est"] == pytest.approx(-sum(marg) / 2)
