"""Measuring one shard of segments in this process: padded batches run one layer at a time,
each layer's maps read by every segment's statistics while they are fresh. The one function
that every engine (one process, Ray actors, a cluster) calls for its shards."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Callable, Sequence

import numpy as np

from ..analysis import head_statistics
from ..maps.summaries import ScoreEntropies, batch_summaries
from .results import CorpusResult, Moments
from ..models.segments import corpus_model
from .statistics import (FROM_MAPS, SIMILARITY_ROWS, STATS, SegmentStatistics, _check_stats,
                         _importance)


def _batch_statistics(model, batch: list[list[int]], stats: Sequence[str],
                      similarity_rows: int | None, weights: str = "attention"
                      ) -> list[dict[str, np.ndarray]]:
    """One padded forward for a batch of segments, run a layer at a time: each layer's
    maps (the weights, or value-weighted: weights="value") go to every segment's
    accumulators while they are fresh, and are dropped; -> each segment's statistics.
    The segments' statistics run on as many threads as the forward (torch's count), a share
    of the segments each: numpy works on one core, and a segment's accumulators touch only
    its own rows, so the numbers do not depend on the threads."""
    info = model.info
    from_maps = [s for s in stats if s in FROM_MAPS]
    groups = _thread_groups(len(batch))
    segments = []
    for ids in batch:
        tokens, display = model.token_labels(ids)
        segments.append(SegmentStatistics(from_maps, tokens, display, ids, info.n_layer,
                                          info.n_head, info.causal, similarity_rows,
                                          model.special_tokens,
                                          threads=1 if len(groups) > 1 else None))
    results: list[dict[str, np.ndarray]] = [{} for _ in batch]
    if from_maps:
        lengths = [len(ids) for ids in batch]
        parts = segments[0].summary_parts
        with ThreadPoolExecutor(max_workers=len(groups)) as pool:
            # a softmax's rows: their entropies from the scores, as the forward runs
            scored = ScoreEntropies(info.causal) if (
                "entropy" in parts and weights == "attention") else None
            for layer, maps in model.attention_by_layer(batch, weights, hooks=scored):
                # each row's entropy sums and each key's mass, for the whole batch at once on
                # torch's threads (maps.summaries); the rest reads each segment's rows
                summaries = batch_summaries(maps, lengths, info.causal, parts, None if (
                    scored is None) else scored.sums.pop(layer))
                list(pool.map(partial(_update_rows, segments, batch, layer, maps, summaries),
                              groups))
            for rows, values in zip(groups, pool.map(partial(_results, segments), groups)):
                results[rows.start:rows.stop:rows.step] = values
    return [{**values, **_importance(model, ids, stats)}
            for ids, values in zip(batch, results)]


def _update_rows(segments, batch, layer: int, maps: np.ndarray, summaries, rows: range
                 ) -> None:
    """Layer `layer`'s maps of the batch, and each segment's summary of them, to the
    accumulators of the segments in rows."""
    from ..maps.streaming import RowBlock

    for row in rows:
        n = len(batch[row])
        # the layer's maps are this batch's own and dropped after: the entropy, given the
        # block last, may work in it instead of copying it
        segments[row].update(RowBlock(layer, 0, n, maps[row, :, :n, :n], owned=True,
                                      summary=summaries[row]))


def _results(segments, rows: range) -> list[dict[str, np.ndarray]]:
    return [segments[row].result() for row in rows]


def _thread_groups(n_segments: int) -> list[range]:
    """The batch's rows shared out to threads (torch's thread count: the forward's own
    budget, which a Ray actor sets), every n-th row to one: the batch is sorted by length,
    so each thread gets short and long segments alike."""
    import torch

    threads = max(1, min(int(torch.get_num_threads()), n_segments))
    return [range(first, n_segments, threads) for first in range(threads)]


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
