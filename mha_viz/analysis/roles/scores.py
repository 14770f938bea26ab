"""Head-role scores on a text: previous, next and duplicate token, the shifted-duplicate
induction score and the induction pattern (see the package docstring for the options)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.arrays import RowsDone, as_array, as_arrays, as_inputs, check_mask, is_many, per_input
from ...core.errors import InputError
from ...maps.streaming import MapsSource, RowBlock, TraceSource, fold_maps
from ...maps.trace import AttentionTrace
from ..entropy import RowEntropy, mean_over_rows
from ..special import drop_positions, kept_block
from ..token_classes import ClassMass

NORMALIZATIONS = ("ours", "transformer_lens")


def _check_normalization(normalization: str) -> str:
    if normalization not in NORMALIZATIONS:
        raise InputError(f"normalization must be one of {', '.join(NORMALIZATIONS)}, "
                         f"got {normalization!r}")
    return normalization


@dataclass
class _Prepared:
    """One input of the text scores: where its rows come from (a source of [N, H] maps: a
    trace's, or an array's leading axes folded into two), its leading shape, the kept
    positions (None: all) and their token ids."""

    source: object
    lead: tuple
    ids: np.ndarray | None  # the kept positions' token ids
    kept: np.ndarray | None = None
    trace: object = None

    @property
    def n(self) -> int:
        return self.source.n_tokens if self.kept is None else len(self.kept)

    def unfold(self, value):
        """A [N, H] result in the input's leading shape."""
        return None if value is None else np.asarray(value).reshape(self.lead)


def _source_and_lead(item) -> tuple[object, tuple]:
    if isinstance(item, AttentionTrace):
        return TraceSource(item), tuple(item.maps_shape[:2])
    maps, lead = fold_maps(as_array(item))
    # nothing here assumes a causal map: every key of every row is read
    return MapsSource(maps, False), lead


def _prepared(attentions, token_ids=None, exclude=None, drop_special: bool = False,
              ids_needed: bool = False, what: str = "this score") -> list[_Prepared]:
    """One _Prepared per input; the left-out positions are removed from each block of rows
    as it is read (rows renormalized, as drop_positions does to whole maps)."""
    as_inputs(attentions)  # checks them: traces or maps [..., T, T] of one layer/head shape
    items = list(attentions) if is_many(attentions) else [attentions]
    ids_list = per_input(attentions, token_ids)
    exclude_list = per_input(attentions, exclude)
    out = []
    for item, ids, excluded in zip(items, ids_list, exclude_list):
        source, lead = _source_and_lead(item)
        n = source.n_tokens
        if ids is None and isinstance(item, AttentionTrace):
            ids = item.token_ids
        if ids is not None:
            ids = np.asarray(ids)
            if ids.ndim != 1 or ids.shape[0] != n:
                raise InputError(f"token_ids must have one id per token (T = {n}), "
                                 f"got shape {list(ids.shape)}")
        elif ids_needed:
            raise InputError(f"{what} needs token_ids (or a trace that has them)")
        drop = np.zeros(n, dtype=bool)
        mask = check_mask(excluded, n, name="exclude")
        if mask is not None:
            drop |= mask
        if drop_special:
            if not isinstance(item, AttentionTrace):
                raise InputError("drop_special needs a trace (it reads trace.special_mask); "
                                 "for plain arrays pass exclude= a bool mask [T]")
            drop |= check_mask(item.special_mask, n, name="special_mask")
        kept = None
        if drop.any():
            if drop.all():
                raise InputError("every position is left out: nothing remains to score")
            kept = np.flatnonzero(~drop)
            if ids is not None:
                ids = ids[kept]
        out.append(_Prepared(source, lead, ids, kept,
                             item if isinstance(item, AttentionTrace) else None))
    return out


def _text_score(prepared: _Prepared, key: str, normalization: str):
    """One input's text score `key` (its leading shape; None for a pattern no row has,
    "ours"), from one pass over its rows."""
    return prepared.unfold(_streamed_scores(prepared, [key], normalization)[key])


def previous_token_scores(attentions, *, exclude=None, drop_special: bool = False,
                          normalization: str = "ours") -> np.ndarray:
    """Previous-token score. -> [L, H]

    "ours": mean over query rows i >= 1 of A[i, i - 1] (T - 1 rows). 1 for a head that
    always attends to the previous token; 1/T for uniform bidirectional attention over T keys.
    "transformer_lens": sum over i >= 1 of A[i, i - 1], divided by all T rows, i.e.
    TransformerLens's detect_head(..., "previous_token_head") score = ours x (T - 1) / T
    (an exact previous-token head scores (T - 1)/T there, not 1).
    With ``exclude`` / ``drop_special`` (see the module docstring) the left-out positions are
    removed first and T is the number of positions kept; "previous" is then the previous
    kept position (for [CLS] a b [SEP]: the row of b, key a; row a has no previous key).
    """
    _check_normalization(normalization)
    prepared = _prepared(attentions, exclude=exclude, drop_special=drop_special)
    return np.mean([_text_score(p, "previous token", normalization) for p in prepared], axis=0)


