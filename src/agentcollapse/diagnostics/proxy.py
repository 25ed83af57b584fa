"""Mutual-information proxy from an in-batch cross-score matrix (docs/method.md section 3).

Inputs: ``logp_sum[r, c]`` = log p(Z_r | X_c) summed over Z_r's tokens (from ``cross_score``),
``z_len[r]`` = |Z_r| in tokens, ``row_col[r]`` = the column holding row r's own context, and optionally
``col_equiv[c]``, an id shared by columns whose prompt token sequences are identical
(:func:`column_equivalence`).

Per row r with own column i = row_col[r]:

* sequence version:  matched = L[r, i], marginal = logsumexp_j L[r, j] - log C
* per-token version: the same on L[r, :] / |Z_r|

``mi_estimate`` (per-token) and ``mi_seq_estimate`` (sequence) are mean(matched - marginal); the upper
bound is log C. Entropies: ``conditional_entropy_est`` = -mean(matched), ``reasoning_entropy_est`` =
-mean(marginal) (per-token); ``*_seq_est`` the same with sequence sums. Z-scores: mean((matched - marginal) / (sigma + 1e-3)) with sigma the
population std over rows of the marginal (one sigma per version).

Retrieval: row r is retrieved when its best-scoring column is equivalent to its own column. Ties are
broken uniformly at random *in expectation* (no sampling): with ``n_gt`` columns scoring strictly above
the best own-class column, ``n_eq`` columns tied with it of which ``m`` are own-class, the credit at k is
``P(at least one own-class column lands in the top k)`` = 0 if k <= n_gt, 1 if k - n_gt >= n_eq, else
``1 - C(n_eq - m, t) / C(n_eq, t)`` with t = k - n_gt. For k = 1 this is the fractional credit
(#own-class columns attaining the max) / (#columns attaining the max), so a matrix whose rows are
constant across columns scores exactly the chance level. Ties are exact float equality. Chance for
row r is (#columns equivalent to its own) / C; the reported chance level is its mean over rows.
Chance at k is what that random tie-breaking gives a row constant across columns: with m own-class
columns among C, ``1 - C(C - m, k) / C(C, k)`` per row (``min(k, C) / C`` for distinct columns, as in
the authors' code), averaged over rows; ``retrieval_above_chance@k`` = accuracy@k - chance@k.
(The authors compute ``min(1, k * mean chance)`` with equivalent columns, an over-estimate when a
row has several own-class columns; see ``docs/parity.md``.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = [
    "ZSCORE_EPS",
    "TOPK",
    "PROXY_KEYS",
    "column_equivalence",
    "matched_marginal",
    "zscore_with_sigma",
    "proxy_metrics",
]

ZSCORE_EPS = 1e-3
TOPK = (2, 4, 8)

PROXY_KEYS = (
    "mi_estimate",
    "mi_seq_estimate",
    "mi_upper_bound",
    "matched_log_prob_mean",
    "marginal_log_prob_mean",
    "conditional_entropy_est",
    "reasoning_entropy_est",
    "conditional_entropy_seq_est",
    "reasoning_entropy_seq_est",
    "retrieval_accuracy",
    *(f"retrieval_accuracy@{k}" for k in TOPK),
    "retrieval_chance_level",
    "retrieval_above_chance",
    *(f"retrieval_chance_level@{k}" for k in TOPK),
    *(f"retrieval_above_chance@{k}" for k in TOPK),
    "marginal_std",
    "mi_zscore",
    "mi_zscore_seq",
    "marginal_std_seq",
    "num_traces",
    "num_contexts",
)


def column_equivalence(contexts: Sequence[Sequence[int]]) -> torch.Tensor:
    """``[C]`` long tensor: columns with identical token sequences share an id (ids 0.. in first-seen order)."""
    ids: dict[tuple[int, ...], int] = {}
    out = [ids.setdefault(tuple(int(t) for t in ctx), len(ids)) for ctx in contexts]
    return torch.tensor(out, dtype=torch.long)


def _prepare(logp_sum, z_len, row_col, col_equiv=None):
    L = torch.as_tensor(logp_sum).detach().to("cpu", torch.float64)
    if L.dim() != 2:
        raise ValueError(f"logp_sum must be [R, C], got shape {tuple(L.shape)}")
    n_rows, n_cols = L.shape
    zl = torch.as_tensor(z_len).detach().to("cpu", torch.float64).reshape(-1)
    rc = torch.as_tensor(row_col).detach().to("cpu", torch.long).reshape(-1)
    if zl.numel() != n_rows or rc.numel() != n_rows:
        raise ValueError("z_len and row_col must have one entry per row of logp_sum")
    if n_rows and n_cols == 0:
        raise ValueError("logp_sum has rows but no columns")
    if n_rows:
        if bool((zl <= 0).any()):
            raise ValueError("z_len must be positive (drop empty traces before scoring)")
        if bool((rc < 0).any()) or bool((rc >= n_cols).any()):
            raise ValueError("row_col out of range")
    if col_equiv is None:
        eq = torch.arange(n_cols, dtype=torch.long)
    else:
        eq = torch.as_tensor(col_equiv).detach().to("cpu", torch.long).reshape(-1)
        if eq.numel() != n_cols:
            raise ValueError("col_equiv must have one entry per column")
    return L, zl, rc, eq


def _matched_marginal(L: torch.Tensor, zl: torch.Tensor, rc: torch.Tensor, per_token: bool):
    if per_token:
        L = L / zl.unsqueeze(1)
    n_rows, n_cols = L.shape
    matched = L[torch.arange(n_rows), rc]
    marginal = torch.logsumexp(L, dim=1) - math.log(n_cols)
    return matched, marginal


def matched_marginal(logp_sum, z_len, row_col, per_token: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row (matched, marginal) log-likelihoods, float64 ``[R]`` each (per-token or sequence version)."""
    L, zl, rc, _ = _prepare(logp_sum, z_len, row_col)
    return _matched_marginal(L, zl, rc, per_token)


