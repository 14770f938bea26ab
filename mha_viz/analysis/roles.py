"""Head-role scores (docs/analyses.md, "Where attention goes"; Olsson et al. 2022,
TransformerLens head_detector, the ARENA course).

All score functions take attentions [..., T, T] (normally [L, H, T, T]) or an AttentionTrace,
or a list of them (several texts), and return the leading shape ([L, H]); with a list, the
mean over inputs. Layers and heads are numbered from 0. Nothing here assumes a causal map.

Options shared by the scores computed on a text (previous, next, duplicate token and the
shifted-duplicate induction score):

- ``exclude``: bool [T], True = leave that position out (one mask per input, or one for
  all); ``drop_special=True`` leaves out the trace's special tokens (trace.special_mask:
  [CLS], [SEP], <|endoftext|>, ...). Left-out positions are removed as queries and as keys
  and every remaining row is renormalised to sum to 1 (special.drop_positions); "previous"
  and "next" then mean the previous / next position that is kept. A row whose whole mass
  was on left-out keys stays all 0 (it counts 0 towards the score).
- every input, maps held whole or rebuilt on demand, is read a block of query rows at a
  time (mha_viz.streaming), the left-out positions removed from each block as
  drop_positions removes them from the whole maps.
- ``normalization``: "ours" (the default) averages over the query rows that have the key
  in question; "transformer_lens" divides the summed mass by all T query rows, as
  TransformerLens's ``detect_head`` does with ``error_measure="mul"`` (score =
  sum(A * P) / sum(A), P the 0/1 detection pattern, sum(A) = T since rows sum to 1). Each
  function's docstring gives the exact relation. (TransformerLens's own ``exclude_bos``
  is another operation: it zeroes column 0 and divides by the mass left, without
  renormalising rows or removing the BOS row.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..streaming import MapsSource, RowBlock, TraceSource, fold_maps
from ._inputs import RowsDone, as_array, as_arrays, as_inputs, check_mask, is_many, per_input
from .entropy import RowEntropy, mean_over_rows
from .heads import head_name
from .special import drop_positions, kept_block
from .token_classes import ClassMass

__all__ = ["previous_token_scores", "next_token_scores", "duplicate_token_scores",
           "induction_pattern_scores", "induction_scores", "shifted_duplicate_scores",
           "repeated_random_tokens", "induction_probe", "InductionProbe", "probe_description",
           "role_scores", "role_support", "strongest_roles", "HeadRole", "NORMALIZATIONS",
           "TextScores", "TEXT_SCORE_KEYS", "roles_of",
           "ROLE_KEYS", "PATTERN_ROLES", "SINK_ROLES", "ROLE_THRESHOLD", "BROAD_THRESHOLD",
           "FOCUSED_THRESHOLD"]

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
    if hasattr(item, "row_blocks"):
        return TraceSource(item), tuple(item.maps_shape[:2])
    maps, lead = fold_maps(as_array(item))
    # nothing here assumes a causal map: every key of every row is read
    return MapsSource(maps, False), lead


def _prepared(attentions, token_ids=None, exclude=None, drop_special: bool = False,
              ids_needed: bool = False, what: str = "this score") -> list[_Prepared]:
    """One _Prepared per input; the left-out positions are removed from each block of rows
    as it is read (rows renormalised, as drop_positions does to whole maps)."""
    as_inputs(attentions)  # checks them: traces or maps [..., T, T] of one layer/head shape
    items = list(attentions) if is_many(attentions) else [attentions]
    ids_list = per_input(attentions, token_ids)
    exclude_list = per_input(attentions, exclude)
    out = []
    for item, ids, excluded in zip(items, ids_list, exclude_list):
        source, lead = _source_and_lead(item)
        n = source.n_tokens
        if ids is None:
            ids = getattr(item, "token_ids", None)
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
            special = getattr(item, "special_mask", None)
            if special is None:
                raise InputError("drop_special needs a trace (it reads trace.special_mask); "
                                 "for plain arrays pass exclude= a bool mask [T]")
            drop |= check_mask(special, n, name="special_mask")
        kept = None
        if drop.any():
            if drop.all():
                raise InputError("every position is left out: nothing remains to score")
            kept = np.flatnonzero(~drop)
            if ids is not None:
                ids = ids[kept]
        out.append(_Prepared(source, lead, ids, kept,
                             item if hasattr(item, "row_blocks") else None))
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
    the text), an accumulator (mha_viz.streaming) over blocks of query rows of its maps with
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
        """(local rows, keys, each row's first entry) of the pattern `key` in rows
        start..stop-1 and keys < width, row-major; and which of the rows have a pattern."""
        found = self._entries.get((key, start, stop, width))
        if found is not None:
            return found
        if key == "induction (text)":
            # The duplicate pattern moved one key right (j + 1 <= i: always inside).
            local, keys, firsts, queries = self.entries("duplicate token", start, stop, width)
            found = local, keys + 1, firsts, queries
        else:
            pattern = _duplicate_mask(self.ids, key == "duplicate token (any)", start, stop)
            # Keys past the block's width hold 0: only the pattern's entries inside it count.
            local, keys = (i.astype(np.int32) for i in np.nonzero(pattern[:, :width]))
            firsts = np.flatnonzero(np.r_[True, local[1:] != local[:-1]]) if local.size \
                else local
            found = local, keys, firsts, pattern.any(axis=1)
        if self._cached + found[0].size <= _CACHED_ENTRIES:
            self._entries[key, start, stop, width] = found
            self._cached += found[0].size
        return found

    in_place = False

    def update(self, block) -> None:
        """A RowBlock of the kept positions' rows."""
        self.add(block.layer, block.start, block.stop, block.rows)

    def merge(self, other: "TextScores") -> "TextScores":
        for key in self.wanted:
            self.sums[key] += other.sums[key]
            if key in self.queries:
                self.queries[key] |= other.queries[key]
        return self

    def add(self, layer: int, start: int, stop: int, block: np.ndarray) -> None:
        width = block.shape[-1]
        rows = np.arange(start, stop)
        for key in self.wanted:
            if key in _DIAGONAL_KEYS:
                keys = rows - _DIAGONAL_KEYS[key]
                inside = (keys >= 0) & (keys < min(width, self.n))
                picked = block[:, rows[inside] - start, keys[inside]]
                self.sums[key][layer] += picked.sum(axis=-1, dtype=np.float64)
                continue
            local, keys, firsts, queries = self.entries(key, start, stop, width)
            self.queries[key][start:stop] = queries
            if not local.size:
                continue
            values = block[:, local, keys].astype(np.float64)  # [H, entries], row-major
            mass = np.add.reduceat(values, firsts, axis=-1)  # [H, rows with an entry]
            self.sums[key][layer] += mass.sum(axis=-1)

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
    under "mass"); with entropy_rows, the normalised entropy of the maps after leaving out
    (under "entropy")."""
    source = prepared.source
    fold = (source.n_layers, source.n_heads)
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
    exclude: bool [T] of positions to leave out (rows renormalised, see the module
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


def _special_ids(tokenizer) -> set[int]:
    ids = getattr(tokenizer, "all_special_ids", None) or []
    return {int(i) for i in ids if i is not None}


def repeated_random_tokens(model, seq_len: int = 50, n_seqs: int = 10, seed: int = 0,
                           prepend_bos: bool = True) -> tuple[list[list[int]], int]:
    """The inputs of the repeated-random-tokens probe: (one id list per sequence, the number
    of prefix tokens before R R). See induction_scores for how they are drawn."""
    seq_len = _check_int(seq_len, "seq_len", 2)
    n_seqs = _check_int(n_seqs, "n_seqs", 1)
    seed = _check_int(seed, "seed", 0)
    info, tokenizer = model.info, model.tokenizer
    # A bidirectional model reads [CLS] R R [SEP]; a causal one BOS R R.
    causal = bool(getattr(info, "causal", str(getattr(info, "arch", "")).lower() != "bert"))
    vocab_size = int(info.vocab_size)
    prefix, suffix = [], []
    if prepend_bos:
        if not causal:
            cls_id = getattr(tokenizer, "cls_token_id", None)
            sep_id = getattr(tokenizer, "sep_token_id", None)
            if cls_id is None or sep_id is None:
                raise InputError("this BERT tokenizer has no [CLS]/[SEP] ids; "
                                 "call induction_scores with prepend_bos=False")
            prefix, suffix = [int(cls_id)], [int(sep_id)]
        else:
            bos_id = getattr(tokenizer, "bos_token_id", None)
            if bos_id is None:
                bos_id = getattr(tokenizer, "eos_token_id", None)
            if bos_id is None:
                raise InputError("this tokenizer has no BOS or EOS token; "
                                 "call induction_scores with prepend_bos=False")
            prefix = [int(bos_id)]
    extra = len(prefix) + len(suffix)
    max_positions = getattr(info, "max_positions", None)
    if max_positions is not None and 2 * seq_len + extra > int(max_positions):
        largest = (int(max_positions) - extra) // 2
        raise InputError(f"seq_len = {seq_len} needs {2 * seq_len + extra} positions but the "
                         f"model's context is {max_positions}; use seq_len <= {largest}")
    candidates = np.setdiff1d(np.arange(vocab_size), np.fromiter(_special_ids(tokenizer), int))
    if candidates.size < seq_len:
        raise InputError(f"only {candidates.size} non-special token ids to draw {seq_len} "
                         f"distinct ones from; use a smaller seq_len")
    rng = np.random.default_rng(seed)
    sequences = []
    for _ in range(n_seqs):
        repeated = rng.choice(candidates, size=seq_len, replace=False).tolist()
        sequences.append([int(i) for i in prefix + repeated + repeated + suffix])
    return sequences, len(prefix)


def probe_description(seq_len: int, n_seqs: int, seed: int) -> str:
    """How the probe is named on pages and in role tables."""
    return (f"repeated random tokens, seq_len {seq_len}, seed {seed}, "
            f"{n_seqs} sequence{'s' if n_seqs != 1 else ''}")


@dataclass(frozen=True)
class InductionProbe:
    """The repeated-random-tokens probe, run once, scored every way.

    scores(normalization, drop_special) -> [L, H]: the mean over the sequences of
    induction_pattern_scores (drop_special leaves out the prefix BOS / [CLS] and the suffix
    [SEP], rows renormalised). ``trace`` is the first sequence's trace (to look at one
    head's map on the probe), ``ids`` every sequence's token ids.
    """

    seq_len: int
    n_seqs: int
    seed: int
    offset: int  # prefix tokens before R R (1 with a BOS / [CLS], else 0)
    ids: list[list[int]]
    trace: object  # AttentionTrace of the first sequence
    causal: bool = True
    _scores: dict = field(repr=False, default_factory=dict)

    def scores(self, normalization: str = "ours", drop_special: bool = False) -> np.ndarray:
        _check_normalization(normalization)
        return self._scores[(normalization, bool(drop_special))]

    def keep_mask(self, drop_special: bool = True) -> np.ndarray:
        """bool [T] of the probe's input: False for the prefix and suffix (BOS, [CLS], [SEP])
        when drop_special, else all True."""
        keep = np.ones(len(self.ids[0]), dtype=bool)
        if drop_special:
            keep[:self.offset] = False
            keep[self.offset + 2 * self.seq_len:] = False
        return keep

    def uniform_score(self, normalization: str = "ours", drop_special: bool = False) -> float:
        """The score uniform attention over the visible keys would get on this probe (the
        floor to compare with: about 1 / position for a causal model, 1 / T otherwise)."""
        n = len(self.ids[0])
        visible = np.tril(np.ones((n, n))) if self.causal else np.ones((n, n))
        uniform = visible / visible.sum(axis=1, keepdims=True)
        return float(induction_pattern_scores(
            uniform, self.seq_len, self.offset, normalization=normalization,
            exclude=~self.keep_mask(drop_special)))

    @property
    def description(self) -> str:
        return probe_description(self.seq_len, self.n_seqs, self.seed)


def induction_probe(model, seq_len: int = 50, n_seqs: int = 10, seed: int = 0,
                    prepend_bos: bool = True, progress=None) -> InductionProbe:
    """Run the repeated-random-tokens probe (see induction_scores) and keep its scores in
    both normalisations, with and without the prefix / suffix tokens, and the first
    sequence's trace. progress(done, total), if given, is called after each sequence."""
    sequences, offset = repeated_random_tokens(model, seq_len, n_seqs, seed, prepend_bos)
    seq_len, n_seqs, seed = int(seq_len), int(n_seqs), int(seed)
    variants = [(norm, drop) for norm in NORMALIZATIONS for drop in (False, True)]
    sums = {v: None for v in variants}
    first = None
    for done, ids in enumerate(sequences, start=1):
        trace = model.trace_ids(ids)
        if first is None:
            first = trace
        outside = np.ones(len(ids), dtype=bool)
        outside[offset:offset + 2 * seq_len] = False
        for norm, drop in variants:
            score = induction_pattern_scores(trace.attentions, seq_len, offset=offset,
                                             exclude=outside if drop else None,
                                             normalization=norm)
            sums[(norm, drop)] = score if sums[(norm, drop)] is None else \
                sums[(norm, drop)] + score
        if progress is not None:
            progress(done, n_seqs)
    scores = {v: total / n_seqs for v, total in sums.items()}
    return InductionProbe(seq_len, n_seqs, seed, offset, sequences, first,
                          bool(getattr(first, "causal", True)), scores)