def next_token_scores(attentions, *, exclude=None, drop_special: bool = False,
                      normalization: str = "ours") -> np.ndarray:
    """Next-token score. -> [L, H]

    "ours": mean over query rows i < T - 1 of A[i, i + 1]. "transformer_lens": the same sum
    divided by all T rows (TransformerLens has no next-token detector; this is its
    convention), = ours x (T - 1) / T. Always 0 for a causal (GPT-2) model; meaningful for
    bidirectional models (BERT). ``exclude`` / ``drop_special`` as for previous_token_scores.
    """
    _check_normalization(normalization)
    prepared = _prepared(attentions, exclude=exclude, drop_special=drop_special)
    return np.mean([_text_score(p, "next token", normalization) for p in prepared], axis=0)


def _duplicate_mask(ids: np.ndarray, include_later: bool, start: int = 0,
                    stop: int | None = None) -> np.ndarray:
    """bool [T, T]: [i, j] says j != i holds the same id as i (j < i unless include_later);
    with start / stop, only the rows start..stop-1 ([stop - start, T])."""
    n = ids.shape[0]
    stop = n if stop is None else stop
    rows = np.arange(start, stop)
    same = ids[start:stop, None] == ids[None, :]
    same[np.arange(len(rows)), rows] = False
    if not include_later:
        same &= np.arange(n)[None, :] < rows[:, None]  # keys j < i only
    return same


def _mean_or_zero(scores: list, shape) -> np.ndarray:
    if not scores:
        return np.zeros(shape, dtype=np.float64)
    return np.mean(scores, axis=0)


# The text scores role_scores gives, in one pass.
TEXT_SCORE_KEYS = ("previous token", "next token", "duplicate token", "induction (text)")
# Text scores read on the diagonal: key -> how far before the query the key is (i - j).
_DIAGONAL_KEYS = {"previous token": 1, "next token": -1}
# Text scores read on a pattern of the token ids ("any": duplicates later in the text too).
_PATTERN_KEYS = ("duplicate token", "duplicate token (any)", "induction (text)")
# Pattern entries a stream keeps from one layer to the next (int32 row and key: 8 bytes each).
_CACHED_ENTRIES = 1 << 23


class TextScores:
    """The text scores of one input (previous / next token, duplicate token, induction on
    the text), an accumulator (mha_viz.maps.streaming) over blocks of query rows of its maps with
    the left-out positions removed: the mass on the diagonal or the token pattern, accumulated over
    the blocks. Memory: O(L H + T) plus one block's pattern rows (and the patterns' entries
    up to _CACHED_ENTRIES, reused by every layer). add() takes blocks [H, r, K'] of rows
    start..stop-1 (K' may stop short of the n kept positions where the keys left out hold
    0) and does not change them."""

    def __init__(self, lead: tuple, n: int, ids: np.ndarray | None, wanted):
        self.n, self.ids, self.wanted = n, ids, tuple(wanted)
        if any(k in _DIAGONAL_KEYS for k in self.wanted) and n < 2:
            raise InputError(f"need at least 2 tokens for this score, got T = {n}")
        self.sums = {key: np.zeros(lead, dtype=np.float64) for key in self.wanted}
        # Which rows have a non-empty pattern: "ours" averages over them (the other rows
        # add 0 to the sum).
        self.queries = {key: np.zeros(n, dtype=bool) for key in self.wanted
                        if key in _PATTERN_KEYS}
        self._entries: dict = {}
        self._cached = 0

    def entries(self, key: str, start: int, stop: int, width: int):
        """(local rows, keys) of the pattern `key`'s entries in rows start..stop-1 and keys <
        width, row-major; and which of the rows have a pattern."""
        found = self._entries.get((key, start, stop, width))
        if found is not None:
            return found
        if key == "induction (text)":
            # The duplicate pattern moved one key right (j + 1 <= i: always inside).
            local, keys, queries = self.entries("duplicate token", start, stop, width)
            found = local, keys + 1, queries
        else:
            pattern = _duplicate_mask(self.ids, key == "duplicate token (any)", start, stop)
            # Keys past the block's width hold 0: only the pattern's entries inside it count.
            local, keys = (i.astype(np.int32) for i in np.nonzero(pattern[:, :width]))
            found = local, keys, pattern.any(axis=1)
        if self._cached + found[0].size <= _CACHED_ENTRIES:
            self._entries[key, start, stop, width] = found
            self._cached += found[0].size
        return found

    in_place = False
    summary_parts = ("diagonals",)  # read from a block's summary when it has one

    def update(self, block) -> None:
        """A RowBlock of the kept positions' rows."""
        self.add(block.layer, block.start, block.stop, block.rows, block.summary)

    def merge(self, other: "TextScores") -> "TextScores":
        for key in self.wanted:
            self.sums[key] += other.sums[key]
            if key in self.queries:
                self.queries[key] |= other.queries[key]
        return self

    def add(self, layer: int, start: int, stop: int, block: np.ndarray, summary=None
            ) -> None:
        """summary: the block's maps.summaries.RowSummary, whose diagonals are read when it
        has them."""
        width = block.shape[-1]
        rows = np.arange(start, stop)
        diagonals = None if summary is None else summary.diagonals
        for key in self.wanted:
            if key in _DIAGONAL_KEYS and diagonals is not None:
                self.sums[key][layer] += diagonals[-_DIAGONAL_KEYS[key]]
                continue
            if key in _DIAGONAL_KEYS:
                keys = rows - _DIAGONAL_KEYS[key]
                inside = (keys >= 0) & (keys < min(width, self.n))
                picked = block[:, rows[inside] - start, keys[inside]]
                self.sums[key][layer] += picked.sum(axis=-1, dtype=np.float64)
                continue
            local, keys, queries = self.entries(key, start, stop, width)
            self.queries[key][start:stop] = queries
            if not local.size:
                continue
            # the rows' masses summed: every entry's weight, added in float64
            self.sums[key][layer] += block[:, local, keys].sum(axis=-1, dtype=np.float64)

    def result(self, normalization: str) -> dict:
        """{key: [L, H]}; a pattern score is None ("ours") when no row has the pattern."""
        out = {}
        for key in self.wanted:
            if key in _DIAGONAL_KEYS:
                mean = self.sums[key] / (self.n - 1)  # the mean along the diagonal
                out[key] = mean * ((self.n - 1) / self.n) \
                    if normalization == "transformer_lens" else mean
            elif normalization == "transformer_lens":
                out[key] = self.sums[key] / self.n
            else:
                count = int(self.queries[key].sum())
                out[key] = self.sums[key] / count if count else None
        return out