def _zscore(matched: torch.Tensor, marginal: torch.Tensor, sigma: float) -> float:
    if matched.numel() == 0 or not math.isfinite(sigma):
        return math.nan
    return float(((matched - marginal) / (sigma + ZSCORE_EPS)).mean())


def zscore_with_sigma(logp_sum, z_len, row_col, sigma: float, per_token: bool = True) -> float:
    """mean((matched - marginal) / (sigma + 1e-3)) for a given sigma (e.g. an EMA of ``marginal_std``)."""
    matched, marginal = matched_marginal(logp_sum, z_len, row_col, per_token=per_token)
    return _zscore(matched, marginal, float(sigma))


def _topk_credit(L: torch.Tensor, rc: torch.Tensor, eq: torch.Tensor, ks: Sequence[int]) -> torch.Tensor:
    """[len(ks), R] expected retrieval credit with ties broken uniformly at random (see module doc)."""
    n_rows, n_cols = L.shape
    own_class = eq[rc].unsqueeze(1) == eq.unsqueeze(0)  # [R, C]
    best_own = torch.where(own_class, L, torch.full_like(L, -math.inf)).max(dim=1).values  # [R]
    n_gt = (L > best_own.unsqueeze(1)).sum(dim=1).tolist()
    tied = L == best_own.unsqueeze(1)
    n_eq = tied.sum(dim=1).tolist()
    m_own = (tied & own_class).sum(dim=1).tolist()
    out = torch.zeros((len(ks), n_rows), dtype=torch.float64)
    for a, k in enumerate(ks):
        for r in range(n_rows):
            t = k - n_gt[r]
            if t <= 0:
                credit = 0.0
            elif t >= n_eq[r]:
                credit = 1.0
            else:
                credit = 1.0 - math.comb(n_eq[r] - m_own[r], t) / math.comb(n_eq[r], t)
            out[a, r] = credit
    return out


def _chance_at(own_counts: Sequence[float], n_cols: int, k: int) -> float:
    """Mean over rows of P(an own-class column is among k columns drawn at random), m own of C."""
    total = 0.0
    for m in own_counts:
        m = int(m)
        total += 1.0 if k >= n_cols else 1.0 - math.comb(n_cols - m, k) / math.comb(n_cols, k)
    return total / len(own_counts)


def _nan_metrics(n_cols: int) -> dict[str, float]:
    out = {k: math.nan for k in PROXY_KEYS}
    out["mi_upper_bound"] = math.log(n_cols) if n_cols > 0 else math.nan
    out["num_traces"] = 0.0
    out["num_contexts"] = float(n_cols)
    return out


def proxy_metrics(
    logp_sum: torch.Tensor,
    z_len: torch.Tensor,
    row_col: torch.Tensor,
    col_equiv: torch.Tensor | None = None,
) -> dict[str, float]:
    """All MI-proxy metrics of docs/method.md section 3 for one cross-score matrix (keys: ``PROXY_KEYS``).

    With no rows every row-dependent value is NaN (``mi_upper_bound`` stays log C). ``col_equiv=None``
    treats all columns as distinct (chance = 1/C).
    """
    L, zl, rc, eq = _prepare(logp_sum, z_len, row_col, col_equiv)
    n_rows, n_cols = L.shape
    if n_rows == 0:
        return _nan_metrics(n_cols)

    matched_t, marginal_t = _matched_marginal(L, zl, rc, per_token=True)
    matched_s, marginal_s = _matched_marginal(L, zl, rc, per_token=False)
    sigma_t = float(marginal_t.std(unbiased=False))
    sigma_s = float(marginal_s.std(unbiased=False))

    ks = (1, *TOPK)
    credit = _topk_credit(L, rc, eq, ks).mean(dim=1).tolist()
    own_count = (eq[rc].unsqueeze(1) == eq.unsqueeze(0)).sum(dim=1).to(torch.float64)
    chance = float((own_count / n_cols).mean())
    chance_k = {k: _chance_at(own_count.tolist(), n_cols, k) for k in TOPK}

    out = {
        "mi_estimate": float((matched_t - marginal_t).mean()),
        "mi_seq_estimate": float((matched_s - marginal_s).mean()),
        "mi_upper_bound": math.log(n_cols),
        "matched_log_prob_mean": float(matched_t.mean()),
        "marginal_log_prob_mean": float(marginal_t.mean()),
        "conditional_entropy_est": -float(matched_t.mean()),
        "reasoning_entropy_est": -float(marginal_t.mean()),
        "conditional_entropy_seq_est": -float(matched_s.mean()),
        "reasoning_entropy_seq_est": -float(marginal_s.mean()),
        "retrieval_accuracy": credit[0],
        **{f"retrieval_accuracy@{k}": credit[i + 1] for i, k in enumerate(TOPK)},
        "retrieval_chance_level": chance,
        "retrieval_above_chance": credit[0] - chance,
        **{f"retrieval_chance_level@{k}": chance_k[k] for k in TOPK},
        **{f"retrieval_above_chance@{k}": credit[i + 1] - chance_k[k] for i, k in enumerate(TOPK)},
        "marginal_std": sigma_t,
        "mi_zscore": _zscore(matched_t, marginal_t, sigma_t),
        "mi_zscore_seq": _zscore(matched_s, marginal_s, sigma_s),
        "marginal_std_seq": sigma_s,
        "num_traces": float(n_rows),
        "num_contexts": float(n_cols),
    }
    assert tuple(out) == PROXY_KEYS
    return out
