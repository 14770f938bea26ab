"""Head similarity (docs/analyses.md, "Head similarity"; Clark et al. 2019, "What Does BERT
Look At?").

Distance between heads a and b on one input of n tokens:

    d(a, b) = (1/n) sum_i JS(A_a[i], A_b[i])
    JS(p, q) = 0.5 KL(p || m) + 0.5 KL(q || m),   m = (p + q) / 2,   natural logs,

after smoothing every row p' = (1 - s) p + s / n (s = 1e-3 as in Clark et al.'s code; n = the
number of keys, T, or the number of valid keys with a valid_mask). JS is symmetric, 0 on the
diagonal and at most ln 2; sqrt(JS), the Jensen-Shannon distance, is a true metric. Heads are
numbered n = l * H + h (layer-major), both from 0.

Then: cluster_order (average-linkage hierarchical clustering, a leaf order for a reordered
matrix) and mds_2d (metric MDS, a 2-D map of the heads).
"""

from __future__ import annotations

import math
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..core.arrays import (RowsDone, as_array, as_inputs, check_mask, default_threads, is_many,
                           maps_shape, per_input)
from ..core.errors import InputError
from ..maps.streaming import MapsSource
from ..maps.trace import AttentionTrace

__all__ = ["head_distances", "cluster_linkage", "cluster_order", "mds_2d", "head_labels",
           "ComparedRows", "sampled_rows"]

_LN2 = math.log(2.0)
_TINY = np.float32(np.finfo(np.float32).tiny)
# Elements per block of head pairs (float32): small enough to stay in cache.
_PAIR_BLOCK = 1 << 17
# Kept elements (each row's keys that some head attends to) per chunk of query rows.
_ROW_BLOCK = 1 << 11


def head_labels(n_layer: int, n_head: int) -> list[str]:
    """Labels "l.h" (0-based) in the order head_distances uses: index n = l * H + h."""
    return [f"{layer}.{head}" for layer in range(n_layer) for head in range(n_head)]


def _row_selection(n_rows_valid: int, max_rows: int | None) -> np.ndarray:
    """Indices into the valid rows: all, or ``max_rows`` evenly spaced ones (first and last
    included)."""
    if max_rows is None or max_rows >= n_rows_valid:
        return np.arange(n_rows_valid)
    if max_rows == 1:
        return np.array([n_rows_valid - 1])
    return np.unique(np.round(np.linspace(0, n_rows_valid - 1, max_rows)).astype(np.int64))


def sampled_rows(n_rows: int, max_rows: int | None, token_ids) -> np.ndarray:
    """The query rows a corpus segment compares its heads on: all of them, or one row drawn
    at random from each of max_rows consecutive stretches of 0..n_rows-1 of equal length (to
    one row), by a generator seeded from the segment's token ids (the same segment, the same
    rows, in any process and any order). Over a corpus every position is drawn as often as
    any other, so the mean over segments estimates the mean over all of their rows; rows
    evenly spaced at fixed positions do not (every segment would weigh the first and the last
    row, whatever the corpus). Sorted, distinct."""
    if max_rows is None or max_rows >= n_rows:
        return np.arange(n_rows)
    if max_rows < 1:
        raise InputError(f"max_rows must be >= 1, got {max_rows}")
    seed = zlib.crc32(np.ascontiguousarray(token_ids, dtype=np.int64).tobytes())
    edges = (np.arange(max_rows + 1) * n_rows) // max_rows  # stretches of equal length
    offsets = np.random.default_rng(seed).random(max_rows)
    return edges[:-1] + (offsets * np.diff(edges)).astype(np.int64)


def _xlogx_sum(p: np.ndarray, exact_zero: bool) -> np.ndarray:
    """sum over the last axis of p ln p (0 ln 0 = 0), float64."""
    logs = np.log(np.maximum(p, _TINY) if exact_zero else p, dtype=np.float64)
    return np.einsum("...k,...k->...", p.astype(np.float64), logs)


