"""Exponential moving averages for the MI z-score's sigma (docs/method.md section 3).

``mi_zscore_ema`` divides by an EMA of the marginal's std (decay 0.9, initialised with the first value,
one EMA per sampler and per version, updated only on steps where the proxy is computed).
``ProxyEMAState`` is that state for ONE sampler: keep one instance per sampler and checkpoint it with
``state_dict()``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from .proxy import _matched_marginal, _prepare, _zscore, proxy_metrics

__all__ = ["EMA", "ProxyEMAState"]


class EMA:
    """``value <- decay * value + (1 - decay) * x``; the first finite x initialises; NaN/inf x are ignored."""

    def __init__(self, decay: float = 0.9) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ValueError("decay must be in [0, 1]")
        self.decay = float(decay)
        self._value = math.nan
        self.count = 0  # number of accepted updates

    @property
    def initialized(self) -> bool:
        return self.count > 0

    @property
    def value(self) -> float:
        """Current average (NaN before the first accepted update)."""
        return self._value

    def update(self, x: float) -> float:
        x = float(x)
        if not math.isfinite(x):
            return self._value
        if self.count == 0:
            self._value = x
        else:
            self._value = self.decay * self._value + (1.0 - self.decay) * x
        self.count += 1
        return self._value

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "value": self._value, "count": self.count}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.decay = float(state["decay"])
        self._value = float(state["value"])
        self.count = int(state["count"])

    def __repr__(self) -> str:
        return f"EMA(decay={self.decay}, value={self._value}, count={self.count})"


class ProxyEMAState:
    """EMA sigmas of one sampler (per-token and sequence) and the z-scores computed with them.

    ``update(logp_sum, z_len, row_col, metrics=None)`` first updates each EMA with this step's
    ``marginal_std`` / ``marginal_std_seq`` (computed with :func:`proxy_metrics` when ``metrics`` is not
    given), then returns ``metrics`` plus ``marginal_std_ema``, ``marginal_std_seq_ema``,
    ``mi_zscore_ema`` (per-token) and ``mi_zscore_ema_seq``:
    mean((matched - marginal) / (sigma_ema + 1e-3)). An empty batch (NaN sigma) leaves the EMAs as they
    are and yields NaN z-scores.
    """

    def __init__(self, decay: float = 0.9) -> None:
        self.sigma = EMA(decay)
        self.sigma_seq = EMA(decay)

    def update(
        self,
        logp_sum: torch.Tensor,
        z_len: torch.Tensor,
        row_col: torch.Tensor,
        metrics: Mapping[str, float] | None = None,
        col_equiv: torch.Tensor | None = None,
    ) -> dict[str, float]:
        if metrics is None:
            metrics = proxy_metrics(logp_sum, z_len, row_col, col_equiv)
        out = dict(metrics)
        sigma = self.sigma.update(metrics["marginal_std"])
        sigma_seq = self.sigma_seq.update(metrics["marginal_std_seq"])
        L, zl, rc, _ = _prepare(logp_sum, z_len, row_col)
        out["marginal_std_ema"] = sigma
        out["marginal_std_seq_ema"] = sigma_seq
        if L.shape[0] == 0:
            out["mi_zscore_ema"] = math.nan
            out["mi_zscore_ema_seq"] = math.nan
            return out
        out["mi_zscore_ema"] = _zscore(*_matched_marginal(L, zl, rc, per_token=True), sigma)
        out["mi_zscore_ema_seq"] = _zscore(*_matched_marginal(L, zl, rc, per_token=False), sigma_seq)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"sigma": self.sigma.state_dict(), "sigma_seq": self.sigma_seq.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.sigma.load_state_dict(state["sigma"])
        self.sigma_seq.load_state_dict(state["sigma_seq"])
