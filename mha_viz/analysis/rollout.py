"""Aggregates of the per-head maps: head mean / max per layer, and attention rollout
(Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"; docs/analyses.md,
"Attention maps and what is derived from them").
"""

from __future__ import annotations

import numpy as np

from ..core.arrays import as_inputs, maps_shape
from ..core.errors import InputError
from ..maps.trace import AttentionTrace

__all__ = ["head_mean", "head_max", "rollout", "aggregate_bytes_per_token"]


def _layers(attentions) -> list:
    """One input or a list -> traces as they are (they give rows however they hold their
    maps) and arrays [L, H, T, T]."""
    found = as_inputs(attentions, min_ndim=4)
    for item in found:
        if len(maps_shape(item)) != 4:
            raise InputError(f"attentions must be [L, H, T, T], got shape "
                             f"{list(maps_shape(item))}")
    return found


def _rows(value, layer: int, start: int, stop: int) -> np.ndarray:
    """[H, stop - start, T]: a trace's rows (held or computed), or an array's."""
    if isinstance(value, AttentionTrace):
        return value.rows(layer, start, stop)
    return value[layer, :, start:stop]


def _mean_heads(array: np.ndarray) -> np.ndarray:
    """[L, H, T, T] -> [L, T, T] float64, summing heads one at a time (fast, exact enough)."""
    total = np.zeros((array.shape[0], array.shape[2], array.shape[3]), dtype=np.float64)
    for head in range(array.shape[1]):
        total += array[:, head]
    return total / array.shape[1]


def _max_heads(array: np.ndarray) -> np.ndarray:
    return array.max(axis=1).astype(np.float64)


def _window(shape, layer, start, stop) -> tuple[list[int], int, int]:
    """The layers (all, or [layer]) and the rows start..stop-1 asked for, checked."""
    n_layer, n = shape[0], shape[-1]
    if layer is not None and not 0 <= int(layer) < n_layer:
        raise InputError(f"layer {layer} is out of range (0..{n_layer - 1})")
    start = int(start)
    stop = n if stop is None else int(stop)
    if not 0 <= start < stop <= n:
        raise InputError(f"rows {start}..{stop} are not a window of the {n} rows")
    return (list(range(n_layer)) if layer is None else [int(layer)]), start, stop


def _reduce_heads(source, reduce, layer, start, stop) -> np.ndarray:
    """reduce (_mean_heads / _max_heads) over one input's heads: [L or 1, rows, T] float64,
    read a bounded block of rows at a time. The result (float64, one map per layer) must fit
    in MATERIALISE_MAX_BYTES, as trace.attentions must, or take no more than the input
    already holds."""
    from ..maps import ondemand
    from ..maps import trace as trace_module

    layers, start, stop = _window(maps_shape(source), layer, start, stop)
    n_head, n = maps_shape(source)[1], maps_shape(source)[-1]
    need = 8 * len(layers) * (stop - start) * n
    held = source.held_bytes() if isinstance(source, AttentionTrace) else source.nbytes
    if need > max(trace_module.MATERIALISE_MAX_BYTES, held):
        raise ondemand.MapsTooLargeError(
            f"the head {'mean' if reduce is _mean_heads else 'maximum'} of every layer of "
            f"this {n:,}-token input would take {need / 2**30:.1f} GB: ask for one layer "
            f"(layer=) or a window of rows (start=, stop=)")
    out = np.empty((len(layers), stop - start, n), dtype=np.float64)
    step = max(1, ondemand.BLOCK_ELEMENTS // (n_head * n))
    for index, current in enumerate(layers):
        for first in range(start, stop, step):
            last = min(first + step, stop)
            out[index, first - start:last - start] = reduce(
                _rows(source, current, first, last)[None])[0]
    return out


def _aggregate(attentions, reduce, layer, start, stop) -> np.ndarray:
    sources = _layers(attentions)
    found = np.mean([_reduce_heads(s, reduce, layer, start, stop) for s in sources], axis=0)
    return found if layer is None else found[0]


def head_mean(attentions, *, layer: int | None = None, start: int = 0,
              stop: int | None = None) -> np.ndarray:
    """Mean over the heads of each layer: [L, H, T, T] -> [L, T, T]. Rows still sum to 1.
    A list of inputs (same T) gives the mean over inputs.

    layer: only that layer's mean, [T, T]; start / stop: only query rows start..stop-1
    ([L or no axis, stop - start, T]). Every input is read a block of rows at a time; for a
    long input ask for one layer, or a window of rows, when all would not fit."""
    return _aggregate(attentions, _mean_heads, layer, start, stop)


def head_max(attentions, *, layer: int | None = None, start: int = 0,
             stop: int | None = None) -> np.ndarray:
    """Element-wise maximum over the heads of each layer: [L, H, T, T] -> [L, T, T].
    Rows do NOT sum to 1 (a display aggregate, not a distribution). A list of inputs (same
    T) gives the mean over inputs of the per-input maxima. layer, start / stop: as for
    head_mean."""
    return _aggregate(attentions, _max_heads, layer, start, stop)


_REDUCERS = {"mean": _mean_heads,
             "max": _max_heads,
             "min": lambda a: a.min(axis=1).astype(np.float64)}


def _renormalize_rows(matrix: np.ndarray) -> np.ndarray:
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
    renormalized to sum to 1, and R = M'_{L-1} ... M'_1 M'_0.
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
    results = []
    for source in _layers(attentions):
        n = maps_shape(source)[-1]
        identity = np.eye(n)
        # the heads reduced a block of rows at a time: [L, T, T] (what the product needs)
        layers = _reduce_heads(source, _REDUCERS[head_reduce], None, 0, None)
        current = None
        partial = []
        for layer in layers:
            step = _renormalize_rows((1.0 - r) * layer + r * identity)
            current = step if current is None else step @ current
            partial.append(current)
        results.append(np.stack(partial) if return_all else current)
    return np.mean(results, axis=0)


def aggregate_bytes_per_token(kind: str, n_layer: int) -> int:
    """Bytes per squared token that one layer's head mean ("mean": [T, T] float64) or the
    rollout with its partial products ("rollout": every layer's mean and product, 2 x [L, T, T]
    float64) hold while computed: x T^2 is what they take."""
    if kind not in ("mean", "rollout"):
        raise InputError(f"kind must be 'mean' or 'rollout', got {kind!r}")
    return 8 if kind == "mean" else 16 * int(n_layer)
