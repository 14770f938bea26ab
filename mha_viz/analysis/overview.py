"""Every head's map at a glance: f x f block means of each map, streamed over row blocks
(docs/streaming.md), so a long input's thumbnails cost one pass over its maps and never hold
them (docs/analyses.md, "Attention maps and what is derived from them")."""

from __future__ import annotations

import numpy as np

from ..core.arrays import RowsDone
from ..maps.downsample import block_factor, block_sizes
from ..maps.streaming import RowBlock, accumulate, source_of

__all__ = ["BlockMeans", "thumbnails"]


class BlockMeans:
    """The f x f block means of every head's map, [L, H, ceil(T / f), ceil(T / f)]: the
    block_reduce of whole maps, a block of rows at a time (the last block of an axis is
    averaged over its real cells)."""

    in_place = False

    def __init__(self, n_layer: int, n_head: int, n_tokens: int, factor: int):
        self.n_tokens, self.factor = int(n_tokens), max(1, int(factor))
        size = -(-self.n_tokens // self.factor)
        self.sums = np.zeros((n_layer, n_head, size, size), dtype=np.float64)

    def update(self, block: RowBlock) -> None:
        f = self.factor
        # the keys this block holds (a causal block leaves out zeros after its last row)
        key_starts = np.arange(0, block.width, f)
        by_keys = np.add.reduceat(block.rows, key_starts, axis=-1, dtype=np.float64)
        bins = np.arange(block.start, block.stop) // f
        firsts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
        by_blocks = np.add.reduceat(by_keys, firsts, axis=-2)
        self.sums[block.layer][:, bins[firsts], :len(key_starts)] += by_blocks

    def merge(self, other: "BlockMeans") -> "BlockMeans":
        self.sums += other.sums
        return self

    def result(self) -> np.ndarray:
        sizes = block_sizes(self.n_tokens, self.factor)
        return (self.sums / np.outer(sizes, sizes)).astype(np.float32)


def thumbnails(trace, max_size: int, progress=None) -> tuple[np.ndarray, int]:
    """(every head's map as at most max_size x max_size block means [L, H, s, s], the factor
    f = ceil(T / max_size)): downsample.block_reduce of the whole maps, from one pass over a
    trace's rows (held or on demand) or maps [L, H, T, T]. progress(done, total): query rows
    read (may raise to stop)."""
    source = source_of(trace)
    factor = block_factor(source.n_tokens, max_size)
    means = BlockMeans(source.n_layer, source.n_head, source.n_tokens, factor)
    accumulate(source, [means], RowsDone(progress, source.n_layer * source.n_tokens))
    return means.result(), factor
