"""Input checks shared by the filtering modules: numpy/torch -> float64 arrays with one-line errors."""

from __future__ import annotations

from typing import Any

import numpy as np

from agentcollapse.errors import UserError


def to_numpy(x: Any, name: str) -> np.ndarray:
    """Convert array-likes and torch tensors to a float64 numpy array."""
    if hasattr(x, "detach"):
        t = x.detach().cpu()
        try:
            arr = np.asarray(t)
        except (TypeError, RuntimeError):  # e.g. bfloat16 has no numpy dtype
            arr = np.asarray(t.double())
    else:
        arr = np.asarray(x)
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{name} must be numeric, got dtype {arr.dtype}; pass a float array or tensor") from exc


def check_finite(arr: np.ndarray, name: str) -> None:
    if arr.size and not np.all(np.isfinite(arr)):
        n_nan = int(np.isnan(arr).sum())
        n_inf = int(np.isinf(arr).sum())
        raise UserError(f"{name} contains {n_nan} NaN and {n_inf} inf values; fix the rollout/reward computation so every value is finite")


def as_2d(values: Any, name: str) -> np.ndarray:
    arr = to_numpy(values, name)
    if arr.ndim != 2:
        raise UserError(f"{name} must be a 2-D [prompts, group_size] array, got shape {tuple(arr.shape)}; reshape to [P, G]")
    check_finite(arr, name)
    return arr


def as_1d(scores: Any, name: str = "scores") -> np.ndarray:
    arr = to_numpy(scores, name)
    if arr.ndim != 1:
        raise UserError(f"{name} must be a 1-D [prompts] array, got shape {tuple(arr.shape)}; pass one score per group (see group_scores)")
    check_finite(arr, name)
    return arr
