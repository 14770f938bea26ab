"""Cross-attention read as a word alignment (docs/analyses.md, "Encoder-decoders"): where
each target position of an encoder-decoder looks in the source.

In a trained translation model, the cross-attention of the last decoder layers, averaged over
their heads, tends to put most of a target token's weight on the source token it translates
(Bahdanau et al. 2015 read alignments off attention; Voita et al. 2019 find it in a few
heads). Here the decoder's position i predicts target token i, so row i is the attention of
the position that writes target token i.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import InputError


def mean_cross_attention(cross: np.ndarray, layers=None, heads=None) -> np.ndarray:
    """Mean over the chosen layers (default: all) and heads (default: all) of cross-attention
    maps [L, H, T, S] -> [T, S] (rows still sum to 1)."""
    cross = np.asarray(cross)
    if cross.ndim != 4:
        raise InputError(f"cross-attention maps are [L, H, T, S], got shape {list(cross.shape)}")
    layers = range(cross.shape[0]) if layers is None else list(layers)
    heads = range(cross.shape[1]) if heads is None else list(heads)
    if not len(layers) or not len(heads):
        raise InputError("pick at least one layer and one head")
    picked = cross[np.asarray(layers)][:, np.asarray(heads)]
    return picked.astype(np.float64).mean(axis=(0, 1))


def strongest_source(mean_map: np.ndarray) -> np.ndarray:
    """For each target row of a [T, S] map, the source position it gives the most weight."""
    return np.asarray(mean_map).argmax(axis=-1)


def alignment_agreement(mean_map: np.ndarray, alignment) -> float:
    """The share of target positions whose most-attended source position is the one the
    known alignment gives (alignment[i]: a source position, or None/-1 where there is none;
    those positions are left out)."""
    found = strongest_source(mean_map)
    pairs = [(i, int(a)) for i, a in enumerate(alignment)
             if a is not None and int(a) >= 0 and i < len(found)]
    if not pairs:
        raise InputError("the alignment has no target position with a source position")
    return float(np.mean([found[i] == a for i, a in pairs]))
