import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from agentcollapse.analysis.stats import EXACT_SPEARMAN_MAX_N, spearman, spearman_exact_p, spearman_min_p


def test_exact_spearman_p_of_a_perfect_rank_correlation_at_n4_is_2_of_24():
    # only the identity and the reversal reach |rho| = 1 among the 4! pairings
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == (pytest.approx(1.0), pytest.approx(2 / 24))
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == (pytest.approx(-1.0), pytest.approx(2 / 24))
    assert sps.spearmanr([1, 2, 3, 4], [10, 20, 30, 40]).pvalue < 1e-6  # the t approximation the tables printed as 0.000


def test_exact_spearman_p_matches_hand_counts():
    # n = 4, one adjacent swap: sum d^2 = 2, rho = 1 - 6 * 2 / (4 * 15) = 0.8. Over the 24 pairings sum d^2
    # takes 0 (1 pairing), 2 (3), 18 (3), 20 (1) at |rho| >= 0.8: p = 8 / 24.
    rho, p = spearman([1, 2, 3, 4], [1, 2, 4, 3])
    assert rho == pytest.approx(0.8) and p == pytest.approx(8 / 24)
    # a tie: y ranks (1.5, 1.5, 3, 4) against x = 1..4, rho = 4.5 / sqrt(5 * 4.5) = 0.9487. The 12 distinct
    # arrangements put 3 at x_a and 4 at x_b: S = 15 + 1.5 x_a + 2.5 x_b against E[S] = 25, observed 29.5;
    # |S - 25| >= 4.5 only for (x_a, x_b) = (3, 4) and (2, 1): p = 2 / 12.
    rho, p = spearman([1, 2, 3, 4], [1, 1, 2, 3])
    assert rho == pytest.approx(4.5 / math.sqrt(22.5)) and p == pytest.approx(1 / 6)
    # n = 5, perfect order: 2 / 5!
    assert spearman(range(5), [0.3, 0.5, 0.9, 1.2, 7.0])[1] == pytest.approx(2 / 120)


def _rank_pearson(a, b, axis=-1):
    ra, rb = sps.rankdata(a, axis=axis), sps.rankdata(b, axis=axis)
    ra = ra - ra.mean(axis=axis, keepdims=True)
    rb = rb - rb.mean(axis=axis, keepdims=True)
    return (ra * rb).sum(axis=axis) / np.sqrt((ra * ra).sum(axis=axis) * (rb * rb).sum(axis=axis))


@pytest.mark.parametrize("n", [5, 6, 7])
def test_exact_spearman_p_is_the_share_of_all_pairings_at_least_as_extreme_with_ties(n):
    # brute force in floats: every one of the n! pairings, rank correlation recomputed
    pairings = np.array(list(itertools.permutations(range(n))))
    rng = np.random.default_rng(n)
    for _ in range(3):
        x = rng.integers(0, 3, n).astype(float)  # ties on one side ...
        x[:2] = [0.0, 2.0]  # ... never constant
        y = np.round(rng.normal(size=n), 0)  # and, likely, on the other
        y[:2] = [-3.0, 3.0]
        rho = _rank_pearson(x, y)
        rhos = _rank_pearson(np.broadcast_to(x, (len(pairings), n)), y[pairings])
        assert spearman(x, y) == (pytest.approx(rho), pytest.approx(np.mean(np.abs(rhos) >= abs(rho) - 1e-9)))


def test_spearman_p_is_the_t_approximation_above_the_exact_limit_and_nan_when_undefined():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=EXACT_SPEARMAN_MAX_N + 2), rng.normal(size=EXACT_SPEARMAN_MAX_N + 2)
    assert spearman(x, y)[1] == pytest.approx(sps.spearmanr(x, y).pvalue)
    assert all(math.isnan(v) for v in (*spearman([1, 2], [1, 2]), *spearman([1, 2, 3], [5, 5, 5]), spearman_exact_p([1, 1, 1], [1, 2, 3])))


def test_smallest_exact_spearman_p():
    assert spearman_min_p(4) == pytest.approx(1 / 12) and spearman_min_p(5) == pytest.approx(1 / 60)
    assert spearman_min_p(3) == pytest.approx(1 / 3) and spearman_min_p(2) == 1.0
