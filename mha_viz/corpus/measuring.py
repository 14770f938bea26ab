"""Measuring one shard of segments in this process: padded batches run one layer at a time,
each layer's maps read by every segment's statistics while they are fresh. The one function
that every engine (one process, Ray actors, a cluster) calls for its shards."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..analysis import head_statistics
from .results import CorpusResult, Moments
from ..models.segments import corpus_model
from .statistics import (FROM_MAPS, SIMILARITY_ROWS, STATS, SegmentStatistics, _check_stats,
                         _importance)


def _batch_statistics(model, batch: list[list[int]], stats: Sequence[str],
                      similarity_rows: int | None, weights: str = "attention"
                      ) -> list[dict[str, np.ndarray]]:
    """One padded forward for a batch of segments, run a layer at a time: each layer's
    maps (the weights, or value-weighted: weights="value") go to every segment's
    accumulators while they are fresh, and are dropped; -> each segment's statistics."""
    from ..maps.streaming import RowBlock

    info = model.info
    from_maps = [s for s in stats if s in FROM_MAPS]
    segments = []
    for ids in batch:
        tokens, display = model.token_labels(ids)
        segments.append(SegmentStatistics(from_maps, tokens, display, ids, info.n_layer,
                                          info.n_head, info.causal, similarity_rows,
                                          model.special_tokens))
    if from_maps:
        for layer, maps in model.attention_by_layer(batch, weights):
            for row, (ids, segment) in enumerate(zip(batch, segments)):
                n = len(ids)
                # the layer's maps are this batch's own and dropped after: the entropy,
                # given the block last, may work in it instead of copying it
                segment.update(RowBlock(layer, 0, n, maps[row, :, :n, :n], owned=True))
    return [{**(segment.result() if from_maps else {}), **_importance(model, ids, stats)}
            for ids, segment in zip(batch, segments)]


def default_batch_size(model, seg_len: int) -> int:
    """Segments per forward: one layer's scores and weights (2 x H x T^2 floats; the batch
    runs a layer at a time) within about 256 MB."""
    per_segment = 2 * model.info.n_head * seg_len * seg_len * 4
    return int(max(1, min(64, (256 * 2**20) // max(per_segment, 1))))


def run_shard(model, segments: Sequence[Sequence[int]], stats: Sequence[str] = STATS,
              batch_size: int | None = None, progress: Callable | None = None,
              similarity_rows: int | None = SIMILARITY_ROWS, weights: str = "attention"
              ) -> CorpusResult:
    """The statistics of these segments (a model, or a name load_model understands), read
    from the attention weights or, weights="value", from the value-weighted maps."""
    if isinstance(model, str):
        from ..models.model import load_model

        model = load_model(model)
    model = corpus_model(model)
    stats = _check_stats(stats, model)
    segments = [list(map(int, s)) for s in segments]
    seg_len = max((len(s) for s in segments), default=1)
    batch_size = batch_size or default_batch_size(model, seg_len)
    # similar lengths together: less padding (the order does not change the moments)
    order = sorted(range(len(segments)), key=lambda i: len(segments[i]))
    per_segment = head_statistics.per_segment(stats)  # not a curve over the corpus
    if not per_segment:
        return CorpusResult({}, len(segments), sum(len(s) for s in segments))
    result = CorpusResult({}, 0, 0)
    for start in range(0, len(order), batch_size):
        batch = [segments[i] for i in order[start:start + batch_size]]
        for ids, values in zip(batch, _batch_statistics(model, batch, per_segment,
                                                        similarity_rows, weights)):
            result = result.merge(CorpusResult({k: Moments.of(v) for k, v in values.items()},
                                               1, len(ids)))
        if progress is not None:
            progress(min(start + batch_size, len(order)), len(order))
    return result
