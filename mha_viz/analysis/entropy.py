"""Attention entropy (docs/analyses.md, "Entropy").

Row entropy of one head's map A (rows are queries, columns keys, natural logs, 0 ln 0 = 0):

    H_i = - sum_j A_ij ln A_ij

A head's entropy is the mean of H_i over query rows. Uniform attention over n keys gives
ln n (ln 128 = 4.852 nats), the largest value a row over n keys can have.

Which keys a row "can see" (the keys with nonzero possible weight) matters for the
normalized entropy and for smoothing: for a causal (GPT-2) map row i sees keys 0..i, i.e.
i + 1 keys; for a bidirectional (BERT) map every row sees all T keys. With a ``valid_mask``
only valid keys count. Causality is taken from an explicit ``causal=`` argument if given,
else from a trace's own ``causal`` flag, else detected from the array being lower triangular
(tested on the whole array passed, so pass all heads of an input, or say ``causal=``).

Precision: the elementwise work is done in float32 (the maps are float32) with float64 sums;
results agree with a float64 computation to about 1e-6 relative.

Every input is read the same way, a block of query rows at a time (mha_viz.maps.streaming): maps
held whole, a long input's maps rebuilt on demand, a corpus batch. The statistic is one
accumulator, RowEntropy.
"""

from __future__ import annotations

import numpy as np

from ..core.arrays import (RowsDone, as_array, as_inputs, check_mask, is_many, per_input,
                           resolve_causal, row_pieces, thread_map)
from ..core.errors import InputError
from ..maps.streaming import MapsSource, accumulate, fold_maps, is_source, keys_of, source_of
from ..maps.trace import AttentionTrace

__all__ = ["row_entropy", "entropy", "entropy_scales", "uniform_entropy", "max_row_entropy",
           "visible_keys", "RowEntropy"]

# Elements per chunk of maps (float32 work arrays; chunks are shared out to threads).
_CHUNK_ELEMENTS = 1 << 22
# Rows of a causal map's band: each band reads the keys up to its last row only.
_CAUSAL_BAND = 64


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
        # row renormalized over the keys it can see.
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
        denom[counts <= 1] = np.nan  # a single visible key: nothing to normalize, excluded
        out = out / denom
    return out


