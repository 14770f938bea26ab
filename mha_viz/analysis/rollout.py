"""Aggregates of the per-head maps: head mean / max per layer, and attention rollout
(Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"; ANALYSES.md section 1).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ._inputs import as_arrays

__all__ = ["head_mean", "head_max", "rollout"]


def _layers(attentions) -> list[np.ndarray]:
    arrays = as_arrays(attentions, min_ndim=4)
    for array in arrays:
        if array.ndim != 4:
            raise InputError(f"attentions must be [L, H, T, T], got shape {list(array.shape)}")
    return arrays


def _mean_heads(array: np.ndarray) -> np.ndarray:
    """[L, H, T, T] -> [L, T, T] float64, summing heads one at a time (fast, exact enough)."""
    total = np.zeros((array.shape[0], array.shape[2], array.shape[3]), dtype=np.float64)
    for head in range(array.shape[1]):
        total += array[:, head]
    return total / array.shape[1]


def head_mean(attentions) -> np.ndarray:
    """Mean over the heads of each layer: [L, H, T, T] -> [L, T, T]. Rows still sum to 1.
    A list of inputs (same T) gives the mean over inputs."""
    arrays = _layers(attentions)
    return np.mean([_mean_heads(a) for a in arrays], axis=0)


def head_max(attentions) -> np.ndarray:
    """Element-wise maximum over the heads of each layer: [L, H, T, T] -> [L, T, T].
    Rows do NOT sum to 1 (a display aggregate, not a distribution). A list of inputs (same
    T) gives the mean over inputs of the per-input maxima."""
    arrays = _layers(attentions)
    return np.mean([a.max(axis=1).astype(np.float64) for a in arrays], axis=0)


_REDUCERS = {"mean": lambda a: _mean_heads(a),
             "max": lambda a: a.max(axis=1).astype(np.float64),
             "min": lambda a: a.min(axis=1).astype(np.float64)}


def _renormalise_rows(matrix: np.ndarray) -> np.ndarray:
    sums = matrix.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sums > 0, matrix / np.where(sums > 0, sums, 1.0), 0.0)


def rollout(attentions, residual_weight: float = 0.5, head_reduce: str = "mean",
            return_all: bool = False) -> np.ndarray:
    """Attention rollout. -> [T, T] (float64), row i = how much of the last layer's token i
    flows from each input token j.

    Per layer the heads are reduced to M_l (``head_reduce``: "mean" as in Abnar & Zuidema,
    or "max" / "min", common variants), the residual connection is added as
    M'_l = (1 - r) M_l + r I with r = ``residual_weight`` (0.5 in the paper), rows are
    renormalised to sum to 1, and R = M'_{L-1} ... M'_1 M'_0.
    Properties: rows of R sum to 1; a causal model gives a lower-triangular R; identity maps
    give R = I.

    return_all: also return the partial rollouts: [L, T, T], entry l = M'_l ... M'_0.
    A list of inputs (same T) gives the mean over inputs.
    """
    if head_reduce not in _REDUCERS:
        raise InputError(f"head_reduce must be one of {sorted(_REDUCERS)}, got {head_reduce!r}")
    r = float(residual_weight)
    if not 0.0 <= r <= 1.0:
        raise InputError(f"residual_weight must be in [0, 1], got {residual_weight}")
    arrays = _layers(attentions)
    results = []
    for array in arrays:
        n = array.shape[-1]
        identity = np.eye(n)
        layers = _REDUCERS[head_reduce](array)  # [L, T, T]
        current = None
        partial = []
        for layer in layers:
            step = _renormalise_rows((1.0 - r) * layer + r * identity)
            current = step if current is None else step @ current
            partial.append(current)
        results.append(np.stack(partial) if return_all else current)
    return np.mean(results, axis=0)
