"""Hiding positions (special tokens, the attention sink) from the maps, for the
"hide special tokens" toggle (docs/analyses.md, "Attention maps and what is derived from them")."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.arrays import as_array, check_mask
from ..core.errors import InputError
from ..maps.ondemand import OnDemandMaps
from ..maps.streaming import causal_width
from ..maps.trace import MATERIALISE_MAX_BYTES

__all__ = ["drop_positions", "special_keep_mask", "shown_trace", "kept_positions",
           "KeptPositionsMaps"]


def drop_positions(attentions, keep_mask) -> tuple[np.ndarray, np.ndarray]:
    """Restrict maps to the kept positions and renormalize rows.

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


class KeptPositionsMaps(OnDemandMaps):
    """A trace's maps restricted to some positions, rows renormalized (drop_positions'
    arithmetic), read from the trace's own rows when asked for: a block of rows of the view
    is that block of the trace's rows, restricted. Nothing is held but the kept positions,
    so a long input's view costs what its trace costs."""

    def __init__(self, trace, kept: np.ndarray):
        self.parent = trace
        self.kept = np.asarray(kept, dtype=np.int64)
        self.n_layer, self.n_head = int(trace.n_layer), int(trace.n_head)
        self.n_tokens = len(self.kept)
        self.causal = bool(trace.causal)
        self.kv_heads = list(trace.kv_heads)

    def held_bytes(self) -> int:
        return int(self.kept.nbytes)  # the trace it reads is held (and counted) elsewhere

    def saved_bytes(self) -> int:
        return self.full_bytes()

    def saved_arrays(self) -> dict[str, np.ndarray]:
        """A view is saved as its maps: what it reads is another trace's."""
        return {"attentions": self.materialise(MATERIALISE_MAX_BYTES)}

    def _weights(self, layer: int, heads: list[int], rows: np.ndarray) -> np.ndarray:
        if not len(rows) or not heads:
            return np.zeros((len(heads), len(rows), self.n_tokens), dtype=np.float32)
        full_rows = self.parent.gather_rows(layer, self.kept[rows], heads)  # float32
        return _restricted(full_rows, np.arange(len(rows)), self.kept)


def shown_trace(trace, keep_mask):
    """The trace as it looks with the positions where keep_mask is False hidden: a trace over
    the kept positions whose every row is renormalized over the kept keys (drop_positions'
    arithmetic; a row with no kept mass stays 0). keep_mask None gives the trace itself.

    Held maps are restricted at once (one array, [L, H, K, K]); on-demand maps stay on
    demand (KeptPositionsMaps): every reader (head_map, rows, row_blocks, block_mean,
    streaming statistics) gets the same numbers either way."""
    if keep_mask is None:
        return trace
    mask = check_mask(keep_mask, trace.n_tokens, name="keep_mask")
    kept = np.flatnonzero(mask)
    if not len(kept):
        raise InputError("every position is hidden: keep at least one")
    maps = (KeptPositionsMaps(trace, kept) if trace.on_demand
            else _restricted(trace.attentions, kept, kept))
    return replace(
        trace, attentions=maps, tokens=[trace.tokens[i] for i in kept],
        token_ids=[trace.token_ids[i] for i in kept],
        display_tokens=[trace.display_tokens[i] for i in kept],
        special_mask=trace.special_mask[kept], segment_ids=trace.segment_ids[kept],
        n_tokens_before_truncation=0, kept_positions=[int(i) for i in kept])


def kept_positions(trace) -> np.ndarray:
    """Where each of a trace's tokens sits in the input it was read from: the kept positions
    of a shown_trace view, else 0..T-1."""
    kept = trace.kept_positions
    return np.arange(trace.n_tokens) if kept is None else np.asarray(kept, dtype=np.int64)