def _js_sum(flat: np.ndarray, rows: np.ndarray, keys: np.ndarray, smoothing: float,
            renormalize: bool, n_threads: int) -> np.ndarray:
    """sum over the given query rows of JS(A_a[i], A_b[i]) for all head pairs. -> [N, N]

    Uses JS(p, q) = 0.5 sum p ln p + 0.5 sum q ln q - sum m ln m, with
    sum m ln m = 0.5 sum u ln u - 0.5 ln 2 sum u, u = p + q, so that the only per-pair work is
    one add, one log and one dot product per element (numpy float32 in cache-sized blocks;
    the sums over rows and the per-head terms in float64). A row's keys to which every head
    gives exactly 0 weight (e.g. a causal row's future) are skipped: there p' = q' = m' = s / n,
    and such a key adds exactly 0 to JS.
    Chunks of rows are shared out to ``n_threads`` Python threads (numpy releases the GIL);
    no OpenMP, so an oversubscribed machine slows down gracefully.
    """
    n_head = flat.shape[0]
    n_keys = len(keys)
    all_keys = n_keys == flat.shape[-1]
    exact_zero = smoothing == 0.0
    # Which keys any head gives nonzero weight, per selected row: [R, K] bool.
    nonzero = np.zeros((len(rows), n_keys), dtype=bool)
    for start in range(0, n_head, 8):
        block = flat[start:start + 8][:, rows]
        if not all_keys:
            block = block[:, :, keys]
        nonzero |= (block != 0).any(axis=0)
    kept_counts = nonzero.sum(axis=1)

    # Chunks of rows of about _ROW_BLOCK kept elements in all: each row's kept keys are
    # gathered, so a causal row's masked keys are never read, and a chunk is one flat width.
    chunks, start = [], 0
    while start < len(rows):
        stop, seen = start + 1, int(kept_counts[start])
        while stop < len(rows) and seen + kept_counts[stop] <= _ROW_BLOCK:
            seen, stop = seen + int(kept_counts[stop]), stop + 1
        if seen:
            chunks.append((start, stop))
        start = stop

    def load(chunk):
        start, stop = chunk
        raw = flat[:, rows[start:stop]]
        if renormalize:
            raw = raw[:, :, keys].astype(np.float32)
            sums = raw.sum(axis=-1, keepdims=True)
            np.divide(raw, sums, out=raw, where=sums > 0)
        elif not all_keys:
            raw = raw[:, :, keys]
        p = np.ascontiguousarray(raw[:, nonzero[start:stop]], dtype=np.float32)  # [N, kept]
        if smoothing:
            p *= np.float32(1.0 - smoothing)
            p += np.float32(smoothing / n_keys)
        return p

    lock = threading.Lock()
    queue = iter(chunks)

    def work():
        pair_sums = np.zeros((n_head, n_head), dtype=np.float64)  # sum_r sum_j u ln u
        plogp_total = np.zeros(n_head, dtype=np.float64)  # sum_r sum_j p ln p
        mass_total = np.zeros(n_head, dtype=np.float64)  # sum_r sum_j p (kept keys)
        while True:
            with lock:
                chunk = next(queue, None)
            if chunk is None:
                return pair_sums, plogp_total, mass_total
            flat_p = load(chunk)
            width = flat_p.shape[1]
            clamp = exact_zero and not flat_p.all()  # u = p + q is 0 only where both are
            plogp_total += _xlogx_sum(flat_p, exact_zero)
            mass_total += flat_p.sum(axis=-1, dtype=np.float64)
            # Pairs (a, b > a), a block of heads a against every later b in a few large numpy
            # calls (one call per head contended for the GIL: two threads ran slower than one)
            buf_u, buf_l = (np.empty(_PAIR_BLOCK + n_head * width, np.float32) for _ in "ul")
            a0 = 0
            while a0 < n_head - 1:
                later = n_head - 1 - a0  # heads a0 + 1.. are compared with the block's
                count = max(1, min(later, _PAIR_BLOCK // (later * width)))
                u = buf_u[:count * later * width].reshape(count, later, width)
                logs = buf_l[:u.size].reshape(count, later, width)
                np.add(flat_p[a0:a0 + count, None, :], flat_p[None, a0 + 1:, :], out=u)
                if clamp:
                    np.maximum(u, _TINY, out=logs)
                    np.log(logs, out=logs)
                else:
                    np.log(u, out=logs)
                sums = np.vecdot(u, logs)  # [count, later]; b <= a are not used
                for i in range(count):
                    pair_sums[a0 + i, a0 + 1 + i:] += sums[i, i:]
                a0 += count

    threads = max(1, min(n_threads, len(chunks)))
    if threads == 1:
        parts = [work()]
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            futures = [pool.submit(work) for _ in range(threads)]
            parts = [f.result() for f in futures]
    pair_sums = sum(part[0] for part in parts)
    plogp_total = sum(part[1] for part in parts)
    mass_total = sum(part[2] for part in parts)
    js = (0.5 * (plogp_total[:, None] + plogp_total[None, :]) - 0.5 * pair_sums
          + 0.5 * _LN2 * (mass_total[:, None] + mass_total[None, :]))
    upper = np.triu(js, 1)
    return upper + upper.T


# head_distances compares every pair of heads on every compared row: N^2 x rows x T work.
# Past this much (about 15 s on a laptop core) fewer, evenly spaced rows are compared.
SIMILARITY_WORK = 6e9


# Comparing every row of an input is refused past this much work (N^2 x rows x T, minutes of
# CPU): it asks for max_rows instead.
STREAMED_SIMILARITY_WORK = 10 * SIMILARITY_WORK


def _rows_of_every_head(item, chosen: np.ndarray) -> np.ndarray:
    """The rows `chosen` of every head's map, float32 [N, len(chosen), keys] (N = all heads,
    layer-major): a trace gives them however it holds its maps, an array by indexing."""
    if isinstance(item, AttentionTrace):
        n_layer, n_head, n, _ = item.maps_shape
        flat = np.empty((n_layer * n_head, len(chosen), n), dtype=np.float32)
        for layer in range(n_layer):
            flat[layer * n_head:(layer + 1) * n_head] = item.gather_rows(layer, chosen)
        return flat
    return item.reshape(-1, *item.shape[-2:])[:, chosen]


def rows_in_groups(item, rows: np.ndarray, done: RowsDone):
    """The compared rows of every head, float32 [N, group, keys], a bounded group of rows at
    a time (never more than BLOCK_ELEMENTS floats); done(rows) after each group."""
    from ..maps import ondemand

    shape = maps_shape(item)
    group = max(1, ondemand.BLOCK_ELEMENTS // (int(np.prod(shape[:-2])) * shape[-1]))
    for start in range(0, len(rows), group):
        chosen = rows[start:start + group]
        yield _rows_of_every_head(item, chosen)
        done(len(chosen))


def _js_sum_over_groups(item, rows: np.ndarray, keys: np.ndarray, smoothing: float,
                        renormalize: bool, n_threads: int, done: RowsDone) -> np.ndarray:
    """_js_sum over the compared rows, read a bounded group at a time, the groups' sums
    added."""
    n_maps = int(np.prod(maps_shape(item)[:-2]))
    total = np.zeros((n_maps, n_maps), dtype=np.float64)
    for flat in rows_in_groups(item, rows, done):
        total += _js_sum(flat, np.arange(flat.shape[1]), keys, smoothing, renormalize,
                         n_threads)
    return total


def rows_within_work(n_head: int, n_tokens: int, max_rows: int | None = None,
                     work: float = SIMILARITY_WORK) -> int | None:
    """The max_rows to give head_distances so that comparing n_head heads on n_tokens
    tokens stays within ``work`` (N^2 x rows x T): ``max_rows`` (None = every row) when it
    fits, else the largest row count that does (at least 1)."""
    wanted = n_tokens if max_rows is None else min(int(max_rows), n_tokens)
    affordable = max(1, int(work // (max(n_head, 1) ** 2 * max(n_tokens, 1))))
    return max_rows if wanted <= affordable else affordable


def head_distances(attentions, kind: str = "js", smoothing: float = 1e-3,
                   max_rows: int | None = None, valid_mask=None,
                   n_threads: int | None = None, progress=None) -> np.ndarray:
    """Head-to-head distance matrix. -> float64 [L*H, L*H], head index n = l * H + h.

    kind: "js" = mean over query rows of the Jensen-Shannon divergence (nats, in [0, ln 2]);
        "js_distance" = its square root (a metric). With several inputs the JS divergences
        are averaged over inputs first, then the square root taken.
    smoothing: s in p' = (1 - s) p + s / n applied to every row before comparing (1e-3 as
        in Clark et al.; n = number of keys, T, or the number of valid keys).
    max_rows: None compares every query row; an int compares only that many evenly spaced
        query rows (first and last included), an approximation that makes long inputs cheap:
        the cost is proportional to the number of rows.
    valid_mask: bool [T] (one per input with a list): rows and keys of invalid (padding)
        positions are ignored; rows are renormalized over the valid keys.
    attentions: [L, H, T, T] (or any [..., T, T]), a trace, or a list of them (lengths may
        differ; the mean over inputs); or a MapsSource of [L, H, T, S] maps whose rows run
        over another sequence's S keys (an encoder-decoder's cross-attention,
        EncoderDecoderTrace.source("cross")). Only the compared rows are read, gathered from every
        layer a bounded group at a time; comparing every row when that costs more than
        STREAMED_SIMILARITY_WORK is refused (pass max_rows).
    n_threads: worker threads (default: the CPUs available, at most 8).
    progress: optional callback(done, total) over the compared rows (it may raise to stop
        the computation).

    Computed exactly (no sampling unless max_rows), with float32 elementwise work and float64
    accumulation; values agree with a float64 reference to about 1e-6.
    Cost grows as (L*H)^2 / 2 x rows x keys. Measured for 144 heads (GPT-2 small) at
    T = 1024: about 56 CPU-seconds for a dense (bidirectional) input (about 30 s on two idle
    cores) and about 24 CPU-seconds for a causal one (the masked half is skipped);
    max_rows=256 is roughly four times cheaper.
    """
    if kind not in ("js", "js_distance"):
        raise InputError(f"kind must be 'js' or 'js_distance', got {kind!r}")
    smoothing = float(smoothing)
    if not 0.0 <= smoothing < 1.0:
        raise InputError(f"smoothing must be in [0, 1), got {smoothing}")
    if max_rows is not None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, (int, np.integer)) \
                or max_rows < 1:
            raise InputError(f"max_rows must be None or a positive integer, got {max_rows!r}")
    threads = default_threads() if n_threads is None else int(n_threads)
    items = list(attentions) if is_many(attentions) else [attentions]
    if not any(isinstance(item, MapsSource) for item in items):
        as_inputs(attentions)  # checks them: traces or maps [..., T, T] of one layer/head shape
    masks = per_input(attentions, valid_mask)
    selected = []
    for item, mask in zip(items, masks):
        if isinstance(item, MapsSource):  # maps [L, H, T, S]: cross-attention's T x S
            if mask is not None:
                raise InputError("valid_mask is for maps over one sequence's tokens")
            item = item.maps
        else:
            item = item if isinstance(item, AttentionTrace) else as_array(item)
        shape = maps_shape(item)
        n = shape[-1]  # keys
        mask = check_mask(mask, n)
        positions = np.arange(n) if mask is None else np.flatnonzero(mask)
        if positions.size == 0:
            raise InputError("valid_mask leaves no position")
        queries = positions if shape[-2] == n else np.arange(shape[-2])
        rows = queries[_row_selection(queries.size, max_rows)]
        heads = int(np.prod(shape[:-2]))
        if max_rows is None and float(heads) ** 2 * len(rows) * len(positions) \
                > STREAMED_SIMILARITY_WORK:
            # Said before any work: every row of a long input is minutes to hours of it.
            raise InputError(
                f"comparing all {heads} heads on every one of the {n:,} query rows of this "
                f"long input is too much work; pass max_rows= (e.g. max_rows="
                f"{rows_within_work(heads, n, n)}: evenly spaced rows, the cost is "
                f"proportional to their number)")
        selected.append((item, positions, rows, mask))
    done = RowsDone(progress, sum(len(rows) for _, _, rows, _ in selected))
    results = []
    for item, positions, rows, mask in selected:
        # Only the compared rows are read, a bounded group of them at a time.
        js_sum = _js_sum_over_groups(item, rows, positions, smoothing,
                                     renormalize=mask is not None, n_threads=threads,
                                     done=done)
        results.append(js_sum / len(rows))
    return _finish(np.mean(results, axis=0) if len(results) > 1 else results[0], kind)


def _finish(js: np.ndarray, kind: str) -> np.ndarray:
    """Mean JS over rows -> clipped to [0, ln 2], 0 on the diagonal; its root for
    "js_distance"."""
    js = np.clip(js, 0.0, _LN2)
    np.fill_diagonal(js, 0.0)
    return np.sqrt(js) if kind == "js_distance" else js


class ComparedRows:
    """head_distances of one input as an accumulator (mha_viz.maps.streaming): it keeps, from the
    blocks it is fed, the query rows ``rows`` (sorted, distinct; None: all; a corpus
    segment's sampled_rows) of every head, [L*H, rows, T]; result() compares them. For a
    source that produces every row anyway (a corpus batch); head_distances itself asks a
    trace for the compared rows only."""

    in_place = False

    def __init__(self, n_layer: int, n_head: int, n_tokens: int, rows=None,
                 smoothing: float = 1e-3, n_threads: int | None = None):
        self.n_head, self.n, self.smoothing = n_head, n_tokens, float(smoothing)
        self.threads = default_threads() if n_threads is None else int(n_threads)
        self.rows = np.arange(n_tokens) if rows is None else np.asarray(rows)
        self.flat = np.zeros((n_layer * n_head, len(self.rows), n_tokens), dtype=np.float32)
        self.filled = np.zeros((n_layer, len(self.rows)), dtype=bool)

    def update(self, block) -> None:
        inside = np.flatnonzero((self.rows >= block.start) & (self.rows < block.stop))
        if not inside.size:
            return
        heads = slice(block.layer * self.n_head, (block.layer + 1) * self.n_head)
        # keys past the block's width are zeros (a causal block's cut)
        self.flat[heads][:, inside, :block.width] = block.rows[:, self.rows[inside]
                                                              - block.start]
        self.filled[block.layer, inside] = True

    def merge(self, other: "ComparedRows") -> "ComparedRows":
        taken = np.repeat(other.filled, self.n_head, axis=0)  # [L*H, rows]
        self.flat[taken] = other.flat[taken]
        self.filled |= other.filled
        return self

    def result(self, kind: str = "js") -> np.ndarray:
        if not self.filled.all():
            raise InputError("head distances were asked for before every compared row was read")
        keys = np.arange(self.n)
        js_sum = _js_sum(self.flat, np.arange(len(self.rows)), keys, self.smoothing, False,
                         self.threads)
        return _finish(js_sum / len(self.rows), kind)


def _clean_distances(distances) -> np.ndarray:
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise InputError(f"distances must be a square matrix, got shape {list(d.shape)}")
    if not np.isfinite(d).all():
        raise InputError("distances contain NaN or infinite values")
    d = 0.5 * (d + d.T)
    d = np.maximum(d, 0.0)
    np.fill_diagonal(d, 0.0)
    return d


# Optimal leaf ordering (Bar-Joseph et al. 2001) costs O(N^3) and more on ties: with N heads
# at one distance from each other, 0.14 s at 256 heads but 4.5 s at 768 and 192 s at 2,048
# (scipy 1.16, 2 threads). Above this many heads the leaves keep linkage's own order: every
# cluster still sits in one block, only the order of the two halves of each merge is not
# optimised.
OPTIMAL_ORDER_MAX_HEADS = 512


def cluster_linkage(distances) -> np.ndarray:
    """scipy linkage matrix of average-linkage (UPGMA) clustering, for a dendrogram, with
    optimal leaf ordering up to OPTIMAL_ORDER_MAX_HEADS heads. The matrix is symmetrised and
    its diagonal zeroed first. Needs N >= 2."""
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    d = _clean_distances(distances)
    if d.shape[0] < 2:
        raise InputError("clustering needs at least 2 heads")
    return linkage(squareform(d, checks=False), method="average",
                   optimal_ordering=d.shape[0] <= OPTIMAL_ORDER_MAX_HEADS)


def cluster_order(distances) -> np.ndarray:
    """Leaf order (a permutation of 0..N-1) of average-linkage hierarchical clustering
    (scipy.cluster.hierarchy), with optimal leaf ordering up to OPTIMAL_ORDER_MAX_HEADS
    heads: reorder the matrix as d[o][:, o] so that similar heads sit next to each other."""
    from scipy.cluster.hierarchy import leaves_list

    d = _clean_distances(distances)
    if d.shape[0] <= 2:
        return np.arange(d.shape[0])
    return leaves_list(cluster_linkage(d)).astype(np.int64)


def _classical_mds(d: np.ndarray, dims: int) -> np.ndarray:
    n = d.shape[0]
    squared = d ** 2
    # Double centring by means (O(n^2)), not by two n x n matrix products (O(n^3)).
    row = squared.mean(axis=1)
    gram = -0.5 * (squared - row[:, None] - row[None, :] + row.mean())
    if n > 64:  # only the top `dims` eigenpairs are needed
        from scipy.sparse.linalg import eigsh

        values, vectors = eigsh(gram, k=dims, which="LA",
                                v0=np.ones(n) / np.sqrt(n))  # v0: the same result every run
    else:
        values, vectors = np.linalg.eigh(gram)
    top = np.argsort(values)[::-1][:dims]
    return vectors[:, top] * np.sqrt(np.maximum(values[top], 0.0))


def _pairwise(x: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of x, [N, N], without an [N, N, dims] temporary."""
    norms = (x ** 2).sum(axis=1)
    squared = norms[:, None] + norms[None, :] - 2.0 * (x @ x.T)
    np.maximum(squared, 0.0, out=squared)
    np.fill_diagonal(squared, 0.0)
    return np.sqrt(squared)


def _stress(d: np.ndarray, x: np.ndarray) -> float:
    return float(((_pairwise(x) - d) ** 2).sum() / 2)


# SMACOF iterations cost ~N^2 each: at most this much work (N^2 x iterations), so a model
# with many heads gets fewer iterations (all 300 up to ~310 heads; 20 at GPT-2 XL's 1,200).
MDS_WORK = 3e7


def mds_2d(distances, seed: int = 0, max_iter: int = 300, tol: float = 1e-9) -> np.ndarray:
    """Metric MDS of a distance matrix into 2-D. -> float64 [N, 2].

    Minimises the raw stress sum_{i<j} (||x_i - x_j|| - d_ij)^2 by SMACOF (Guttman
    transform iterations, unit weights) starting from classical (Torgerson) MDS; stops when
    the relative stress decrease falls below ``tol`` or after ``max_iter`` iterations (fewer
    for many heads: at most MDS_WORK / N^2, so the work stays bounded).
    ``seed`` only matters when the classical start is degenerate (all points at one place):
    then a seeded random start is used. The result is centred and each axis' sign fixed (its
    largest-magnitude coordinate positive), so it is deterministic.
    """
    d = _clean_distances(distances)
    n = d.shape[0]
    if n == 0:
        return np.zeros((0, 2))
    if n == 1:
        return np.zeros((1, 2))
    x = _classical_mds(d, 2)
    scale = d.max()
    if scale == 0:
        return np.zeros((n, 2))
    if np.abs(x).max() < 1e-12 * scale:
        x = np.random.default_rng(seed).standard_normal((n, 2)) * scale
    previous = _stress(d, x)
    for _ in range(min(max_iter, max(1, int(MDS_WORK // (n * n))))):
        fitted = _pairwise(x)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(fitted > 0, d / fitted, 0.0)
        b = -ratio
        np.fill_diagonal(b, 0.0)
        np.fill_diagonal(b, -b.sum(axis=1))
        x = b @ x / n
        current = _stress(d, x)
        if previous - current <= tol * max(previous, 1e-300):
            previous = current
            break
        previous = current
    x = x - x.mean(axis=0)
    for axis in range(2):
        if x[np.argmax(np.abs(x[:, axis])), axis] < 0:
            x[:, axis] = -x[:, axis]
    return x
