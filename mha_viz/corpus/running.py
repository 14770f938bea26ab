"""Running the statistics over segments: in padded batches, one layer at a time, in one
process or in a pool of local processes."""

from __future__ import annotations

import math
import time
from typing import Callable, Sequence

import numpy as np

from ..errors import InputError
from .results import CorpusResult, Moments
from .segments import Segments, corpus_model
from .statistics import SIMILARITY_ROWS, STATS, SegmentStatistics, _check_stats, _importance

PRUNING_SEGMENTS = 32  # the pruning curve re-estimates importance at every step: a sample


def _batch_statistics(model, batch: list[list[int]], stats: Sequence[str],
                      similarity_rows: int | None) -> list[dict[str, np.ndarray]]:
    """One padded forward for a batch of segments, run a layer at a time: each layer's
    maps go to every segment's accumulators while they are fresh, and are dropped; -> each
    segment's statistics."""
    from ..streaming import RowBlock

    info = model.info
    from_maps = [s for s in stats if s in STATS]
    segments = []
    for ids in batch:
        tokens, display = model.token_labels(ids)
        segments.append(SegmentStatistics(from_maps, tokens, display, ids, info.n_layer,
                                          info.n_head, info.causal, similarity_rows))
    if from_maps:
        for layer, weights in model.attention_by_layer(batch):
            for row, (ids, segment) in enumerate(zip(batch, segments)):
                n = len(ids)
                segment.update(RowBlock(layer, 0, n, weights[row, :, :n, :n]))
    return [{**(segment.result() if from_maps else {}), **_importance(model, ids, stats)}
            for ids, segment in zip(batch, segments)]


def default_batch_size(model, seg_len: int) -> int:
    """Segments per forward: one layer's scores and weights (2 x H x T^2 floats; the batch
    runs a layer at a time) within about 256 MB."""
    per_segment = 2 * model.info.n_head * seg_len * seg_len * 4
    return int(max(1, min(64, (256 * 2**20) // max(per_segment, 1))))


def run_shard(model, segments: Sequence[Sequence[int]], stats: Sequence[str] = STATS,
              batch_size: int | None = None, progress: Callable | None = None,
              similarity_rows: int | None = SIMILARITY_ROWS) -> CorpusResult:
    """The statistics of these segments (a model, or a name load_model understands)."""
    if isinstance(model, str):
        from ..model import load_model

        model = load_model(model)
    model = corpus_model(model)
    stats = _check_stats(stats, model)
    segments = [list(map(int, s)) for s in segments]
    seg_len = max((len(s) for s in segments), default=1)
    batch_size = batch_size or default_batch_size(model, seg_len)
    # similar lengths together: less padding (the order does not change the moments)
    order = sorted(range(len(segments)), key=lambda i: len(segments[i]))
    per_segment = [s for s in stats if s != "pruning"]  # the curve is over the corpus
    if not per_segment:
        return CorpusResult({}, len(segments), sum(len(s) for s in segments))
    result = CorpusResult({}, 0, 0)
    for start in range(0, len(order), batch_size):
        batch = [segments[i] for i in order[start:start + batch_size]]
        for ids, values in zip(batch, _batch_statistics(model, batch, per_segment,
                                                        similarity_rows)):
            result = result.merge(CorpusResult({k: Moments.of(v) for k, v in values.items()},
                                               1, len(ids)))
        if progress is not None:
            progress(min(start + batch_size, len(order)), len(order))
    return result


def run(model, segments: Segments | Sequence[Sequence[int]], stats: Sequence[str] = STATS,
        batch_size: int | None = None, workers: int = 1, progress: Callable | None = None,
        similarity_rows: int | None = SIMILARITY_ROWS, address: str | None = None
        ) -> CorpusResult:
    """Statistics over every segment: mean and spread per head. workers > 1 runs shards on
    that many Ray actors of a local Ray instance, and address (auto, HOST:PORT) on that
    cluster's (each loads the model by its name). progress(done, total) is called as
    segments finish; if it raises (a cancelled job), the run stops."""
    model = corpus_model(model)
    stats = _check_stats(stats, model)
    ids = segments.ids if isinstance(segments, Segments) else [list(s) for s in segments]
    if not ids:
        raise InputError("the corpus has no segments")
    started = time.perf_counter()
    if workers <= 1 and address is None:
        result = run_shard(model, ids, stats, batch_size, progress, similarity_rows)
    else:
        result = _run_on_ray(model, ids, stats, batch_size, max(1, int(workers)), progress,
                             similarity_rows, address)
    if "pruning" in stats:  # iterative over the corpus: one curve, on a sample of segments
        from ..analysis.pruning import pruning_curve

        sample = [model.encoding_of_ids(s) for s in ids[:PRUNING_SEGMENTS]]
        curve = pruning_curve(model, sample, by="gradient")
        result.curves.update(pruning_curve_fraction=np.asarray(curve.fractions),
                             pruning_curve_score=np.asarray(curve.scores))
        result.info["pruning_segments"] = len(sample)
    result.info.update(model=model.info.name, stats=list(stats), seconds=round(
        time.perf_counter() - started, 3), similarity_rows=similarity_rows)
    if isinstance(segments, Segments):
        result.info.update(seg_len=segments.seg_len, n_texts=segments.n_texts,
                           n_dropped=segments.n_dropped)
    return result


def _run_on_ray(model, ids, stats, batch_size, workers, progress, similarity_rows,
                address=None) -> CorpusResult:
    """Shards of the segments on ``workers`` Ray actors: of a local instance, or of the
    cluster at address."""
    from .ray_engine import run_on_ray
    from .shards import SHARD_SEGMENTS, shards_of

    size = max(1, min(SHARD_SEGMENTS, math.ceil(len(ids) / (2 * workers))))
    state = {"result": CorpusResult({}, 0, 0)}

    def finished(shard, part: CorpusResult) -> None:
        state["result"] = state["result"].merge(part)
        if progress is not None:
            progress(state["result"].n_segments, len(ids))

    settings = dict(stats=stats, batch_size=batch_size, similarity_rows=similarity_rows)
    run_on_ray(model.info.name, shards_of(ids, size), settings, workers, address, None,
               finished)
    return state["result"]


def cache_key(model, segments: Segments, stats: Sequence[str],
              similarity_rows: int | None = SIMILARITY_ROWS) -> tuple:
    """What identifies a run: the model (and the stack it reads), the segments' ids and the
    settings."""
    reader = corpus_model(model)
    return ("corpus", model.info.name, getattr(reader, "kind", None), segments.digest(),
            tuple(stats), similarity_rows)
