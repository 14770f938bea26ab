"""Maps held whole in memory (float32 [L, H, T, T]): the form of short inputs, every read a
view or an index of one array."""

from __future__ import annotations

import numpy as np

from ..core.errors import TraceFileError
from . import ondemand
from .downsample import block_mean
from .forms import Maps


class HeldMaps(Maps):
    """Every head's map in one float32 array [L, H, T, T]."""

    on_demand = False

    def __init__(self, array):
        self.array = np.asarray(array, dtype=np.float32)
        if self.array.ndim != 4:
            raise TraceFileError(f"attentions must have shape [L, H, T, T], got "
                                 f"{list(self.array.shape)}")
        self.n_layer, self.n_head, self.n_tokens = (int(s) for s in self.array.shape[:3])

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    def rows(self, layer: int, start: int, stop: int, heads=None) -> np.ndarray:
        heads = slice(None) if heads is None else list(heads)
        return self.array[layer, heads, max(0, start):stop]

    def gather_rows(self, layer: int, rows, heads=None) -> np.ndarray:
        heads = slice(None) if heads is None else list(heads)
        return self.array[layer, heads][:, np.asarray(rows, dtype=np.int64)]

    def head_map(self, layer: int, head: int) -> np.ndarray:
        return self.array[layer, head]

    def layer_maps(self, layer: int) -> np.ndarray:
        return self.array[layer]

    def row_blocks(self, max_elements: int | None = None, layers=None):
        max_elements = ondemand.BLOCK_ELEMENTS if max_elements is None else max_elements
        step = max(1, int(max_elements) // (self.n_head * self.n_tokens))
        for layer in range(self.n_layer) if layers is None else layers:
            for start in range(0, self.n_tokens, step):
                stop = min(start + step, self.n_tokens)
                yield layer, start, stop, self.array[layer, :, start:stop]

    def block_mean(self, layer: int, head: int | None, factor: int) -> np.ndarray:
        if head is None:
            return block_mean(self.array[layer].mean(axis=0, dtype=np.float64), factor)
        return block_mean(self.array[layer, head], factor)

    def materialise(self, max_bytes: int) -> np.ndarray:
        return self.array  # held already: nothing is computed, whatever its size

    def held_bytes(self) -> int:
        return int(self.array.nbytes)

    def saved_arrays(self) -> dict[str, np.ndarray]:
        return {"attentions": self.array}

    def saved_bytes(self) -> int:
        return int(self.array.nbytes)
