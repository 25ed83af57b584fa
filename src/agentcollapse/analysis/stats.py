"""Small statistics shared by benchmarks and analysis (numpy/scipy only)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

__all__ = [
    "EXACT_SPEARMAN_MAX_N",
    "binomial_se",
    "bootstrap_spearman_ci",
    "mantel_haenszel_p",
    "mean_ci",
    "spearman",
    "spearman_exact_p",
    "spearman_min_p",
    "welch_diff_ci",
    "wilson_interval",
]

# Spearman p-values are exact (every one of the n! pairings enumerated) up to this many pairs: 10! is
# 3.6M pairings, about a second once per tie pattern; above it scipy's t approximation is close enough.
EXACT_SPEARMAN_MAX_N = 10


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n (95% for z = 1.96)."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def binomial_se(p: float, n: float) -> float:
    """Standard error of a success rate ``p`` measured on ``n`` episodes, with the plus-four estimate
    ``(k + 2) / (n + 4)`` so that 0/n and n/n still carry their real uncertainty (not 0)."""
    if not (n > 0) or not math.isfinite(p):
        return math.nan
    q = (p * n + 2) / (n + 4)
    return math.sqrt(q * (1 - q) / n)


def spearman(x: Sequence[float], y: Sequence[float], *, exact_max_n: int = EXACT_SPEARMAN_MAX_N) -> tuple[float, float]:
    """Spearman's rho of two equally long samples and its two-sided p-value (both NaN when fewer than 3
    or either is constant). rho is ``scipy.stats.spearmanr``'s (Pearson's r of the average ranks). p is
    exact up to ``exact_max_n`` pairs (:func:`spearman_exact_p`); above that it is ``spearmanr``'s
    t approximation, which at small n is far off (p = 0 for rho = 1 at n = 4, where the exact p is 1/12)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    res = sps.spearmanr(x, y)
    p = spearman_exact_p(x, y) if len(x) <= exact_max_n else float(res.pvalue)
    return float(res.statistic), p


def spearman_exact_p(x: Sequence[float], y: Sequence[float]) -> float:
    """Exact two-sided permutation p-value of Spearman's rho: the share of the n! pairings of y's ranks
    with x's whose |rho| is at least the observed one. Ties get average ranks and stay tied under every
    pairing (the test conditional on the observed ranks). Computed in integers (ranks doubled: average
    ranks are multiples of 1/2), so no rounding decides a boundary case. The smallest it can be is
    :func:`spearman_min_p`. NaN for fewer than 3 pairs or a constant sample."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    n = len(x)
    if n < 3 or len(y) != n or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    a = np.rint(2 * sps.rankdata(x)).astype(np.int64)
    b = np.rint(2 * sps.rankdata(y)).astype(np.int64)
    values, at_least = _spearman_null(tuple(sorted(a.tolist())), tuple(sorted(b.tolist())))
    observed = abs(n * int(a @ b) - int(a.sum()) * int(b.sum()))
    return float(at_least[np.searchsorted(values, observed, side="left")] / math.factorial(n))


def spearman_min_p(n: int) -> float:
    """The smallest two-sided p an exact Spearman test of n pairs can give: 2 / n! (rho = +-1, no
    ties; ties only raise it). 1/12 at n = 4, 1/60 at n = 5: below 5 pairs nothing reaches 0.05."""
    return min(1.0, 2 / math.factorial(n)) if n >= 1 else math.nan


@functools.lru_cache(maxsize=128)
def _spearman_null(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Null distribution of |n S - sum(a) sum(b)|, S = sum_i a_i b_perm(i), over every permutation: its
    distinct values (ascending, with one sentinel above the largest) and how many pairings reach at
    least each (0 at the sentinel). Depends only on the two rank multisets, hence cached on them."""
    a_arr, b_arr = np.asarray(a, np.int64), np.asarray(b, np.int64)
    n = len(a_arr)
    perms = _permutations(n)
    stat = np.empty(len(perms), np.int64)
    chunk = 1 << 18
    for start in range(0, len(perms), chunk):
        stat[start : start + chunk] = b_arr[perms[start : start + chunk]] @ a_arr
    dev = np.abs(n * stat - int(a_arr.sum()) * int(b_arr.sum()))
    values, counts = np.unique(dev, return_counts=True)
    at_least = np.concatenate([np.cumsum(counts[::-1])[::-1], [0]])
    return np.concatenate([values, [values[-1] + 1]]), at_least


@functools.lru_cache(maxsize=2)
def _permutations(n: int) -> np.ndarray:
    """Every permutation of range(n), one a row (n! x n, int8: 36 MB at n = 10)."""
    perms = np.zeros((1, 0), np.int8)
    for k in range(n):  # insert k at every position of every permutation of range(k)
        perms = np.concatenate(
            [np.concatenate([perms[:, :pos], np.full((len(perms), 1), k, np.int8), perms[:, pos:]], axis=1) for pos in range(k + 1)]
        )
    return perms


def _rowwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    den = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (a * b).sum(axis=1) / den, np.nan)


def bootstrap_spearman_ci(
    x: Sequence[float], y: Sequence[float], *, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of Spearman's rho, resampling the (x, y) pairs (the runs) with
    replacement; resamples where x or y is constant (rho undefined) are left out. The interval is
    widened to contain the point estimate in the rare case the percentiles miss it. Reproducible: one
    ``numpy.random.default_rng(seed)`` draws every resample."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    rho = float(sps.spearmanr(x, y).statistic)
    if not math.isfinite(rho):
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n_boot, len(x)))
    rx = sps.rankdata(x[idx], axis=1)
    ry = sps.rankdata(y[idx], axis=1)
    boot = _rowwise_pearson(rx, ry)
    boot = boot[np.isfinite(boot)]
    if len(boot) < max(10, n_boot // 20):
        return math.nan, math.nan
    alpha = (1 - level) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    return float(min(lo, rho)), float(max(hi, rho))


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float, int]:
    """Mean, Student-t interval (over seeds) and n of the finite values; the interval is NaN for n < 2."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    n = len(v)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    m = float(v.mean())
    if n < 2:
        return m, math.nan, math.nan, 1
    half = float(sps.t.ppf(0.5 + level / 2, n - 1) * v.std(ddof=1) / math.sqrt(n))
    return m, m - half, m + half, n


def welch_diff_ci(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """mean(a) - mean(b) with a Welch interval; NaN interval when either side has fewer than 2 values."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if len(a) == 0 or len(b) == 0:
        return math.nan, math.nan, math.nan
    d = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        return d, math.nan, math.nan
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return d, d, d
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(sps.t.ppf(0.5 + level / 2, dof) * se)
    return d, d - half, d + half


def mantel_haenszel_p(tables: Sequence[Sequence[Sequence[int]]]) -> float:
    """One-sided Cochran-Mantel-Haenszel test over 2x2 strata ``[[a, b], [c, d]]``: is the first row's
    rate of the first column higher than the second row's within strata, pooled without letting the
    strata's different base rates pass for an association? (Continuity-corrected normal approximation;
    strata of fewer than two units carry no information and are skipped; NaN when none is left.)"""
    excess, variance = 0.0, 0.0
    for (a, b), (c, d) in tables:
        n = a + b + c + d
        if n < 2:
            continue
        excess += a - (a + b) * (a + c) / n
        variance += (a + b) * (c + d) * (a + c) * (b + d) / (n * n * (n - 1))
    if variance == 0:
        return math.nan
    return float(sps.norm.sf((excess - 0.5) / math.sqrt(variance)))
