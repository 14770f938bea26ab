"""Attention mass on classes of keys (ANALYSES.md section 3; Clark et al. 2019).

For one head with map A over n tokens and a key set S(i) per query i:

    a(S) = (1/n) sum_i sum_{j in S(i)} A_ij

i.e. the mean over all n query rows of the mass the row puts on S(i). Rows for which S(i) is
empty contribute 0 (so "previous" counts row 0 as 0 and "next" counts the last row as 0; the
head-role scores in roles.py instead average over the rows that have such a key).

An on-demand trace is read a block of query rows at a time (MassStream): the column sums
and the diagonals are added up over the blocks.
"""

from __future__ import annotations

import unicodedata

import numpy as np

from ..errors import InputError
from ._inputs import (RowsDone, as_array, causal_width, is_many, is_on_demand, streamed_rows,
                      thread_map)

__all__ = ["TOKEN_CLASSES", "token_class_mass", "token_class_masks", "is_punctuation",
           "strip_token_markers", "entropy_and_mass"]

TOKEN_CLASSES = ("[CLS]", "[SEP]", "punctuation", "first token", "self", "previous", "next")

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


def is_punctuation(token: str) -> bool:
    """True when the stripped token is non-empty and every character is unicode punctuation
    (general category P*: . , ; : ! ? ' " ( ) - ... but not symbols such as $ + =)."""
    text = strip_token_markers(token)
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def token_class_masks(trace) -> dict[str, np.ndarray]:
    """bool [T, T] per class: entry [i, j] says key j is in S(i) for query i."""
    tokens = list(trace.tokens)
    n = len(tokens)
    display = list(getattr(trace, "display_tokens", None) or tokens)
    if len(display) != n:
        raise InputError(f"display_tokens has {len(display)} entries, tokens {n}")
    if n == 0:
        raise InputError("the trace has no tokens")
    cls_keys = np.array([t == "[CLS]" for t in tokens])
    sep_keys = np.array([t == "[SEP]" for t in tokens])
    punct_keys = np.array([is_punctuation(d) or is_punctuation(t)
                           for d, t in zip(display, tokens)])
    first_keys = np.zeros(n, dtype=bool)
    first_keys[0] = True
    every_row = np.ones((n, 1), dtype=bool)
    return {
        "[CLS]": every_row & cls_keys[None, :],
        "[SEP]": every_row & sep_keys[None, :],
        "punctuation": every_row & punct_keys[None, :],
        "first token": every_row & first_keys[None, :],
        "self": np.eye(n, dtype=bool),
        "previous": np.eye(n, k=-1, dtype=bool),
        "next": np.eye(n, k=1, dtype=bool),
    }


def _key_sets(trace) -> dict[str, np.ndarray]:
    """bool [T] per class whose key set is the same for every query."""
    masks = token_class_masks(trace)
    return {name: masks[name][0] for name in ("[CLS]", "[SEP]", "punctuation", "first token")}


def _check_trace(trace, n: int) -> None:
    if len(trace.tokens) != n:
        raise InputError(f"the trace has {len(trace.tokens)} tokens but maps of size {n}")


def _mass_one(trace, done: RowsDone) -> dict[str, np.ndarray]:
    if not hasattr(trace, "tokens"):
        raise InputError("token_class_mass needs an AttentionTrace (tokens and attentions), "
                         f"got {type(trace).__name__}")
    if is_on_demand(trace):
        stream = MassStream(trace)
        for layer, start, stop, block in trace.row_blocks():
            stream.add(layer, start, stop,
                       block[..., :causal_width(stop, stream.n)] if trace.causal else block)
            done(stop - start)
        return stream.result()
    attentions = as_array(trace, min_ndim=2)
    n = attentions.shape[-1]
    _check_trace(trace, n)
    # Classes with fixed keys: sum_i sum_{j in S} A_ij = sum_{j in S} (column sum j).
    received = attentions.sum(axis=-2, dtype=np.float64)  # [..., T] mass each key receives
    result = {name: received[..., keys].sum(axis=-1) / n
              for name, keys in _key_sets(trace).items()}
    # Classes relative to the query: sums along a diagonal.
    for name, offset in _DIAGONALS:
        diagonal = np.diagonal(attentions, offset=offset, axis1=-2, axis2=-1)
        result[name] = diagonal.sum(axis=-1, dtype=np.float64) / n
    return result


_DIAGONALS = (("self", 0), ("previous", -1), ("next", 1))


