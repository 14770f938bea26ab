"""Head diversity as the multi-head-attention texts define it (docs/analyses.md, "Head
similarity"): the cosine similarity of two heads' attention maps, each map read as one long
vector. 1 when one map is a multiple of the other (for maps whose rows sum to 1: the same map),
0 when no query attends to a key in both. The JS divergence (similarity.head_distances)
compares the maps row by row as distributions; the cosine weighs rows by how peaked they are.
"""

from __future__ import annotations

import numpy as np

from ..core.arrays import RowsDone, as_inputs, maps_shape
from ..core.errors import InputError
from ..maps.trace import AttentionTrace
from .similarity import _row_selection, head_distances, rows_in_groups


def map_cosine_similarity(attentions, max_rows: int | None = None,
                          progress=None) -> np.ndarray:
    """[L*H, L*H] (head n = l * H + h): cos(vec A_a, vec A_b) over the compared query rows
    (every row, or max_rows evenly spaced ones, first and last included, as head_distances
    samples them). attentions: maps [L, H, T, T] (or cross-attention's [L, H, T, S]) or a
    trace (whole or on demand: only the compared rows are computed, a bounded group at a
    time). progress(done, total) over rows."""
    if isinstance(attentions, AttentionTrace):
        as_inputs(attentions)
        item = attentions
    else:  # maps [..., T, S]: square, or cross-attention's target x source
        item = np.asarray(attentions, dtype=np.float32)
        if item.ndim < 3 or 0 in item.shape or not np.isfinite(item).all():
            raise InputError(f"attention maps [..., T, S] of finite numbers are needed, got "
                             f"shape {list(item.shape)}")
    shape = maps_shape(item)
    n_maps = int(np.prod(shape[:-2]))
    if max_rows is not None and (isinstance(max_rows, bool) or int(max_rows) < 1):
        raise InputError(f"max_rows must be None or a positive integer, got {max_rows!r}")
    rows = _row_selection(shape[-2], max_rows)
    gram = np.zeros((n_maps, n_maps))
    for flat in rows_in_groups(item, rows, RowsDone(progress, len(rows))):
        flat = flat.reshape(n_maps, -1)
        gram += (flat @ flat.T).astype(np.float64)  # float32 products, summed in float64
    norms = np.sqrt(np.clip(np.diag(gram), 0.0, None))
    with np.errstate(divide="ignore", invalid="ignore"):
        cosine = gram / norms[:, None] / norms[None, :]
    cosine[~np.isfinite(cosine)] = 0.0  # a map that is all zeros on these rows
    np.fill_diagonal(cosine, 1.0)
    return np.clip(cosine, -1.0, 1.0)


def map_cosine_distances(attentions, max_rows: int | None = None, progress=None
                         ) -> np.ndarray:
    """1 - map_cosine_similarity: 0 for identical maps, 1 for maps with no attended
    (query, key) pair in common; what clustering and the 2-D map of heads take."""
    return 1.0 - map_cosine_similarity(attentions, max_rows, progress)


# The distances between heads: the JS divergence, its root, 1 − the maps' cosine (their
# names as a reader sees them are ui.words.similarity's)
DISTANCE_KINDS = ("js", "js_distance", "cosine")


def distances_of_kind(maps, kind: str, max_rows: int | None = None) -> np.ndarray:
    """[N, N] the chosen distance between every pair of heads: JS (divergence or distance,
    similarity.head_distances) or 1 − the cosine of the maps (map_cosine_distances)."""
    if kind not in DISTANCE_KINDS:
        raise InputError(f"distance kind must be one of {', '.join(DISTANCE_KINDS)}, "
                         f"got {kind!r}")
    if kind == "cosine":
        return map_cosine_distances(maps, max_rows=max_rows)
    return head_distances(maps, kind=kind, max_rows=max_rows)