def induction_scores(model, seq_len: int = 50, n_seqs: int = 10, seed: int = 0,
                     prepend_bos: bool = True, *, drop_special: bool = False,
                     normalization: str = "ours") -> np.ndarray:
    """Induction scores from the repeated-random-tokens probe (Olsson et al. 2022, ARENA).
    -> [L, H], the mean of induction_pattern_scores over ``n_seqs`` sequences.

    Each sequence: R = ``seq_len`` distinct token ids drawn (numpy default_rng(seed), without
    replacement, so every token's previous occurrence is unique) from the vocabulary
    [0, model.info.vocab_size) minus model.tokenizer.all_special_ids; the input is R R.
    With ``prepend_bos``: a causal model (GPT-2) gets a BOS first (tokenizer.bos_token_id,
    else eos_token_id: <|endoftext|> for GPT-2), a BERT model gets [CLS] R R [SEP]. The input
    must fit the context (2 * seq_len + 2 <= model.info.max_positions), else InputError.
    drop_special: leave the BOS / [CLS] / [SEP] out of the maps (rows renormalised).
    normalization: see induction_pattern_scores.

    model: anything with .info (arch, vocab_size, max_positions), .tokenizer and
        .trace_ids(list[int]) -> AttentionTrace.
    """
    _check_normalization(normalization)
    return induction_probe(model, seq_len, n_seqs, seed, prepend_bos).scores(
        normalization, drop_special)


