"""The one form of attention maps a trace reads: the Maps protocol every storage form
implements.

The forms answer the same questions with the same numbers: held.HeldMaps (float32
[L, H, T, T] in memory: fastest for short inputs), the on-demand forms of ondemand
(LayerInputMaps, QueryKeyMaps: rows rebuilt from what made them, so memory grows with T, not
T squared) and the wrappers over another form (value_weighted.ValueWeightedMaps: what heads
move; analysis.special.KeptPositionsMaps: some positions hidden). An AttentionTrace holds one
of them and delegates every read to it, whichever it is; whether a text's maps are held or
rebuilt is the model's choice, made once (Model.maps_kind, Model.plan).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Iterator

import numpy as np


class Maps(ABC):
    """Every head's attention map of one input, [L, H, T, T]: rows are query positions,
    columns key positions; layers and heads are numbered from 0. on_demand: rows are
    computed when asked for (False: held in memory)."""

    n_layer: int
    n_head: int
    n_tokens: int
    on_demand: bool

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """[L, H, T, T], computing nothing."""
        return (self.n_layer, self.n_head, self.n_tokens, self.n_tokens)

    @abstractmethod
    def rows(self, layer: int, start: int, stop: int, heads=None) -> np.ndarray:
        """Query rows start..stop-1 of `heads` (default all) in `layer`: [H', rows, T]."""

    @abstractmethod
    def gather_rows(self, layer: int, rows, heads=None) -> np.ndarray:
        """The given query rows (any order) of `heads` in `layer`: [H', len(rows), T]."""

    @abstractmethod
    def head_map(self, layer: int, head: int) -> np.ndarray:
        """One head's map, float32 [T, T]."""

    @abstractmethod
    def layer_maps(self, layer: int) -> np.ndarray:
        """Every head's map in one layer, float32 [H, T, T]."""

    @abstractmethod
    def row_blocks(self, max_elements: int, layers=None
                   ) -> Iterator[tuple[int, int, int, np.ndarray]]:
        """(layer, start, stop, rows [H, stop - start, T]) over every layer's query rows (or
        those of `layers`), in order, each block at most max_elements floats."""

    @abstractmethod
    def block_mean(self, layer: int, head: int | None, factor: int) -> np.ndarray:
        """The head's map (head=None: the mean of the layer's heads) averaged over factor x
        factor blocks: [ceil(T / f), ceil(T / f)]."""

    @abstractmethod
    def materialise(self, max_bytes: int) -> np.ndarray:
        """All maps [L, H, T, T]: held maps give their array; computed ones raise
        MapsTooLargeError past max_bytes."""

    @abstractmethod
    def held_bytes(self) -> int:
        """The bytes held: the maps, or what rebuilds them."""

    @abstractmethod
    def saved_arrays(self) -> dict[str, np.ndarray]:
        """What a saved trace holds for these maps: "attentions", or queries and keys."""

    @abstractmethod
    def saved_bytes(self) -> int:
        """About the bytes of saved_arrays(), computing nothing."""
