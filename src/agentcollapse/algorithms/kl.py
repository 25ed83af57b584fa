"""Per-token KL estimators between the policy and the reference model (Schulman's k1/k2/k3)."""

from __future__ import annotations

import torch
from torch import Tensor

from agentcollapse.registry import Registry

__all__ = ["KL_ESTIMATORS", "kl_penalty", "register_kl"]

KL_ESTIMATORS: Registry = Registry("KL estimator")
"""name -> elementwise estimator ``f(logprob, ref_logprob) -> Tensor``; add one with ``@register_kl``."""
register_kl = KL_ESTIMATORS.register


@register_kl("k1")
def kl_k1(logprob: Tensor, ref_logprob: Tensor) -> Tensor:
    return logprob - ref_logprob


@register_kl("k2")
def kl_k2(logprob: Tensor, ref_logprob: Tensor) -> Tensor:
    return 0.5 * (logprob - ref_logprob).square()


def kl_k3(logprob: Tensor, ref_logprob: Tensor) -> Tensor:
    log_ratio = torch.clamp(ref_logprob - logprob, min=-20.0, max=20.0)  # r - l
    kl = torch.exp(log_ratio) - log_ratio - 1
    return torch.clamp(kl, min=-10.0, max=10.0)


register_kl("k3")(kl_k3)
register_kl("low_var_kl")(kl_k3)


@register_kl("abs")
def kl_abs(logprob: Tensor, ref_logprob: Tensor) -> Tensor:
    return (logprob - ref_logprob).abs()


def kl_penalty(logprob: Tensor, ref_logprob: Tensor, estimator: str) -> Tensor:
    """Elementwise estimate of KL(pi || ref) from sampled-token log-probs l (pi) and r (ref).

    k1 = l - r (unbiased, high variance, can be negative); k2 = (l - r)^2 / 2 (biased, low
    variance); k3 = low_var_kl = exp(r - l) - (r - l) - 1 (unbiased, always >= 0); abs = |l - r|.
    For k3 the log-ratio is clamped to [-20, 20] and the result to [-10, 10], as verl does, so a
    single extreme token cannot blow up the loss.
    """
    return KL_ESTIMATORS.get(estimator)(logprob, ref_logprob)