def _streamed_scores(prepared: _Prepared, wanted, normalization: str, mass: bool = False,
                     entropy_rows: bool = False, done: RowsDone | None = None) -> dict:
    """The text scores `wanted` of one input in one pass over its blocks of rows (results
    [N, H], as its source folds them); with mass, also token_class_mass (on every token,
    under "mass"); with entropy_rows, the normalized entropy of the maps after leaving out
    (under "entropy")."""
    source = prepared.source
    fold = (source.n_layer, source.n_head)
    text = TextScores(fold, prepared.n, prepared.ids, wanted)
    n, causal = source.n_tokens, bool(source.causal)
    masses = ClassMass(prepared.trace, *fold, n) if mass else None
    entropies = RowEntropy(*fold, prepared.n, causal) if entropy_rows else None
    done = RowsDone() if done is None else done
    # whole rows: kept_block leaves out what is left out, then cuts a causal block's keys
    for block in source.blocks(cut=False):
        layer, start, stop, rows = block.layer, block.start, block.stop, block.rows
        if masses is not None:  # on every token, before anything is left out
            masses.update(RowBlock(layer, *kept_block(rows, start, stop, None, n, causal)))
        part = kept_block(rows, start, stop, prepared.kept, n, causal)
        if part is not None:
            text.add(layer, *part)
            if entropies is not None:  # last: it may work in a block computed for this pass
                # restricted blocks are new arrays; otherwise it is the block's own
                owned = block.owned or prepared.kept is not None
                entropies.update(RowBlock(layer, *part, owned=owned))
        done(stop - start)
    out = text.result(normalization)
    if masses is not None:
        out["mass"] = masses.result()
    if entropies is not None:
        out["entropy"] = mean_over_rows(entropies.result(normalized=True))
    return out


def duplicate_token_scores(attentions, token_ids=None, include_later: bool = False, *,
                           exclude=None, drop_special: bool = False,
                           normalization: str = "ours") -> np.ndarray:
    """Duplicate-token score: mean, over the queries i whose token also occurs at an earlier
    position (include_later=True: at any other position), of the mass A[i, D(i)] on those
    positions D(i) = {j < i : id_j = id_i}. -> [L, H]

    token_ids: the ids [T] (taken from the trace when a trace is passed and this is None);
        with a list of inputs, one id list per input.
    A head scores 0 on an input where no query has a duplicate. With a list of inputs, the
    mean over the inputs that have at least one duplicated query (0 if none has).
    normalization="transformer_lens": sum_i A[i, D(i)] / T over all T rows (rows without a
        duplicate add 0), TransformerLens's detect_head(..., "duplicate_token_head") score
        = ours x (number of queries with a duplicate) / T; with a list, the plain mean over
        the inputs (an input without duplicates counts 0), as detect_head does.
    ``exclude`` / ``drop_special``: see the module docstring (a left-out [SEP] is then no
        duplicate of the other [SEP]).
    """
    _check_normalization(normalization)
    prepared = _prepared(attentions, token_ids, exclude, drop_special, ids_needed=True,
                         what="duplicate_token_scores")
    key = "duplicate token (any)" if include_later else "duplicate token"
    scores = [s for s in (_text_score(p, key, normalization) for p in prepared)
              if s is not None]
    return _mean_or_zero(scores, prepared[0].lead)