# --------------------------------------------------------------------------- naming heads

# The [L, H] maps strongest_roles reads, by key (role_scores gives all but the probe's).
ROLE_KEYS = ("previous token", "next token", "duplicate token", "induction (probe)",
             "induction (text)", "first token", "[SEP]", "entropy")
PATTERN_ROLES = ("previous token", "next token", "duplicate token", "induction (probe)",
                 "induction (text)")
SINK_ROLES = ("first token", "[SEP]")
ROLE_THRESHOLD = 0.5  # a pattern or sink score at least this names the role
BROAD_THRESHOLD = 0.8  # normalised entropy at least this: "broad"
FOCUSED_THRESHOLD = 0.3  # normalised entropy at most this: "focused"
TEXT_PROBE = "the text"


def role_scores(trace, *, exclude=None, drop_special: bool = False,
                normalization: str = "ours", mass: dict | None = None,
                entropy_normalised: np.ndarray | None = None,
                progress=None) -> dict[str, np.ndarray]:
    """Every role score of one trace on its own text. -> {key: [L, H]}

    "previous token", "next token", "duplicate token", "induction (text)" (the shifted
    duplicate score): with ``exclude`` / ``drop_special`` and ``normalization`` as in those
    functions. "first token", "[SEP]": the attention mass on them (token_class_mass, the
    mean over all T rows), always on every token, whatever is left out (a sink is what
    leaving out would hide). "entropy": the normalised entropy (entropy(normalized=True),
    0 = one key, 1 = uniform) on the maps after leaving out. The probe's induction score
    ("induction (probe)") comes from induction_probe.

    mass / entropy_normalised: token_class_mass(trace) and the normalised entropy, when the
    caller has them already (corpus statistics compute each once per segment); the entropy
    is only reused when nothing is left out.

    Every score comes from one pass over the trace's blocks of query rows (left-out
    positions removed from each block as it is read); progress: optional callback(done,
    total) over those rows (it may raise to stop the computation).
    """
    _check_normalization(normalization)
    if is_many(trace) or not hasattr(trace, "token_ids"):
        raise InputError("role_scores takes one AttentionTrace")
    prepared, = _prepared(trace, exclude=exclude, drop_special=drop_special)
    renew_entropy = entropy_normalised is None or exclude is not None or drop_special
    # every score from one pass over the blocks of rows
    found = _streamed_scores(prepared, TEXT_SCORE_KEYS, normalization,
                             mass=mass is None, entropy_rows=renew_entropy,
                             done=RowsDone(progress, trace.n_layers * trace.n_tokens))
    return roles_of(found, found["mass"] if mass is None else mass,
                    found["entropy"] if renew_entropy else entropy_normalised, prepared.lead)


