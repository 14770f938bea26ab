"""A key/value cache for writing text one token at a time: each layer's rotated keys and its
values of every position run so far, kept in buffers that grow in place.

A causal model's keys and values at a position depend only on the tokens up to it, so a
token written after a prefix needs one forward over that token alone, reading the prefix's
keys and values from here (run_layers(h, offset=t, past_kv=cache)): its attention row is the
one a fresh forward over the whole text computes, with t + 1 keys instead of t + 1 rows.
"""

from __future__ import annotations

import torch


class LayerCache:
    """One layer's keys [B, H_kv, S, d_k] (after rotation) and values, S growing. What
    MultiHeadAttention reads as `past`: extend(k, v) appends the new positions' keys and
    values and returns every position's (views of the buffers: no copy of the past)."""

    def __init__(self, capacity: int = 0):
        self.capacity = int(capacity)  # positions the first buffers hold (0: grown as needed)
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.length = 0

    def _grow(self, k: torch.Tensor, v: torch.Tensor, need: int) -> None:
        size = max(need, self.capacity, 2 * (0 if self.keys is None else self.keys.shape[2]))
        keys = k.new_empty(k.shape[0], k.shape[1], size, k.shape[3])
        values = v.new_empty(v.shape[0], v.shape[1], size, v.shape[3])
        if self.length:
            keys[:, :, :self.length] = self.keys[:, :, :self.length]
            values[:, :, :self.length] = self.values[:, :, :self.length]
        self.keys, self.values = keys, values

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append keys and values of T new positions -> every position's, [B, H_kv, S + T,
        d_k]."""
        stop = self.length + k.shape[2]
        if self.keys is None or stop > self.keys.shape[2]:
            self._grow(k, v, stop)
        self.keys[:, :, self.length:stop] = k
        self.values[:, :, self.length:stop] = v
        self.length = stop
        return self.keys[:, :, :stop], self.values[:, :, :stop]

    def values_so_far(self) -> torch.Tensor:
        """Every cached position's values [B, H_kv, S, d_k]."""
        return self.values[:, :, :self.length]


class KVCache:
    """Every layer's LayerCache: what run_layers takes as past_kv (indexed by layer)."""

    def __init__(self, n_layer: int, capacity: int = 0):
        self.layers = [LayerCache(capacity) for _ in range(n_layer)]

    def __getitem__(self, layer: int) -> LayerCache:
        return self.layers[layer]

    @property
    def length(self) -> int:
        """Positions cached so far."""
        return self.layers[0].length