class MassStream:
    """token_class_mass of an on-demand trace, a block of query rows at a time: the column
    sums and the diagonals of _mass_one accumulated over the blocks (memory O(L H T)).
    add() takes blocks [H, r, K] of rows start..stop-1 (K may stop short of T where the keys
    left out are all 0) and does not change them."""

    def __init__(self, trace):
        n_layers, n_heads, self.n, _ = trace.maps_shape
        _check_trace(trace, self.n)
        self.key_sets = _key_sets(trace)
        self.received = np.zeros((n_layers, n_heads, self.n), dtype=np.float64)
        self.diagonals = {name: np.zeros((n_layers, n_heads), dtype=np.float64)
                          for name, _ in _DIAGONALS}

    def add(self, layer: int, start: int, stop: int, block: np.ndarray) -> None:
        width = block.shape[-1]
        sums = thread_map(lambda h: block[h].sum(axis=0, dtype=np.float64),
                          range(block.shape[0]))
        self.received[layer, :, :width] += np.stack(sums)
        rows = np.arange(start, stop)
        for name, offset in _DIAGONALS:
            keys = rows + offset
            inside = (keys >= 0) & (keys < width)  # keys past the block's width hold 0
            picked = block[:, rows[inside] - start, keys[inside]]
            self.diagonals[name][layer] += picked.sum(axis=-1, dtype=np.float64)

    def result(self) -> dict[str, np.ndarray]:
        n = self.n
        result = {name: self.received[..., keys].sum(axis=-1) / n
                  for name, keys in self.key_sets.items()}
        for name, _ in _DIAGONALS:
            result[name] = self.diagonals[name] / n
        return result


def token_class_mass(trace, progress=None) -> dict[str, np.ndarray]:
    """Mass a(S) = (1/n) sum_i sum_{j in S(i)} A_ij per head for each class. -> {name: [L, H]}

    Keys (TOKEN_CLASSES): "[CLS]", "[SEP]" (positions whose token is literally "[CLS]" /
    "[SEP]"; all zero for GPT-2), "punctuation" (display token or token, markers "Ġ", "##",
    "▁", "␣" and whitespace stripped, non-empty and all unicode category P*), "first token"
    (position 0: [CLS] for BERT, the attention sink for GPT-2), "self" (j = i), "previous"
    (j = i - 1) and "next" (j = i + 1).

    trace: an AttentionTrace, or a list of traces (the mean over them). An on-demand trace
        (a long input) is streamed a block of query rows at a time (column sums and
        diagonals added up over the blocks), with the same numbers.
    progress: optional callback(done, total) over the query rows of on-demand traces; it
        may raise to stop the computation.
    """
    traces = list(trace) if is_many(trace) else [trace]
    if not traces:
        raise InputError("token_class_mass: an empty list was given; pass at least one trace")
    done = RowsDone(progress, streamed_rows(traces))
    results = [_mass_one(t, done) for t in traces]
    shapes = {r["self"].shape for r in results}
    if len(shapes) > 1:
        raise InputError(f"token_class_mass: traces have different layer/head shapes {shapes}")
    return {name: np.mean([r[name] for r in results], axis=0) for name in TOKEN_CLASSES}


def entropy_and_mass(trace, smoothing: float = 0.0, progress=None) -> dict[str, object]:
    """Every head's entropy, raw and normalised, and token_class_mass, from ONE pass over a
    long input's on-demand maps (each statistic alone would compute every map again): the
    Entropy page's numbers. -> {"entropy": [L, H] nats, "normalised": [L, H], "mass":
    {class: [L, H]}}, equal to entropy(trace, smoothing=...), entropy(trace,
    normalized=True, smoothing=...) and token_class_mass(trace). A full trace gives them
    the ordinary way. progress: callback(done, total) over query rows (may raise to stop)."""
    from .entropy import RowEntropyStream, _check_smoothing, entropy, mean_over_rows

    smoothing = _check_smoothing(smoothing)
    if not is_on_demand(trace):
        return {"entropy": entropy(trace, smoothing=smoothing),
                "normalised": entropy(trace, normalized=True, smoothing=smoothing),
                "mass": token_class_mass(trace)}
    n_layers, n_heads, n, _ = trace.maps_shape
    mass = MassStream(trace)
    rows = RowEntropyStream(n_layers, n_heads, n, trace.causal, smoothing)
    done = RowsDone(progress, streamed_rows([trace]))
    for layer, start, stop, block in trace.row_blocks():
        if trace.causal:  # the keys after a causal block's last row are exact zeros
            block = block[..., :causal_width(stop, n)]
        mass.add(layer, start, stop, block)  # reads the block; the entropy then works in it
        rows.add(layer, start, stop, block)
        done(stop - start)
    return {"entropy": mean_over_rows(rows.result(False)),
            "normalised": mean_over_rows(rows.result(True)), "mass": mass.result()}
