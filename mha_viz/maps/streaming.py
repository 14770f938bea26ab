"""One way to compute every statistic of attention maps: sources of row blocks, accumulators,
and one driver (docs/streaming.md).

A **source** yields blocks of query rows, layer by layer: every head's rows start..stop-1 of
one layer, [H, r, K], with K <= T keys (a causal source leaves out keys after the block's last
row, rounded up so that sums over keys run as over all T: they are exact zeros). Whether the
maps are held whole, rebuilt on demand from queries and keys, or come out of a corpus batch,
a statistic sees only blocks.

An **accumulator** is one statistic: ``update(block)`` takes a block, ``merge(other)`` adds
what another accumulator of the same statistic saw (exactly: row blocks of one input in any
order, or shards), and ``result()`` gives the numbers. ``accumulate(source, accumulators)``
feeds every block to every accumulator in one pass, so several statistics cost one reading
of the maps.

    from mha_viz.maps.streaming import accumulate, source_of
    from mha_viz.analysis.entropy import RowEntropy
    rows = RowEntropy.for_source(source_of(trace))
    accumulate(source_of(trace), [rows])
    rows.result(normalized=False)                     # [L, H, T]

A statistic is written once, as an accumulator; the public functions (``entropy(trace)``,
``token_class_mass(trace)``, ...) build one per input, run the driver and finish.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol, Sequence

import numpy as np

from ..core.arrays import as_array, is_lower_triangular
from ..core.errors import InputError
from . import ondemand

__all__ = ["RowBlock", "Source", "MapsSource", "TraceSource", "Accumulator", "source_of",
           "is_source", "keys_of", "fold_maps", "ordered", "accumulate", "causal_width"]

# Keys kept of a causal block: its rows' keys rounded up to a multiple of this, so that the
# float32 sums over keys run in the same order as over all T keys (the extra keys are 0).
CAUSAL_WIDTH_STEP = 256


def causal_width(stop: int, n_tokens: int) -> int:
    """The keys to keep of a causal block of rows ..stop-1: every key its rows see (0..stop-1),
    rounded up to CAUSAL_WIDTH_STEP (all T when that reaches the last, partial, step of T),
    so the statistics equal those over whole rows to the last bit."""
    width = -(-int(stop) // CAUSAL_WIDTH_STEP) * CAUSAL_WIDTH_STEP
    return width if width <= n_tokens // CAUSAL_WIDTH_STEP * CAUSAL_WIDTH_STEP else n_tokens


@dataclass(frozen=True)
class RowBlock:
    """Rows start..stop-1 of every head's map in one layer: rows [H, stop - start, K]. Keys
    K..T-1 (a causal source's keys after the last row) are zeros. owned: the array is this
    block's own (an accumulator may work in it); else it is a view of maps held elsewhere.
    summary: what was measured of these rows already, in one pass over a batch (a
    summaries.RowSummary, for rows whose hidden keys hold zeros); accumulators that read one
    take it in place of their own pass."""
    layer: int
    start: int
    stop: int
    rows: np.ndarray
    owned: bool = False
    summary: object | None = None

    @property
    def n_rows(self) -> int:
        return self.stop - self.start

    @property
    def width(self) -> int:
        return int(self.rows.shape[-1])


class Source(Protocol):
    """Where attention rows come from. blocks(cut=False): every key of every row (for a
    statistic that first removes positions, then cuts). n_tokens counts the query rows;
    n_keys the keys (n_tokens, except for an encoder-decoder's cross-attention: target rows
    over source keys; keys_of(source) reads it)."""
    n_layer: int
    n_head: int
    n_tokens: int
    causal: bool  # nothing above the diagonal: blocks may leave out the keys after their rows

    def blocks(self, max_elements: int | None = None, cut: bool = True
               ) -> Iterator[RowBlock]: ...


def _elements(max_elements: int | None) -> int:
    """A block's size in floats: as asked, else mha_viz.maps.ondemand.BLOCK_ELEMENTS (read when
    used, so a test or an operator can change it)."""
    return int(ondemand.BLOCK_ELEMENTS if max_elements is None else max_elements)


def _cut(rows: np.ndarray, stop: int, n_tokens: int, causal: bool) -> np.ndarray:
    return rows[..., :causal_width(stop, n_tokens)] if causal else rows


class MapsSource:
    """Whole maps in memory, [L, H, T, T] (or [L, H, T, S]: cross-attention, never causal):
    blocks are views (nothing copied)."""

    def __init__(self, maps: np.ndarray, causal: bool):
        self.maps = maps
        self.n_layer, self.n_head, self.n_tokens, self.n_keys = (int(s) for s in maps.shape)
        self.causal = bool(causal)
        if self.causal and self.n_keys != self.n_tokens:
            raise InputError(f"causal maps are square; got {self.n_tokens} queries over "
                             f"{self.n_keys} keys")

    def identity(self) -> tuple:
        return (self.maps, self.causal)

    def blocks(self, max_elements: int | None = None, cut: bool = True
               ) -> Iterator[RowBlock]:
        step = max(1, _elements(max_elements) // (self.n_head * self.n_keys))
        for layer in range(self.n_layer):
            for start in range(0, self.n_tokens, step):
                stop = min(start + step, self.n_tokens)
                yield RowBlock(layer, start, stop, _cut(self.maps[layer, :, start:stop], stop,
                                                        self.n_tokens, self.causal and cut))


class TraceSource:
    """An AttentionTrace's rows as the trace gives them (trace.row_blocks): views of maps it
    holds, or rows it computes on request. The source does not ask which."""

    def __init__(self, trace):
        self.trace = trace
        self.n_layer, self.n_head, self.n_tokens = (int(s) for s in trace.maps_shape[:3])
        self.causal = bool(trace.causal)

    def identity(self) -> tuple:
        return (self.trace,)

    def blocks(self, max_elements: int | None = None, cut: bool = True
               ) -> Iterator[RowBlock]:
        for layer, start, stop, rows in self.trace.row_blocks(_elements(max_elements)):
            yield RowBlock(layer, start, stop, _cut(rows, stop, self.n_tokens,
                                                    self.causal and cut),
                           owned=bool(rows.flags.owndata))


def keys_of(source) -> int:
    """The number of keys a source's rows run over (its query rows' count for square maps)."""
    return int(getattr(source, "n_keys", source.n_tokens))


def is_source(value) -> bool:
    """Whether value is a source already (it yields blocks)."""
    return hasattr(value, "blocks") and hasattr(value, "n_tokens")


def fold_maps(array: np.ndarray) -> tuple[np.ndarray, tuple]:
    """Maps [..., T, T] of any leading shape as [N, H, T, T] (the leading axes folded into
    two, heads last), and the leading shape, to unfold a [N, H] result."""
    lead = array.shape[:-2]
    heads = lead[-1] if lead else 1
    groups = int(np.prod(lead[:-1])) if len(lead) > 1 else 1
    return array.reshape(groups, heads, *array.shape[-2:]), lead


def source_of(value, causal: bool | None = None) -> Source:
    """A source for one input: a trace (anything with row_blocks and maps_shape), a source,
    or maps [L, H, T, T] (causal: say so, or it is detected: nothing above the diagonal)."""
    if is_source(value):
        return value
    if hasattr(value, "row_blocks") and hasattr(value, "maps_shape"):
        return TraceSource(value)
    maps = as_array(value, min_ndim=4)
    if maps.ndim != 4:
        raise InputError(f"a source needs maps [L, H, T, T], got shape {list(maps.shape)}")
    return MapsSource(maps, is_lower_triangular(maps) if causal is None else causal)


class Accumulator(Protocol):
    """One statistic over row blocks. in_place: update() may write in a block it owns (the
    driver gives it each block after every other accumulator has read it)."""
    in_place: bool

    def update(self, block: RowBlock) -> None: ...

    def merge(self, other: "Accumulator") -> "Accumulator": ...

    def result(self): ...


def ordered(accumulators: Sequence[Accumulator]) -> list[Accumulator]:
    """The order to give a block to accumulators: those that only read it, then those that
    may work in it (in_place)."""
    return sorted(accumulators, key=lambda a: bool(getattr(a, "in_place", False)))


def accumulate(source: Source, accumulators: Sequence[Accumulator], progress=None,
               max_elements: int | None = None) -> None:
    """Feed every block of ``source`` to every accumulator, in one pass. progress(rows): told
    how many query rows each block held (it may raise to stop)."""
    readers_first = ordered(accumulators)
    for block in source.blocks(max_elements):
        for accumulator in readers_first:
            accumulator.update(block)
        if progress is not None:
            progress(block.n_rows)
