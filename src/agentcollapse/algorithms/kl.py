"""Per-token KL estimators between the policy and the reference model (Schulman's k1/k2/k3)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["KL_ESTIMATORS", "kl_penalty"]

KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3", "low_var_kl", "abs")


def kl_penalty(logprob: Tensor, ref_logprob: Tensor, estimator: str) -> Tensor:
    """Elementwise estimate of KL(pi || ref) from sampled-token log-probs l (pi) and r (ref).

    k1 = l - r (unbiased, high variance, can be negative); k2 = (l - r)^2 / 2 (biased, low
    variance); k3 = low_var_kl = exp(r - l) - (r - l) - 1 (unbiased, always >= 0); abs = |l - r|.
    For k3 the log-ratio is clamped to [-20, 20] and the result to [-10, 10], as verl does, so a
    single extreme token cannot blow up the loss.
    """
    diff = logprob - ref_logprob
    if estimator == "k1":
        return diff
    if estimator == "k2":
        return 0.5 * diff.square()
    if estimator in ("k3", "low_var_kl"):
        log_ratio = torch.clamp(-diff, min=-20.0, max=20.0)  # r - l
        kl = torch.exp(log_ratio) - log_ratio - 1
        return torch.clamp(kl, min=-10.0, max=10.0)
    if estimator == "abs":
        return diff.abs()
    raise ValueError(f"unknown KL estimator {estimator!r}; valid: {list(KL_ESTIMATORS)}")
