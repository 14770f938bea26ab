"""Shared argument handling for the analyses and the streaming protocol: one input or several.

Every analysis accepts one input or several: an attention array, an AttentionTrace (anything
with an ``attentions`` attribute), or a list / tuple of either. These helpers turn that into a
list of float arrays and check shapes, raising InputError with a readable message.

A trace is kept as it is (as_inputs): the analyses read it a block of rows at a time
(mha_viz.maps.streaming, trace.gather_rows), never as trace.attentions, which for a long input
would not fit. Whether it holds its maps or rebuilds them on demand is the trace's business.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .errors import InputError


def is_many(value) -> bool:
    """True when ``value`` is a list / tuple of inputs (several texts), not one input."""
    return isinstance(value, (list, tuple))


def as_array(value, *, min_ndim: int = 2, name: str = "attentions") -> np.ndarray:
    """One input -> a float array [..., T, T] (a trace gives its ``attentions``)."""
    if hasattr(value, "attentions"):
        value = value.attentions
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise InputError(f"{name} must be a numeric array, got {type(value).__name__}") from error
    if array.dtype == object or not (np.issubdtype(array.dtype, np.floating)
                                     or np.issubdtype(array.dtype, np.integer)
                                     or array.dtype == bool):
        raise InputError(f"{name} must be a numeric array, got dtype {array.dtype}")
    if not np.issubdtype(array.dtype, np.floating):
        array = array.astype(np.float64)
    if array.ndim < min_ndim:
        raise InputError(f"{name} must have at least {min_ndim} dimensions "
                         f"([..., T, T]), got shape {list(array.shape)}")
    if array.shape[-1] != array.shape[-2]:
        raise InputError(f"{name} must be square in its last two axes ([..., T, T]: rows are "
                         f"queries, columns keys), got shape {list(array.shape)}")
    if array.shape[-1] == 0:
        raise InputError(f"{name} has no tokens (T = 0)")
    return array


def as_arrays(value, *, min_ndim: int = 2, name: str = "attentions") -> list[np.ndarray]:
    """One input or a list of inputs -> a non-empty list of arrays [..., T, T] (a trace gives
    all its maps: for short inputs such as a probe's)."""
    arrays = [as_array(item, min_ndim=min_ndim, name=name) for item in _items(value, name)]
    _same_leading(arrays, name)
    return arrays


def _items(value, name: str) -> list:
    items = list(value) if is_many(value) else [value]
    if not items:
        raise InputError(f"{name}: an empty list was given; pass at least one input")
    return items


def maps_shape(value) -> tuple[int, ...]:
    """[..., T, T] of a trace's maps or an array, computing nothing."""
    return tuple(value.maps_shape) if hasattr(value, "maps_shape") else tuple(np.shape(value))


def _same_leading(inputs, name: str) -> None:
    leading = {maps_shape(a)[:-2] for a in inputs}
    if len(leading) > 1:
        raise InputError(f"{name}: all inputs must have the same layers and heads, got leading "
                         f"shapes {sorted(list(s) for s in leading)}")


def as_inputs(value, *, min_ndim: int = 2, name: str = "attentions") -> list:
    """One input or a list of inputs -> a non-empty list with, per input, the trace itself
    (it gives its rows, however it holds its maps) or an array [..., T, T]; checked for one
    layer/head shape."""
    inputs = [item if hasattr(item, "row_blocks") else as_array(item, min_ndim=min_ndim,
                                                                  name=name)
              for item in _items(value, name)]
    _same_leading(inputs, name)
    return inputs


def per_input(value, other) -> list:
    """Spread a per-input argument (token ids, valid mask, ...) over the inputs.

    With several inputs ``other`` may hold one entry per input (a list / tuple of sequences, or
    a 2-D array), or be one value (a flat sequence) used for every input. Returns a list with
    one entry per input.
    """
    if not is_many(value):
        return [other]
    n = len(value)
    if other is None:
        return [None] * n
    if isinstance(other, np.ndarray):
        return list(other) if other.ndim == 2 and len(other) == n else [other] * n
    if is_many(other) and len(other) == n and all(
            e is None or np.ndim(e) >= 1 for e in other):
        return list(other)
    return [other] * n


def check_mask(mask, n_tokens: int, name: str = "valid_mask") -> np.ndarray | None:
    """A boolean [T] mask, or None."""
    if mask is None:
        return None
    mask = np.asarray(mask)
    if mask.ndim != 1 or mask.shape[0] != n_tokens:
        raise InputError(f"{name} must be a boolean array of length T = {n_tokens}, "
                         f"got shape {list(mask.shape)}")
    if mask.dtype != bool:
        if not np.isin(mask, (0, 1)).all():
            raise InputError(f"{name} must hold booleans (or 0/1), "
                             f"got values {np.unique(mask)[:5]}")
        mask = mask.astype(bool)
    return mask


def is_lower_triangular(attentions: np.ndarray, atol: float = 1e-9) -> bool:
    """True when every map in ``attentions`` [..., T, T] has (numerically) nothing above the
    diagonal, i.e. the input looks causal. Tested on the whole array given: pass all layers
    and heads of an input, or say ``causal=`` explicitly. A 1-token input counts as causal."""
    n = attentions.shape[-1]
    if n < 2:
        return True
    upper = np.triu_indices(n, 1)
    flat = attentions.reshape(-1, n, n)
    # Row by row over the maps, to avoid a full-size temporary on [12, 12, 1024, 1024].
    for start in range(0, flat.shape[0], 16):
        if np.abs(flat[start:start + 16][:, upper[0], upper[1]]).max() > atol:
            return False
    return True


def resolve_causal(value, attentions: np.ndarray, causal: bool | None) -> bool:
    """Explicit ``causal`` wins; else a trace's own ``causal`` flag; else detection."""
    if causal is not None:
        return bool(causal)
    if hasattr(value, "causal") and isinstance(getattr(value, "causal"), (bool, np.bool_)):
        return bool(value.causal)
    return is_lower_triangular(attentions)


def default_threads() -> int:
    """Worker threads for the heavy loops: the CPUs this process may use, at most 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


class RowsDone:
    """Streamed work reported to a progress(done, total) callback (a job's, which may raise
    to cancel the computation): query rows of the on-demand inputs' maps read so far, of
    `total`. Without a callback it does nothing."""

    def __init__(self, progress=None, total: int = 0):
        self.progress, self.total, self.done = progress, int(total), 0

    def __call__(self, rows: int) -> None:
        self.done += int(rows)
        if self.progress is not None:
            self.progress(self.done, self.total)


def row_pieces(n_rows: int, row_elements: int, chunk_elements: int) -> list[tuple[int, int]]:
    """(start, stop) pieces of n_rows rows of row_elements each, about chunk_elements per
    piece: how one block of rows is shared out to threads."""
    step = max(1, int(chunk_elements) // max(1, int(row_elements)))
    return [(start, min(start + step, n_rows)) for start in range(0, n_rows, step)]


def thread_map(fn, items, n_threads: int | None = None) -> list:
    """[fn(item) for item in items], spread over threads (numpy releases the GIL)."""
    items = list(items)
    threads = min(default_threads() if n_threads is None else int(n_threads), len(items))
    if threads <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(fn, items))
