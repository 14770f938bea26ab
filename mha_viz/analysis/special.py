"""Hiding positions (special tokens, the attention sink) from the maps, for the
"hide special tokens" toggle (docs/analyses.md, "Attention maps and what is derived from them")."""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..streaming import causal_width
from ..arrays import as_array, check_mask

__all__ = ["drop_positions", "special_keep_mask"]


def drop_positions(attentions, keep_mask) -> tuple[np.ndarray, np.ndarray]:
    """Restrict maps to the kept positions and renormalise rows.

    attentions: [..., T, T] (or a trace). keep_mask: bool [T], True = keep.
    Returns (restricted [..., K, K], kept indices [K] into the original positions).
    Each kept row is divided by the mass it puts on kept keys, so it sums to 1 again; a row
    whose kept mass is 0 (it attended only to dropped positions) stays all 0 instead.
    The dtype of the input is kept.
    """
    array = as_array(attentions)
    mask = check_mask(keep_mask, array.shape[-1], name="keep_mask")
    if mask is None:
        raise InputError("keep_mask is required (bool [T], True = keep)")
    kept = np.flatnonzero(mask)
    return _restricted(array, kept, kept), kept


def _restricted(array: np.ndarray, rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """array[..., rows, :][..., keys] (a new array), each row divided by its mass on those
    keys (rows with none stay 0): drop_positions' arithmetic, for the whole maps or for one
    block of rows."""
    restricted = np.take(np.take(array, rows, axis=-2), keys, axis=-1)
    sums = restricted.sum(axis=-1, keepdims=True, dtype=np.float64)
    scale = np.where(sums > 0, 1.0 / np.where(sums > 0, sums, 1.0), 0.0)
    # multiplied in float64: a row with a tiny kept mass (1e-40) has a scale past float32's
    # range, but each value times it stays at most 1
    np.multiply(restricted, scale, out=restricted, casting="unsafe")
    return restricted


def kept_block(block: np.ndarray, start: int, stop: int, kept: np.ndarray | None,
               n_tokens: int, causal: bool):
    """One block of an on-demand trace's rows start..stop-1, [H, stop - start, T], restricted
    as drop_positions restricts the whole maps. -> (first, last, block [H, last - first, K'])
    with its rows first..last-1 numbered among the kept positions, or None when the block
    holds no kept row. kept: the kept positions (sorted), None for all. For a causal map the
    keys after the block's last row (all 0) are left out: K' = causal_width(last, K)."""
    if kept is None:
        return start, stop, block[..., :causal_width(stop, n_tokens)] if causal else block
    first, last = (int(i) for i in np.searchsorted(kept, [start, stop]))
    if first == last:
        return None
    keys = kept[:causal_width(last, len(kept))] if causal else kept
    return first, last, _restricted(block, kept[first:last] - start, keys)


def special_keep_mask(trace, drop_first: bool = False) -> np.ndarray:
    """bool [T]: True for the positions to keep when hiding special tokens ([CLS], [SEP],
    <|endoftext|>, ... from trace.special_mask); ``drop_first`` also hides position 0
    (GPT-2's first token, the attention sink, even when it is not a special token)."""
    keep = ~np.asarray(trace.special_mask, dtype=bool)
    if drop_first and keep.size:
        keep = keep.copy()
        keep[0] = False
    return keep