def roles_of(text: dict, mass: dict, entropy_normalised: np.ndarray, lead: tuple) -> dict:
    """role_scores' dict from its parts: TextScores' result (a pattern no row has counts
    0), token_class_mass and the normalised entropy."""
    def pattern(key):
        return _mean_or_zero([s for s in [text[key]] if s is not None], lead)
    return {
        "previous token": text["previous token"],
        "next token": text["next token"],
        "duplicate token": pattern("duplicate token"),
        "induction (text)": pattern("induction (text)"),
        "first token": mass["first token"],
        "[SEP]": mass["[SEP]"],
        "entropy": entropy_normalised,
    }


def role_support(trace, *, exclude=None, drop_special: bool = False) -> dict[str, int]:
    """How many query rows each text score of role_scores averages over ("ours"), after
    leaving positions out: {"rows": T kept, "previous token": T - 1, "next token": T - 1,
    "duplicate token": queries with an earlier occurrence of their token, "induction (text)":
    queries with a shifted-duplicate target (the same queries)}. A score resting on one or
    two queries says little."""
    prepared, = _prepared(trace, exclude=exclude, drop_special=drop_special,
                          ids_needed=True, what="role_support")
    n, ids = prepared.n, prepared.ids
    # A row has a duplicate (and so a shifted-duplicate target, j + 1 <= i) when its token
    # occurred before: counted in O(T), no [T, T] masks.
    _, first = np.unique(ids, return_index=True)
    repeated = n - len(first)
    return {"rows": n, "previous token": n - 1, "next token": n - 1,
            "duplicate token": repeated, "induction (text)": repeated}


