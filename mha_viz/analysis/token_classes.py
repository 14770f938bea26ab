"""Attention mass on classes of keys (docs/analyses.md, "Where attention goes"; Clark et al. 2019).

For one head with map A over n tokens and a key set S(i) per query i:

    a(S) = (1/n) sum_i sum_{j in S(i)} A_ij

i.e. the mean over all n query rows of the mass the row puts on S(i). Rows for which S(i) is
empty contribute 0 (so "previous" counts row 0 as 0 and "next" counts the last row as 0; the
head-role scores in roles.py instead average over the rows that have such a key).

Every trace is read a block of query rows at a time (mha_viz.maps.streaming; the accumulator
ClassMass): the column sums and the diagonals are added up over the blocks.

The "[CLS]" and "[SEP]" classes (named as Clark et al. name them) are the positions holding
the tokenizer's own classification and separator tokens, as the trace records them
(trace.special_tokens["cls"], ["sep"]): BERT's [CLS] and [SEP], RoBERTa's <s> and </s>; none
for a tokenizer without them (GPT-2, Llama).
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np

from ..core.arrays import RowsDone, is_many, thread_map
from ..core.errors import InputError
from ..maps.streaming import accumulate, source_of
from ..maps.trace import AttentionTrace

__all__ = ["TOKEN_CLASSES", "CLS_CLASS", "SEP_CLASS", "token_class_mass", "token_class_masks",
           "is_punctuation", "strip_token_markers", "entropy_and_mass", "ClassMass"]

# The classes of the tokenizer's classification and separator tokens, by their names in the
# results (the tokens themselves are the trace's: special_tokens["cls"], ["sep"])
CLS_CLASS, SEP_CLASS = "[CLS]", "[SEP]"
TOKEN_CLASSES = (CLS_CLASS, SEP_CLASS, "punctuation", "first token", "self", "previous", "next")
# the class of a special token, by its role in the tokenizer
_ROLE_CLASSES = {"cls": CLS_CLASS, "sep": SEP_CLASS}

# Word-boundary / continuation markers of the tokenizers we meet: GPT-2 byte-level ("Ġ" for a
# leading space), SentencePiece ("▁"), our display tokens ("␣" for a space), WordPiece ("##").
_MARKER_CHARS = ("Ġ", "▁", "␣")


def strip_token_markers(token: str) -> str:
    """The token's text without "Ġ" / "▁" / "␣" markers, a leading "##", and whitespace."""
    text = str(token)
    for marker in _MARKER_CHARS:
        text = text.replace(marker, "")
    if text.startswith("##") and len(text) > 2:
        text = text[2:]
    return text.strip()


@functools.lru_cache(maxsize=1 << 16)
def is_punctuation(token: str) -> bool:
    """True when the stripped token is non-empty and every character is unicode punctuation
    (general category P*: . , ; : ! ? ' " ( ) - ... but not symbols such as $ + =). Kept per
    token: a corpus asks again for every segment (a vocabulary's worth at most)."""
    text = strip_token_markers(token)
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def token_class_masks(trace) -> dict[str, np.ndarray]:
    """bool [T, T] per class: entry [i, j] says key j is in S(i) for query i."""
    keys = _key_sets(trace)
    n = len(keys["first token"])
    every_row = np.ones((n, 1), dtype=bool)
    return {
        **{name: every_row & found[None, :] for name, found in keys.items()},
        "self": np.eye(n, dtype=bool),
        "previous": np.eye(n, k=-1, dtype=bool),
        "next": np.eye(n, k=1, dtype=bool),
    }


def _key_sets(trace) -> dict[str, np.ndarray]:
    """bool [T] per class whose key set is the same for every query (every class but the
    diagonals self, previous and next), in TOKEN_CLASSES' order. Built without the [T, T]
    masks: a corpus builds these for every segment."""
    tokens = list(trace.tokens)
    n = len(tokens)
    display = list(getattr(trace, "display_tokens", None) or tokens)
    if len(display) != n:
        raise InputError(f"display_tokens has {len(display)} entries, tokens {n}")
    if n == 0:
        raise InputError("the trace has no tokens")
    specials = getattr(trace, "special_tokens", None) or {}
    role_keys = {name: np.array([specials.get(role) == t for t in tokens], dtype=bool)
                 for role, name in _ROLE_CLASSES.items()}
    punct_keys = np.array([is_punctuation(d) or is_punctuation(t)
                           for d, t in zip(display, tokens)], dtype=bool)
    first_keys = np.zeros(n, dtype=bool)
    first_keys[0] = True
    return {**role_keys, "punctuation": punct_keys, "first token": first_keys}


def _check_trace(trace, n: int) -> None:
    if len(trace.tokens) != n:
        raise InputError(f"the trace has {len(trace.tokens)} tokens but maps of size {n}")


