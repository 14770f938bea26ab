"""Attention entropy (ANALYSES.md section 2).

Row entropy of one head's map A (rows are queries, columns keys, natural logs, 0 ln 0 = 0):

    H_i = - sum_j A_ij ln A_ij

A head's entropy is the mean of H_i over query rows. Uniform attention over n keys gives
ln n (ln 128 = 4.852 nats), the largest value a row over n keys can have.

Which keys a row "can see" (the keys with nonzero possible weight) matters for the
normalised entropy and for smoothing: for a causal (GPT-2) map row i sees keys 0..i, i.e.
i + 1 keys; for a bidirectional (BERT) map every row sees all T keys. With a ``valid_mask``
only valid keys count. Causality is taken from an explicit ``causal=`` argument if given,
else from a trace's own ``causal`` flag, else detected from the array being lower triangular
(tested on the whole array passed, so pass all heads of an input, or say ``causal=``).

Precision: the elementwise work is done in float32 (the maps are float32) with float64 sums;
results agree with a float64 computation to about 1e-6 relative.

An on-demand trace (trace.on_demand, a long input) is never turned into [L, H, T, T]: its
row entropies [L, H, T] are filled a block of query rows at a time (trace.row_blocks), by
the same per-block arithmetic (_entropy_block) as the whole-array path, so the numbers are
the same (to the last bit on the traces tested).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ._inputs import (RowsDone, as_inputs, causal_width, check_mask, is_many, is_on_demand,
                      per_input, resolve_causal, row_pieces, streamed_rows, thread_map)

__all__ = ["row_entropy", "entropy", "uniform_entropy", "max_row_entropy", "visible_keys"]

# Elements per chunk of maps (float32 work arrays; chunks are shared out to threads).
_CHUNK_ELEMENTS = 1 << 22


def uniform_entropy(n):
    """ln n: the entropy of uniform attention over n keys, the maximum for a row over n keys.

    Accepts an int or an array of counts; n must be >= 1 (ln 1 = 0).
    """
    n_array = np.asarray(n, dtype=np.float64)
    if np.any(n_array < 1):
        raise InputError(f"uniform_entropy needs n >= 1 keys, got {n}")
    result = np.log(n_array)
    return float(result) if result.ndim == 0 else result


def visible_keys(n_tokens: int, causal: bool, valid_mask=None) -> np.ndarray:
    """bool [T, T]: entry [i, j] says whether query i can give key j nonzero weight.

    Causal: j <= i; bidirectional: every j. With ``valid_mask`` [T], invalid (padding) keys
    are never visible and invalid query rows see nothing.
    """
    if n_tokens < 1:
        raise InputError("n_tokens must be >= 1")
    visible = np.tril(np.ones((n_tokens, n_tokens), dtype=bool)) if causal else \
        np.ones((n_tokens, n_tokens), dtype=bool)
    mask = check_mask(valid_mask, n_tokens)
    if mask is not None:
        visible &= mask[None, :] & mask[:, None]
    return visible


def max_row_entropy(n_tokens: int, causal: bool = False, valid_mask=None) -> np.ndarray:
    """float [T]: the largest entropy row i can have, ln(number of keys row i can see).

    Causal: ln(i + 1); bidirectional: ln T (with ``valid_mask``: ln of the number of valid
    keys row i can see). Rows that see no key (invalid rows) get NaN.
    """
    counts = visible_keys(n_tokens, causal, valid_mask).sum(axis=1).astype(np.float64)
    with np.errstate(divide="ignore"):
        result = np.log(counts)
    result[counts == 0] = np.nan
    return result


def _entropy_block(block: np.ndarray, visible_f: np.ndarray | None, spread: np.ndarray,
                   smoothing: float) -> np.ndarray:
    """Row entropies of a block of maps, float32 [..., r, K] (worked on in place), whose rows
    see the keys visible_f [r, K] (float32 0/1; None when every row sees every key) and get
    spread [r] added by smoothing. -> float64 [..., r]. The whole-array and the streamed paths
    both run this, so their numbers agree."""
    tiny = np.float32(np.finfo(np.float32).tiny)
    if visible_f is not None:
        # Mass on keys the row cannot see (e.g. padding given weight) is dropped and the
        # row renormalised over the keys it can see.
        block *= visible_f
        sums = block.sum(axis=-1, dtype=np.float64)
        off = (np.abs(sums - 1.0) > 1e-6) & (sums > 0)
        if off.any():
            scale = np.where(off, 1.0 / np.where(sums > 0, sums, 1.0), 1.0)
            block *= scale[..., None].astype(np.float32)
    if smoothing:
        # Clark et al.'s A' = (1 - s) A + s / n, n = the number of keys the row can see
        # (= T for a bidirectional map, exactly their formula).
        block *= np.float32(1.0 - smoothing)
        block += spread[:, None]
        if visible_f is not None:
            block *= visible_f
    logs = np.maximum(block, tiny)  # 0 ln 0 = 0: x = 0 gives 0 * ln(tiny) = 0
    np.log(logs, out=logs)
    return -np.vecdot(block, logs).astype(np.float64)


def _visible_counts(n: int, causal: bool, mask: np.ndarray | None) -> np.ndarray:
    """int [T]: how many keys each row sees (visible_keys(...).sum(axis=1)) in O(T)."""
    valid = np.ones(n, dtype=bool) if mask is None else mask
    counts = np.cumsum(valid) if causal else np.full(n, int(valid.sum()))
    return np.where(valid, counts, 0)


def _spread(counts: np.ndarray, smoothing: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(counts > 0, smoothing / np.maximum(counts, 1), 0.0).astype(np.float32)


def _finish_rows(out: np.ndarray, counts: np.ndarray, normalized: bool) -> np.ndarray:
    """Row entropies [..., T] -> NaN for rows that see no key; / ln(keys seen) if normalized."""
    # Rows that see no key at all (invalid rows) are undefined.
    out[..., counts == 0] = np.nan
    if normalized:
        with np.errstate(divide="ignore", invalid="ignore"):
            denom = np.log(counts.astype(np.float64))
        denom[counts <= 1] = np.nan  # a single visible key: nothing to normalise, excluded
        out = out / denom
    return out


def _row_entropy_one(attentions: np.ndarray, causal: bool, normalized: bool, smoothing: float,
                     valid_mask) -> np.ndarray:
    n = attentions.shape[-1]
    visible = visible_keys(n, causal, valid_mask)
    counts = visible.sum(axis=1)  # [T] keys each row can see
    lead = attentions.shape[:-2]
    flat = attentions.reshape(-1, n, n)
    out = np.empty((flat.shape[0], n), dtype=np.float64)
    visible_f = None if visible.all() else visible.astype(np.float32)
    spread = _spread(counts, smoothing)
    chunk = max(1, _CHUNK_ELEMENTS // (n * n))

    def rows_of(start):
        # float32 elementwise work on a copy we may modify, float64 sums over keys
        block = np.array(flat[start:start + chunk], dtype=np.float32)
        return _entropy_block(block, visible_f, spread, smoothing)

    starts = list(range(0, flat.shape[0], chunk))
    for start, rows in zip(starts, thread_map(rows_of, starts)):
        out[start:start + chunk] = rows
    return _finish_rows(out, counts, normalized).reshape(*lead, n)


class RowEntropyStream:
    """Row entropies of an on-demand trace's maps [L, H, T], filled a block of query rows at
    a time (the rows of _row_entropy_one, with the same arithmetic): memory O(L H T) plus
    the block. add() takes blocks [H, r, K] of rows start..stop-1 and works on them in place
    (give it last, or a copy); K may stop short of T for a causal map (the keys after the
    block's last row are all 0)."""

    def __init__(self, n_layers: int, n_heads: int, n_tokens: int, causal: bool,
                 smoothing: float = 0.0, valid_mask=None):
        self.n, self.causal, self.smoothing = n_tokens, bool(causal), float(smoothing)
        self.mask = check_mask(valid_mask, n_tokens)
        self.counts = _visible_counts(n_tokens, self.causal, self.mask)
        # As visible_keys(...).all() decides in the whole-array path: rows are renormalised
        # over what they see whenever some row does not see every key.
        self.restricted = (self.causal and n_tokens > 1) or (
            self.mask is not None and not self.mask.all())
        self.spread = _spread(self.counts, self.smoothing)
        self.out = np.empty((n_layers, n_heads, n_tokens), dtype=np.float64)

    def add(self, layer: int, start: int, stop: int, block: np.ndarray) -> None:
        width = block.shape[-1]
        visible_f = None
        if self.restricted:
            rows = np.arange(start, stop)
            visible = np.ones((stop - start, width), dtype=bool)
            if self.causal:
                visible &= np.arange(width)[None, :] <= rows[:, None]
            if self.mask is not None:
                visible &= self.mask[None, :width] & self.mask[start:stop, None]
            visible_f = visible.astype(np.float32)
        spread = self.spread[start:stop]

        def piece(bounds):
            a, b = bounds
            return _entropy_block(block[:, a:b], None if visible_f is None else visible_f[a:b],
                                  spread[a:b], self.smoothing)

        pieces = row_pieces(stop - start, block.shape[0] * width, _CHUNK_ELEMENTS)
        for (a, b), rows in zip(pieces, thread_map(piece, pieces)):
            self.out[layer, :, start + a:start + b] = rows

    def result(self, normalized: bool) -> np.ndarray:
        return _finish_rows(self.out, self.counts, normalized)


def _row_entropy_streamed(trace, causal: bool, normalized: bool, smoothing: float,
                          valid_mask, done: RowsDone) -> np.ndarray:
    n_layers, n_heads, n, _ = trace.maps_shape
    stream = RowEntropyStream(n_layers, n_heads, n, causal, smoothing, valid_mask)
    cut = causal and trace.causal  # keys after a causal block's last row are exact zeros
    for layer, start, stop, block in trace.row_blocks():
        # An on-demand trace's blocks are new arrays: worked on in place, no copy.
        stream.add(layer, start, stop, block[..., :causal_width(stop, n)] if cut else block)
        done(stop - start)
    return stream.result(normalized)


def _row_entropy_of(item, source, causal, normalized: bool, smoothing: float,
                    valid_mask, done: RowsDone) -> np.ndarray:
    """One input's row entropies: streamed over row blocks for an on-demand trace."""
    if is_on_demand(source):
        is_causal = resolve_causal(item, None, causal)
        return _row_entropy_streamed(source, is_causal, normalized, smoothing, valid_mask,
                                     done)
    is_causal = resolve_causal(item, source, causal)
    return _row_entropy_one(source, is_causal, normalized, smoothing, valid_mask)


def mean_over_rows(rows: np.ndarray) -> np.ndarray:
    """[..., T] row values -> [...] their mean over the rows that are not NaN (NaN if none)."""
    keep = ~np.isnan(rows)
    count = keep.sum(axis=-1)
    total = np.where(keep, rows, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _check_smoothing(smoothing: float) -> float:
    smoothing = float(smoothing)
    if not 0.0 <= smoothing < 1.0:
        raise InputError(f"smoothing must be in [0, 1), got {smoothing}")
    return smoothing


def row_entropy(attentions, normalized: bool = False, smoothing: float = 0.0,
                causal: bool | None = None, valid_mask=None, progress=None) -> np.ndarray:
    """Per-query row entropy H_i = -sum_j A_ij ln A_ij in nats (0 ln 0 = 0). -> float [..., T].

    attentions: [..., T, T] (e.g. [L, H, T, T] or one head [T, T]) or an AttentionTrace.
    normalized: divide row i by ln(number of keys row i can see): ln(i + 1) for a causal map,
        ln T for a bidirectional one. Rows with a single visible key are NaN (excluded).
    smoothing: s > 0 uses Clark et al.'s variant A' = (1 - s) A + s / n before the log
        (they use s = 1e-4), with n = the number of keys the row can see (= T for BERT).
    causal: True / False overrides detection; None takes a trace's ``causal`` flag or
        detects a lower-triangular input.
    valid_mask: optional bool [T]; rows of invalid positions are NaN and the weight on
        invalid keys is dropped (rows renormalised over the valid keys they see).
    progress: optional callback(done, total) over the query rows of an on-demand trace
        (streamed a block of rows at a time); it may raise to stop the computation.
    """
    if is_many(attentions):
        raise InputError("row_entropy takes one input; use entropy() for the mean over texts")
    smoothing = _check_smoothing(smoothing)
    source, = as_inputs(attentions)
    done = RowsDone(progress, streamed_rows([source]))
    return _row_entropy_of(attentions, source, causal, normalized, smoothing, valid_mask, done)


def entropy(attentions, normalized: bool = False, smoothing: float = 0.0, valid_mask=None,
            causal: bool | None = None, progress=None) -> np.ndarray:
    """A head's entropy: the mean over query rows of the row entropy (nats). -> [L, H]
    (generally the leading shape of the input, [...]).

    Rows excluded from the mean: invalid rows (``valid_mask`` False) and, when
    ``normalized``, rows with a single visible key (row 0 of a causal map). A head with no
    row left gets NaN. See row_entropy for ``normalized``, ``smoothing``, ``causal``.

    valid_mask: bool [T] (padding excluded: its rows and its keys are ignored). With a list
        of inputs, give one mask per input, or one mask shared by all.
    A list of inputs (arrays or traces, lengths may differ) gives the mean over inputs of
    each input's head entropies. An on-demand trace (a long input) is streamed a block of
    query rows at a time, with the same numbers; progress: as for row_entropy.
    """
    smoothing = _check_smoothing(smoothing)
    sources = as_inputs(attentions)
    items = list(attentions) if is_many(attentions) else [attentions]
    masks = per_input(attentions, valid_mask)
    done = RowsDone(progress, streamed_rows(sources))
    results = []
    for item, source, mask in zip(items, sources, masks):
        rows = _row_entropy_of(item, source, causal, normalized, smoothing, mask, done)
        results.append(mean_over_rows(rows))
    return np.mean(results, axis=0) if len(results) > 1 else results[0]
