"""Small statistics shared by benchmarks and analysis (numpy/scipy only)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

__all__ = ["binomial_se", "bootstrap_spearman_ci", "mantel_haenszel_p", "mean_ci", "spearman", "welch_diff_ci", "wilson_interval"]


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


def spearman(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """``scipy.stats.spearmanr`` of two equally long samples (NaN when fewer than 3 or constant)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    res = sps.spearmanr(x, y)
    return float(res.statistic), float(res.pvalue)


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
    rho, _ = spearman(x, y)
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