def shifted_duplicate_scores(attentions, token_ids=None, *, exclude=None,
                             drop_special: bool = False,
                             normalization: str = "ours") -> np.ndarray:
    """Induction score on any text, from the shifted duplicate-token pattern. -> [L, H]

    For query i the induction targets are S(i) = {j + 1 : j < i, id_j = id_i}: the tokens
    that followed the earlier occurrences of token i (TransformerLens's induction pattern,
    the duplicate-token pattern shifted one column right; j + 1 = i, a token repeated back
    to back, counts as in TransformerLens). "ours": mean over the queries with a non-empty
    S(i) of the mass A[i, S(i)] (0 on an input where no token repeats; with a list, the mean
    over the inputs that have a repeat). "transformer_lens": sum_i A[i, S(i)] / T over all T
    rows = TransformerLens's detect_head(..., "induction_head") score = ours x (number of
    queries with a target) / T. On a repeated random sequence R R this measures the same
    thing as induction_pattern_scores (the probe), on ordinary text it needs repeated tokens.
    token_ids, ``exclude`` / ``drop_special``: as for duplicate_token_scores.
    """
    _check_normalization(normalization)
    prepared = _prepared(attentions, token_ids, exclude, drop_special, ids_needed=True,
                         what="shifted_duplicate_scores")
    scores = [s for s in (_text_score(p, "induction (text)", normalization) for p in prepared)
              if s is not None]
    return _mean_or_zero(scores, prepared[0].lead)


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def induction_pattern_scores(attentions, seq_len: int, offset: int = 0, *, exclude=None,
                             normalization: str = "ours") -> np.ndarray:
    """Induction score on a repeated sequence R R. -> [L, H]

    The input holds R (s = seq_len tokens) twice, starting at position ``offset`` (e.g. 1
    after a BOS or [CLS]; anything after the second copy, such as [SEP], is ignored). For
    query offset + s + k in the second copy (token R[k]) the induction target is the token
    that followed the previous occurrence of R[k], at offset + k + 1. The score is the mean
    over k = 0 .. s - 2 of A[offset + s + k, offset + k + 1] (the last query, k = s - 1, is
    left out: its target would be the first token of the second copy).
    An exact induction head scores 1; uniform attention scores about 1/position.

    normalization="transformer_lens": sum over k = 0 .. s - 1 (the last query included, as
        TransformerLens's induction pattern marks it) of A[offset + s + k, offset + k + 1],
        divided by all T rows of the input: TransformerLens's detect_head(...,
        "induction_head") score on this input when R's tokens are distinct and differ from
        the prefix and suffix. An exact induction head scores s / T (about 1/2).
    exclude: bool [T] of positions to leave out (rows renormalized, see the module
        docstring); only positions outside R R (the prefix, the suffix) may be left out.
    """
    seq_len = _check_int(seq_len, "seq_len", 2)
    offset = _check_int(offset, "offset", 0)
    _check_normalization(normalization)
    arrays = as_arrays(attentions)
    excludes = per_input(attentions, exclude)
    scores = []
    for array, excluded in zip(arrays, excludes):
        n = array.shape[-1]
        last = offset + 2 * seq_len - 1
        if last >= n:
            raise InputError(f"an R R input with seq_len = {seq_len} after {offset} prefix "
                             f"token(s) needs at least {last + 1} tokens, got T = {n}")
        start = offset
        mask = check_mask(excluded, n, name="exclude")
        if mask is not None and mask.any():
            if mask[offset:last + 1].any():
                raise InputError("exclude may only leave out positions outside the repeated "
                                 "sequence R R (the prefix and the suffix)")
            array, _ = drop_positions(array, ~mask)
            start = offset - int(mask[:offset].sum())
            n = array.shape[-1]
        k = np.arange(seq_len if normalization == "transformer_lens" else seq_len - 1)
        picked = array[..., start + seq_len + k, start + k + 1]
        if normalization == "transformer_lens":
            scores.append(picked.sum(axis=-1, dtype=np.float64) / n)
        else:
            scores.append(picked.mean(axis=-1, dtype=np.float64))
    return np.mean(scores, axis=0)