class RowEntropy:
    """Row entropies [L, H, T] of one input's maps, an accumulator (mha_viz.maps.streaming):
    update() fills the rows of each block with _entropy_block's arithmetic, merge() takes the
    rows another accumulator of the same input filled (shards of rows, in any order), result()
    gives them (NaN for rows that see no key; normalized on request). Memory O(L H T) plus the
    block. It works in the blocks it owns, so the driver gives it each block last."""

    in_place = True
    summary_parts = ("entropy",)  # read from a block's summary (maps.summaries) when it has one

    def __init__(self, n_layer: int, n_head: int, n_tokens: int, causal: bool,
                 smoothing: float = 0.0, valid_mask=None, n_keys: int | None = None):
        self.n, self.causal, self.smoothing = n_tokens, bool(causal), float(smoothing)
        self.mask = check_mask(valid_mask, n_tokens)
        self.counts = _visible_counts(n_tokens, self.causal, self.mask)
        self.cross = n_keys is not None and n_keys != n_tokens
        if self.cross:  # cross-attention: rows over S keys
            if self.causal or self.mask is not None:
                raise InputError("rows over another sequence's keys (cross-attention) are "
                                 "neither causal nor masked here")
            self.counts = np.full(n_tokens, int(n_keys))
        # Rows are renormalized over what they see whenever some row does not see every key.
        self.restricted = (self.causal and n_tokens > 1) or (
            self.mask is not None and not self.mask.all())
        self.spread = _spread(self.counts, self.smoothing)
        self.out = np.full((n_layer, n_head, n_tokens), np.nan)
        self.filled = np.zeros((n_layer, n_tokens), dtype=bool)

    @classmethod
    def for_source(cls, source, causal: bool | None = None, smoothing: float = 0.0,
                   valid_mask=None) -> "RowEntropy":
        """For a source's shape; the rows see keys as `causal` says (default: the source's)."""
        return cls(source.n_layer, source.n_head, source.n_tokens,
                   source.causal if causal is None else causal, smoothing, valid_mask,
                   keys_of(source))

    def update(self, block) -> None:
        start, stop, width = block.start, block.stop, block.width
        summary = block.summary
        if summary is not None and summary.plogp is not None and self._reads_summaries:
            self.out[block.layer, :, start:stop] = self._from_summary(summary)
            self.filled[block.layer, start:stop] = True
            return
        rows = block.rows if block.owned and block.rows.dtype == np.float32 else np.array(
            block.rows, dtype=np.float32)
        visible_f = None
        if self.restricted:
            index = np.arange(start, stop)
            visible = np.ones((stop - start, width), dtype=bool)
            if self.causal:
                visible &= np.arange(width)[None, :] <= index[:, None]
            if self.mask is not None:
                visible &= self.mask[None, :width] & self.mask[start:stop, None]
            visible_f = visible.astype(np.float32)
        spread = self.spread[start:stop]

        def piece(bounds):
            a, b = bounds
            if not self.causal or visible_f is None:
                return _entropy_block(rows[:, a:b],
                                      None if visible_f is None else visible_f[a:b],
                                      spread[a:b], self.smoothing)
            # A causal row sees no key past itself: bands of rows, each reading the keys up to
            # its last row only, skip most of the masked half (their mass is dropped anyway).
            parts = []
            for c in range(a, b, _CAUSAL_BAND):
                d = min(b, c + _CAUSAL_BAND)
                keys = min(width, start + d)
                parts.append(_entropy_block(rows[:, c:d, :keys], visible_f[c:d, :keys],
                                            spread[c:d], self.smoothing))
            return np.concatenate(parts, axis=-1)

        pieces = row_pieces(stop - start, rows.shape[0] * width, _CHUNK_ELEMENTS)
        for (a, b), values in zip(pieces, thread_map(piece, pieces)):
            self.out[block.layer, :, start + a:start + b] = values
        self.filled[block.layer, start:stop] = True

    @property
    def _reads_summaries(self) -> bool:
        """A summary's sums hold for rows whose hidden keys hold zeros: they give this
        accumulator's numbers unless it smooths or masks positions, or reads another
        sequence's keys."""
        return not self.smoothing and self.mask is None and not self.cross

    def _from_summary(self, summary) -> np.ndarray:
        """Row entropies [H, r] from the rows' sums of -p ln p and their sums, renormalized
        as _entropy_block renormalizes (rows of a restricted map that are off 1 by more than
        1e-6): H(p / s) = H(p) / s + ln s."""
        values, sums = summary.plogp, summary.row_sums
        if not self.restricted:
            return values
        off = (np.abs(sums - 1.0) > 1e-6) & (sums > 0)
        if not off.any():
            return values
        safe = np.where(off, sums, 1.0)
        return np.where(off, values / safe + np.log(safe), values)

    def merge(self, other: "RowEntropy") -> "RowEntropy":
        taken = np.broadcast_to(other.filled[:, None, :], self.out.shape)
        self.out = np.where(taken, other.out, self.out)
        self.filled |= other.filled
        return self

    def result(self, normalized: bool = False) -> np.ndarray:
        if not self.filled.all():
            raise InputError("row entropies were asked for before every row was read")
        return _finish_rows(self.out.copy(), self.counts, normalized)