class ClassMass:
    """token_class_mass of one input, an accumulator (mha_viz.maps.streaming): the mass each key
    receives (column sums) and the self / previous / next diagonals, added up over blocks of
    query rows; merge() adds another accumulator's sums (shards of rows, in any order).
    Memory O(L H T). It only reads the blocks."""

    in_place = False
    summary_parts = ("received", "diagonals")  # read from a block's summary when it has one

    def __init__(self, trace, n_layer: int, n_head: int, n_tokens: int):
        self.n = n_tokens
        _check_trace(trace, self.n)
        self.key_sets = _key_sets(trace)
        self.received = np.zeros((n_layer, n_head, self.n), dtype=np.float64)
        self.diagonals = {name: np.zeros((n_layer, n_head), dtype=np.float64)
                          for name, _ in _DIAGONALS}

    @classmethod
    def for_source(cls, trace, source) -> "ClassMass":
        return cls(trace, source.n_layer, source.n_head, source.n_tokens)

    def update(self, block) -> None:
        rows, start, stop, width = block.rows, block.start, block.stop, block.width
        summary = block.summary
        if summary is not None and summary.received is not None:  # measured with the batch
            sums = summary.received
        elif rows.size >= _THREADED_ELEMENTS:  # a long input's block: a thread per head
            sums = np.stack(thread_map(lambda h: rows[h].sum(axis=0, dtype=np.float64),
                                       range(rows.shape[0])))
        else:  # a short one: one call (a pool of threads would cost more than the sums)
            sums = rows.sum(axis=1, dtype=np.float64)
        self.received[block.layer, :, :width] += sums
        if summary is not None and summary.diagonals is not None:
            for name, offset in _DIAGONALS:
                self.diagonals[name][block.layer] += summary.diagonals[offset]
            return
        index = np.arange(start, stop)
        for name, offset in _DIAGONALS:
            keys = index + offset
            inside = (keys >= 0) & (keys < width)  # keys past the block's width hold 0
            picked = rows[:, index[inside] - start, keys[inside]]
            self.diagonals[name][block.layer] += picked.sum(axis=-1, dtype=np.float64)

    def merge(self, other: "ClassMass") -> "ClassMass":
        self.received += other.received
        for name in self.diagonals:
            self.diagonals[name] += other.diagonals[name]
        return self

    def result(self) -> dict[str, np.ndarray]:
        n = self.n
        result = {name: self.received[..., keys].sum(axis=-1) / n
                  for name, keys in self.key_sets.items()}
        for name, _ in _DIAGONALS:
            result[name] = self.diagonals[name] / n
        return result


_DIAGONALS = (("self", 0), ("previous", -1), ("next", 1))
_THREADED_ELEMENTS = 1 << 22


def _source_of_trace(trace):
    """A trace's rows, as the trace gives them (held or computed)."""
    if not isinstance(trace, AttentionTrace):
        raise InputError("token_class_mass needs an AttentionTrace (tokens and attentions), "
                         f"got {type(trace).__name__}")
    return source_of(trace)


def token_class_mass(trace, progress=None) -> dict[str, np.ndarray]:
    """Mass a(S) = (1/n) sum_i sum_{j in S(i)} A_ij per head for each class. -> {name: [L, H]}

    Keys (TOKEN_CLASSES): "[CLS]", "[SEP]" (positions holding the tokenizer's classification
    / separator token, trace.special_tokens["cls"] / ["sep"]; all zero for GPT-2),
    "punctuation" (display token or token, markers "Ġ", "##", "▁", "␣" and whitespace
    stripped, non-empty and all unicode category P*), "first token"
    (position 0: [CLS] for BERT, the attention sink for GPT-2), "self" (j = i), "previous"
    (j = i - 1) and "next" (j = i + 1).

    trace: an AttentionTrace, or a list of traces (the mean over them), read a block of
        query rows at a time (column sums and diagonals added up over the blocks).
    progress: optional callback(done, total) over the query rows read; it may raise to stop
        the computation.
    """
    traces = list(trace) if is_many(trace) else [trace]
    if not traces:
        raise InputError("token_class_mass: an empty list was given; pass at least one trace")
    sources = [_source_of_trace(t) for t in traces]
    done = RowsDone(progress, sum(s.n_layer * s.n_tokens for s in sources))
    results = []
    for one, source in zip(traces, sources):
        mass = ClassMass.for_source(one, source)
        accumulate(source, [mass], done)
        results.append(mass.result())
    shapes = {r["self"].shape for r in results}
    if len(shapes) > 1:
        raise InputError(f"token_class_mass: traces have different layer/head shapes {shapes}")
    return {name: np.mean([r[name] for r in results], axis=0) for name in TOKEN_CLASSES}


def entropy_and_mass(trace, smoothing: float = 0.0, progress=None) -> dict[str, object]:
    """Every head's entropy, raw and normalized, and token_class_mass, from ONE pass over a
    long input's on-demand maps (each statistic alone would compute every map again): every
    number of the Entropy page, which itself reads its folded sections only when opened.
    -> {"entropy": [L, H] nats, "normalized": [L, H], "mass": {class: [L, H]}, "distance":
    [L, H] tokens}, equal to entropy(trace, smoothing=...), entropy(trace, normalized=True,
    smoothing=...), token_class_mass(trace) and mean_attention_distance(trace). progress:
    callback(done, total) over query rows (may raise to stop)."""
    from .distance import AttentionDistance
    from .entropy import RowEntropy, _check_smoothing, mean_over_rows

    smoothing = _check_smoothing(smoothing)
    source = _source_of_trace(trace)
    mass = ClassMass.for_source(trace, source)
    rows = RowEntropy.for_source(source, smoothing=smoothing)
    distance = AttentionDistance(source.n_layer, source.n_head)
    # one pass: the mass and the distance read each block, then the entropy works in it
    accumulate(source, [mass, distance, rows],
               RowsDone(progress, source.n_layer * source.n_tokens))
    return {"entropy": mean_over_rows(rows.result(False)),
            "normalized": mean_over_rows(rows.result(True)), "mass": mass.result(),
            "distance": distance.result()}


def window_mass(rows: np.ndarray, start: int, stop: int) -> tuple[float, float]:
    """Of query rows [R, T] (a window of a long input's rows start..stop), the mean share of
    attention on keys inside the window, and the mean share on the first token."""
    rows = np.asarray(rows, dtype=np.float64)
    if rows.ndim != 2 or not 0 <= start < stop <= rows.shape[1]:
        raise InputError(f"rows must be [R, T] with 0 <= start < stop <= T, got {rows.shape}, "
                         f"{start}..{stop}")
    return float(rows[:, start:stop].sum(axis=1).mean()), float(rows[:, 0].mean())
