"""Mean attention distance (docs/analyses.md, "Entropy"): how far a head looks. For query i,
d_i = sum_j a_ij |i - j|, the expected distance in tokens between a query and the key it reads;
a head's distance is the mean of d_i over its query rows (Dosovitskiy et al. 2021 measure ViT's
heads this way; Vig & Belinkov 2019 GPT-2's). Local heads (previous token, self) score near 1
or 0; heads that read the start of a long text score high.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import InputError
from ..maps.streaming import accumulate, keys_of, source_of


class AttentionDistance:
    """An accumulator (mha_viz.maps.streaming) of sum_i d_i per head and the rows read per
    layer: update() reads a block of rows, merge() adds another's sums, result() gives the
    mean [L, H]."""

    in_place = False

    def __init__(self, n_layer: int, n_head: int):
        self.sums = np.zeros((n_layer, n_head))
        self.rows = np.zeros(n_layer)

    def update(self, block) -> None:
        queries = np.arange(block.start, block.stop)
        distance = np.abs(np.arange(block.width)[None, :] - queries[:, None]).astype(
            block.rows.dtype)
        # [H, r, w] . [r, w] in the block's own precision (no copy of a long input's rows)
        self.sums[block.layer] += np.tensordot(block.rows, distance, axes=([1, 2], [0, 1]))
        self.rows[block.layer] += block.stop - block.start

    def merge(self, other: "AttentionDistance") -> "AttentionDistance":
        self.sums += other.sums
        self.rows += other.rows
        return self

    def result(self) -> np.ndarray:
        if not self.rows.all():
            raise InputError("attention distances were asked for before every layer was read")
        return self.sums / self.rows[:, None]


def mean_attention_distance(maps) -> np.ndarray:
    """[L, H]: each head's mean attention distance in tokens, from maps [L, H, T, T], a
    trace (whole or on demand: its rows are streamed) or a source. Square maps only: the
    distance between a target and a source position (cross-attention) means nothing."""
    source = source_of(maps)
    if keys_of(source) != source.n_tokens:
        raise InputError("attention distance needs square maps (queries and keys in one "
                         "sequence); cross-attention's rows run over another sequence")
    found = AttentionDistance(source.n_layer, source.n_head)
    accumulate(source, [found])
    return found.result()


def uniform_attention_distance(n_tokens: int, causal: bool) -> float:
    """The mean attention distance of a head that spreads every row evenly over the keys it
    sees: (1/T) sum_i mean_j |i - j|, over j <= i for a causal model."""
    n = int(n_tokens)
    if n < 1:
        raise InputError("no tokens")
    i = np.arange(n)
    if causal:
        return float(np.mean(i / 2.0))  # mean of 0..i is i / 2
    return float(np.mean((i * (i + 1) / 2 + (n - 1 - i) * (n - i) / 2) / n))
