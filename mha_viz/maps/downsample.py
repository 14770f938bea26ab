"""Shrinking attention maps for display: block reduction and label thinning (numpy only).

A browser cannot usefully draw (or receive) a 1000 x 1000 heatmap per head, so the plots
reduce large maps by an integer factor first. These helpers only compute; plots.py draws.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def _block_starts(n: int, factor: int) -> np.ndarray:
    return np.arange(0, n, factor)


def block_sizes(n: int, factor: int) -> np.ndarray:
    """Number of original positions in each block of ``range(n)`` cut every ``factor``."""
    starts = _block_starts(n, factor)
    return np.minimum(starts + factor, n) - starts


def block_factor(n: int, max_size: int) -> int:
    """The integer factor f = ceil(n / max_size) (at least 1) that brings n down to max_size."""
    if max_size < 1:
        raise ValueError(f"max_size must be at least 1, got {max_size}")
    return max(1, math.ceil(n / max_size))


def block_reduce(
    matrix: np.ndarray, max_size: int, reduce: str = "mean"
) -> tuple[np.ndarray, int]:
    """Reduce the last two axes of ``[..., R, C]`` by f = ceil(max(R, C) / max_size).

    Each output cell is the mean (or max) of an f x f block; the last block along an axis
    may be smaller and is reduced over its real cells only (no padding enters the mean).
    Both axes use the same factor so a square map stays square. Returns (reduced, f);
    f == 1 returns the input unchanged (same object).

    For a row-stochastic map, ``(reduced * sizes).sum(-1) == 1`` for every reduced row,
    where ``sizes`` are the column block sizes: a block-mean row is the average of its
    rows, spread over blocks of keys. When f divides C, reduced rows sum to 1 / f.
    """
    m = np.asarray(matrix)
    if m.ndim < 2:
        raise ValueError(f"block_reduce needs at least 2 dimensions, got shape {m.shape}")
    if reduce not in ("mean", "max"):
        raise ValueError(f"reduce must be 'mean' or 'max', got {reduce!r}")
    rows, cols = m.shape[-2], m.shape[-1]
    f = block_factor(max(rows, cols), max_size)
    if f == 1:
        return m, 1
    out_dtype = m.dtype if np.issubdtype(m.dtype, np.floating) else np.float64
    r_starts, c_starts = _block_starts(rows, f), _block_starts(cols, f)
    if reduce == "mean":
        # Accumulate in float64 (float32 sums of many small weights lose digits) without
        # first copying the whole input to float64: the first pass already shrinks it f-fold.
        summed = np.add.reduceat(m, r_starts, axis=-2, dtype=np.float64)
        summed = np.add.reduceat(summed, c_starts, axis=-1)
        counts = np.outer(block_sizes(rows, f), block_sizes(cols, f))
        reduced = summed / counts
    else:
        work = m.astype(out_dtype, copy=False)
        reduced = np.maximum.reduceat(
            np.maximum.reduceat(work, r_starts, axis=-2), c_starts, axis=-1
        )
    return reduced.astype(out_dtype, copy=False), f


def block_mean(matrix: np.ndarray, factor: int) -> np.ndarray:
    """The mean of each factor x factor block of [..., R, C] (float64 sums; the last block of
    an axis may be smaller and is averaged over its real cells) -> float32."""
    m = np.asarray(matrix)
    factor = max(1, int(factor))
    rows, cols = m.shape[-2], m.shape[-1]
    summed = np.add.reduceat(m, _block_starts(rows, factor), axis=-2, dtype=np.float64)
    summed = np.add.reduceat(summed, _block_starts(cols, factor), axis=-1)
    counts = np.outer(block_sizes(rows, factor), block_sizes(cols, factor))
    return (summed / counts).astype(np.float32)


def thin_labels(labels: Sequence[str], max_labels: int) -> tuple[list[int], list[str]]:
    """Evenly spaced positions (and their labels) so at most ``max_labels`` ticks show."""
    n = len(labels)
    step = 1 if n <= max_labels else math.ceil(n / max(1, max_labels))
    positions = list(range(0, n, step))
    return positions, [str(labels[p]) for p in positions]


def block_ranges(n: int, factor: int) -> list[tuple[int, int]]:
    """(first, last) original position of each block, both inclusive."""
    return [(int(s), int(min(s + factor, n) - 1)) for s in _block_starts(n, factor)]


def downsampled_labels(labels: Sequence[str], factor: int) -> list[str]:
    """One label per block, e.g. "12–15 cat…" (position range and the block's first token).

    factor == 1 returns the labels unchanged.
    """
    if factor == 1:
        return [str(t) for t in labels]
    out = []
    for first, last in block_ranges(len(labels), factor):
        if first == last:
            out.append(f"{first} {labels[first]}")
        else:
            out.append(f"{first}–{last} {labels[first]}…")
    return out