def _source_for(item, causal) -> tuple[object, bool, tuple]:
    """(source, whether its rows see keys causally, the leading shape of the result): a
    source as it is, a trace's rows, an array [..., T, T] as maps [N, H, T, T]."""
    if is_source(item):
        return item, item.causal if causal is None else bool(causal), (item.n_layer,
                                                                       item.n_head)
    if isinstance(item, AttentionTrace):
        return source_of(item), resolve_causal(item, None, causal), tuple(item.maps_shape[:2])
    array = as_array(item)
    maps, lead = fold_maps(array)
    is_causal = resolve_causal(item, array, causal)
    # the rows see keys as is_causal says, so a block may leave out the keys they cannot
    return MapsSource(maps, is_causal), is_causal, lead


def _sources_for(items, causal) -> list[tuple[object, bool, tuple]]:
    """_source_for of every input, the traces and arrays among them checked first (one
    layer/head shape; sources are checked by use)."""
    plain = [item for item in items if not is_source(item)]
    if plain:
        as_inputs(plain)
    return [_source_for(item, causal) for item in items]


def _row_entropy_of(found, normalized: bool, smoothing: float, valid_mask,
                    done: RowsDone) -> np.ndarray:
    """One input's row entropies [..., T] from its source (_source_for)."""
    source, is_causal, lead = found
    rows = RowEntropy.for_source(source, is_causal, smoothing, valid_mask)
    accumulate(source, [rows], done)
    return rows.result(normalized).reshape(*lead, source.n_tokens)


def _rows_to_read(found) -> int:
    """Query rows the sources' blocks hold: the total a progress callback counts towards."""
    return sum(source.n_layer * source.n_tokens for source, _, _ in found)


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


def head_row_entropy(maps, layer: int, head: int, **options) -> np.ndarray:
    """[T] each query's entropy in one head, as row_entropy(..., **options) of that head's
    map. maps: a trace (one head's map is read, or rebuilt on a long input) or an
    [L, H, T, T] array."""
    if not isinstance(maps, AttentionTrace):
        return row_entropy(np.asarray(maps)[layer, head], **options)
    options.setdefault("causal", maps.causal)
    return row_entropy(maps.head_map(layer, head), **options)


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
        invalid keys is dropped (rows renormalized over the valid keys they see).
    progress: optional callback(done, total) over the query rows read (a block of rows at a
        time); it may raise to stop the computation.
    """
    if is_many(attentions):
        raise InputError("row_entropy takes one input; use entropy() for the mean over texts")
    smoothing = _check_smoothing(smoothing)
    found = _sources_for([attentions], causal)
    return _row_entropy_of(found[0], normalized, smoothing, valid_mask,
                           RowsDone(progress, _rows_to_read(found)))


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
    query rows at a time, as every input is; progress: as for row_entropy.
    """
    smoothing = _check_smoothing(smoothing)
    items = list(attentions) if is_many(attentions) else [attentions]
    if not items:
        raise InputError("an empty list was given; pass at least one input")
    found = _sources_for(items, causal)
    masks = per_input(attentions, valid_mask)
    done = RowsDone(progress, _rows_to_read(found))
    results = []
    for one, mask in zip(found, masks):
        rows = _row_entropy_of(one, normalized, smoothing, mask, done)
        results.append(mean_over_rows(rows))
    return np.mean(results, axis=0) if len(results) > 1 else results[0]


def entropy_scales(attentions, smoothing: float = 0.0, causal: bool | None = None,
                   progress=None) -> dict[str, np.ndarray]:
    """One input's head entropies on both scales from ONE pass over its rows (each alone
    reads every map; a long input's are rebuilt for it): {"entropy": entropy(x, smoothing=),
    "normalized": entropy(x, normalized=True, smoothing=)}. x: a trace or maps."""
    smoothing = _check_smoothing(smoothing)
    found = _sources_for([attentions], causal)
    source, is_causal, lead = found[0]
    rows = RowEntropy.for_source(source, is_causal, smoothing, None)
    accumulate(source, [rows], RowsDone(progress, _rows_to_read(found)))
    return {name: mean_over_rows(rows.result(normalized).reshape(*lead, source.n_tokens))
            for name, normalized in (("entropy", False), ("normalized", True))}