@dataclass(frozen=True)
class HeadRole:
    """One head's strongest role (see strongest_roles)."""

    name: str  # "L3.H7"
    layer: int
    head: int
    role: str  # "previous token", "induction", "sink: first token", "broad", "mixed", ...
    score: float  # the score that named the role (for broad/focused/mixed: see strongest_roles)
    probe: str  # the input that gave the score: "the text", "repeated random tokens, ..."
    also: str = ""  # other roles at or above the threshold, "first token 0.81; ..."
    tier: int = 0  # 0 pattern role, 1 sink, 2 broad / focused, 3 mixed

    def as_dict(self) -> dict:
        return {"head": self.name, "layer": self.layer, "head index": self.head,
                "role": self.role, "score": self.score, "probe": self.probe,
                "also above threshold": self.also}


def _role_label(key: str, first_token_name: str) -> str:
    if key.startswith("induction"):
        return "induction"
    if key == "first token":
        return f"sink: {first_token_name}"
    if key == "[SEP]":
        return "sink: [SEP]"
    return key


def strongest_roles(scores, probes=None, *, threshold: float = ROLE_THRESHOLD,
                    broad_threshold: float = BROAD_THRESHOLD,
                    focused_threshold: float = FOCUSED_THRESHOLD,
                    first_token_name: str = "first token",
                    order: str = "strength") -> list[HeadRole]:
    """Name each head's strongest role. -> one HeadRole per head.

    scores: {key: [L, H]} with keys from ROLE_KEYS (any subset; role_scores gives all but
        "induction (probe)"; NaN scores are ignored). probes: {key: description of the input
        that gave it}; keys not given are "the text" (give "induction (probe)" its
        probe_description).
    The rule, in order:
    1. pattern roles (previous token, next token, duplicate token, induction on the probe,
       induction on the text): if any score >= ``threshold`` (0.5), the highest of them
       (both induction scores name the role "induction"; the probe column says which);
    2. else the sinks (mass on the first token / [CLS], on [SEP]): if any >= ``threshold``,
       the larger ("sink: first token", "sink: [SEP]");
    3. else by the normalised entropy e: "broad" when e >= ``broad_threshold`` (0.8, score e),
       "focused" when e <= ``focused_threshold`` (0.3, score 1 - e: focused on something
       none of the roles names), otherwise "mixed" (score e).
    Pattern roles come before sinks because a head that does its job where it can often
    rests on the sink elsewhere (an induction head on a text without repeats). ``also``
    lists the other pattern and sink scores >= threshold. The thresholds are meant for the
    "ours" normalisation: "transformer_lens" scores are smaller (divided by all rows).
    order: "strength" sorts by tier (pattern, sink, broad / focused, mixed), then by score,
        highest first; "head" keeps layer-major order (L0.H0, L0.H1, ...).
    first_token_name: "[CLS]" for BERT, "first token" otherwise (used in the role text).
    """
    if order not in ("strength", "head"):
        raise InputError(f"order must be 'strength' or 'head', got {order!r}")
    unknown = set(scores) - set(ROLE_KEYS)
    if unknown:
        raise InputError(f"unknown role keys {sorted(unknown)}; expected some of "
                         f"{', '.join(ROLE_KEYS)}")
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in scores.items()}
    if not arrays:
        raise InputError("strongest_roles needs at least one [L, H] score map")
    shapes = {a.shape for a in arrays.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise InputError(f"every score map must be the same [L, H] shape, got {shapes}")
    probes = dict(probes or {})
    n_layer, n_head = next(iter(shapes))
    rows = []
    for layer in range(n_layer):
        for head in range(n_head):
            values = {k: float(a[layer, head]) for k, a in arrays.items()
                      if np.isfinite(a[layer, head])}
            passed = {k: v for k, v in values.items()
                      if k in PATTERN_ROLES + SINK_ROLES and v >= threshold}
            chosen, tier = None, 3
            for tier_index, group in enumerate((PATTERN_ROLES, SINK_ROLES)):
                candidates = [k for k in group if k in passed]
                if candidates:
                    # highest score; ties go to the earlier key in the group
                    chosen = max(candidates, key=lambda k: (passed[k], -group.index(k)))
                    tier = tier_index
                    break
            if chosen is not None:
                role, score = _role_label(chosen, first_token_name), passed[chosen]
                probe = probes.get(chosen, TEXT_PROBE)
            else:
                e = values.get("entropy")
                probe = probes.get("entropy", TEXT_PROBE)
                if e is None:
                    role, score, tier = "mixed", float("nan"), 3
                elif e >= broad_threshold:
                    role, score, tier = "broad", e, 2
                elif e <= focused_threshold:
                    role, score, tier = "focused", 1.0 - e, 2
                else:
                    role, score, tier = "mixed", e, 3
            also = "; ".join(f"{_role_label(k, first_token_name)} {v:.2f}"
                             + (" (probe)" if k == "induction (probe)" else
                                " (text)" if k == "induction (text)" else "")
                             for k, v in sorted(passed.items(), key=lambda kv: -kv[1])
                             if k != chosen)
            rows.append(HeadRole(head_name(layer, head), layer, head, role, score, probe,
                                 also, tier))
    if order == "strength":
        rows.sort(key=lambda r: (r.tier, -r.score if np.isfinite(r.score) else np.inf,
                                 r.layer, r.head))
    return rows
