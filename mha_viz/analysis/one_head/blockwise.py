"""Chunked attention and flash attention's online softmax, on one head's real numbers
(docs/analyses.md, "Inside one head"): the same weights and output as the plain softmax,
computed with less memory.

- Chunked attention (Rabe & Staats 2021; what mha-viz's own forward does for long inputs):
  a block of query rows at a time. Each row's softmax needs only its own scores, so a block
  of B rows needs B x S scores instead of T x S.
- Online softmax (Milakov & Gimelshein 2018), the heart of flash attention (Dao et al.
  2022): a block of keys at a time, keeping for each row a running maximum m and a running
  sum l of exp(score - m). When a block raises the maximum, what was summed so far is
  rescaled by exp(m_old - m_new). The output is accumulated and rescaled the same way, so
  no row ever holds all its scores: memory per query block is B x B_k scores plus m, l and
  the output.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.errors import InputError
from .kv_cache_size import bytes_text

FLOAT_BYTES = 4


@dataclass
class OnlineSoftmax:
    """One head's attention computed a block of keys at a time. maxima and sums [n_blocks,
    T]: each row's running maximum m and running sum l after each key block (a row that has
    seen no key yet: m = -inf, l = 0); context [T, d_v] the output; weights [T, S] recovered
    at the end as exp(s - m) / l; block: keys per block."""
    block: int
    maxima: np.ndarray
    sums: np.ndarray
    context: np.ndarray
    weights: np.ndarray

    @property
    def n_blocks(self) -> int:
        return self.maxima.shape[0]


def _check(scores, values=None) -> tuple[np.ndarray, np.ndarray | None]:
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or 0 in s.shape:
        raise InputError(f"scores must be [T, S], got shape {list(s.shape)}")
    if np.isnan(s).any() or np.isposinf(s).any():
        raise InputError("scores must be finite or -inf (masked)")
    v = None
    if values is not None:
        v = np.asarray(values, dtype=np.float64)
        if v.ndim != 2 or v.shape[0] != s.shape[1]:
            raise InputError(f"values must be [S, d] with S = {s.shape[1]}, got "
                             f"{list(v.shape)}")
    return s, v


def _check_block(block: int, n: int) -> int:
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise InputError(f"a block must be a positive whole number, got {block!r}")
    return min(int(block), n)


def plain_attention(scores, values) -> tuple[np.ndarray, np.ndarray]:
    """(weights [T, S], context [T, d]): the row softmax of every score at once, then A V."""
    s, v = _check(scores, values)
    top = s.max(axis=1, keepdims=True)
    e = np.exp(s - top)
    weights = e / e.sum(axis=1, keepdims=True)
    return weights, weights @ v


def row_chunked_attention(scores, values, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(weights, context) computed `rows` query rows at a time: each block's softmax of its
    own scores, then its output (numpy, for the page; the engine's own forward does this in
    torch: engine.attention.chunked_attention)."""
    s, v = _check(scores, values)
    rows = _check_block(rows, s.shape[0])
    parts = [plain_attention(s[start:start + rows], v) for start in range(0, len(s), rows)]
    return np.concatenate([w for w, _ in parts]), np.concatenate([c for _, c in parts])


def online_softmax_attention(scores, values, block: int) -> OnlineSoftmax:
    """The head's output with the keys read `block` at a time, as flash attention reads
    them: running maximum m, running sum l and running output O per row, rescaled by
    exp(m_old - m_new) whenever a block raises the maximum."""
    s, v = _check(scores, values)
    t, n_keys = s.shape
    block = _check_block(block, n_keys)
    m = np.full(t, -np.inf)
    l = np.zeros(t)
    out = np.zeros((t, v.shape[1]))
    maxima, sums = [], []
    for start in range(0, n_keys, block):
        piece = s[:, start:start + block]
        new_m = np.maximum(m, piece.max(axis=1))
        seen = np.isfinite(new_m)  # rows that have met an unmasked key so far
        rescale = np.where(seen & np.isfinite(m), np.exp(m - np.where(seen, new_m, 0.0)), 0.0)
        e = np.where(seen[:, None], np.exp(piece - np.where(seen, new_m, 0.0)[:, None]), 0.0)
        l = l * rescale + e.sum(axis=1)
        out = out * rescale[:, None] + e @ v[start:start + block]
        m = new_m
        maxima.append(m.copy())
        sums.append(l.copy())
    if (l == 0).any():
        raise InputError("a query row sees no key (every score is masked)")
    weights = np.exp(s - m[:, None]) / l[:, None]
    return OnlineSoftmax(block, np.array(maxima), np.array(sums), out / l[:, None], weights)


def attention_memory(n_queries: int, n_keys: int, d_head: int, rows: int,
                     key_block: int) -> dict[str, int]:
    """Bytes of float32 working memory each way needs for one head: the plain softmax holds
    every score (T x S); chunked, a block of rows' (rows x S); online (flash), a block of rows
    by a block of keys, plus each row's m, l and output (rows x (2 + d))."""
    rows, key_block = min(rows, n_queries), min(key_block, n_keys)
    return {"plain": FLOAT_BYTES * n_queries * n_keys,
            "chunked": FLOAT_BYTES * rows * n_keys,
            "online": FLOAT_BYTES * (rows * key_block + rows * (2 + d_head))}


def blockwise_check(scores, values, block: int) -> dict[str, float]:
    """The largest difference from the plain softmax of the chunked (block rows at a time)
    and online (block keys at a time) weights and outputs: 0 up to rounding."""
    weights, context = plain_attention(scores, values)
    chunk_w, chunk_c = row_chunked_attention(scores, values, block)
    online = online_softmax_attention(scores, values, block)
    return {"chunked weights": float(np.abs(chunk_w - weights).max()),
            "chunked output": float(np.abs(chunk_c - context).max()),
            "online weights": float(np.abs(online.weights - weights).max()),
            "online output": float(np.abs(online.context - context).max())}


def running_table(online: OnlineSoftmax, row: int, key_labels) -> dict[str, list]:
    """One query row's running maximum and sum after each key block, as a table."""
    if not 0 <= row < online.maxima.shape[1]:
        raise InputError(f"row {row} is outside the {online.maxima.shape[1]} query rows")
    n_keys = online.weights.shape[1]
    starts = range(0, n_keys, online.block)
    return {"block": [i + 1 for i in range(online.n_blocks)],
            "keys": [f"{a}–{min(a + online.block, n_keys) - 1} ('{key_labels[a]}'…)"
                     for a in starts],
            "running max m": ["−∞" if np.isneginf(m) else f"{m:.4f}"
                              for m in online.maxima[:, row]],
            "running sum l": [f"{v:.4f}" for v in online.sums[:, row]]}


def memory_table(n_queries: int, n_keys: int, d_head: int, block: int,
                 long_tokens: int = 8192) -> dict[str, list]:
    """The working memory of each way, for this input and for a long one."""
    here = attention_memory(n_queries, n_keys, d_head, block, block)
    long = attention_memory(long_tokens, long_tokens, d_head, 256, 256)
    names = {"plain": "plain softmax (every score)", "chunked": "chunked (a block of rows)",
             "online": "online softmax (a block of rows × a block of keys)"}
    return {"way": list(names.values()),
            f"this input ({n_queries} × {n_keys}, blocks of {block})":
                [bytes_text(here[k]) for k in names],
            f"{long_tokens:,} tokens (blocks of 256)": [bytes_text(long[k]) for k in names]}
