"""Running the statistics over a corpus held in memory: its segments as one shard in this
process (measuring.run_shard), or as shards on Ray actors; the pruning curve over a sample."""

from __future__ import annotations

import math
import time
from typing import Callable, Sequence

from ..analysis.head_statistics import REGISTRY, SAMPLE_SEGMENTS, over_sample
from ..core.errors import InputError
from ..maps.value_weighted import check_weights
from .measuring import run_shard
from .results import CorpusResult
from ..models.segments import Segments, corpus_model
from .statistics import SIMILARITY_ROWS, STATS, _check_stats

# the pruning curve re-estimates importance at every step over the whole sample
PRUNING_SEGMENTS = SAMPLE_SEGMENTS


def run(model, segments: Segments | Sequence[Sequence[int]], stats: Sequence[str] = STATS,
        batch_size: int | None = None, workers: int = 1, progress: Callable | None = None,
        similarity_rows: int | None = SIMILARITY_ROWS, address: str | None = None,
        weights: str = "attention") -> CorpusResult:
    """Statistics over every segment: mean and spread per head. workers > 1 runs shards on
    that many Ray actors of a local Ray instance, and address (auto, HOST:PORT) on that
    cluster's (each loads the model by its name). progress(done, total) is called as
    segments finish; if it raises (a cancelled job), the run stops. weights="value": the
    statistics of maps read the value-weighted maps (Model.trace's weights)."""
    model = corpus_model(model)
    stats = _check_stats(stats, model)
    check_weights(weights)
    ids = segments.ids if isinstance(segments, Segments) else [list(s) for s in segments]
    if not ids:
        raise InputError("the corpus has no segments")
    started = time.perf_counter()
    if workers <= 1 and address is None:
        result = run_shard(model, ids, stats, batch_size, progress, similarity_rows, weights)
    else:
        result = _run_on_ray(model, ids, stats, batch_size, max(1, int(workers)), progress,
                             similarity_rows, address, weights)
    sample = ids[:PRUNING_SEGMENTS]  # a statistic over the corpus at once: on its sample
    curves = over_sample(model, sample, stats)
    if curves:
        result.curves.update(curves)
        result.info.update({f"{name}_segments": len(sample) for name in stats
                            if not REGISTRY[name].per_segment})
    result.info.update(model=model.info.name, stats=list(stats), seconds=round(
        time.perf_counter() - started, 3), similarity_rows=similarity_rows, weights=weights,
        similarity_sampling="stratified")  # which rows: similarity.sampled_rows
    if isinstance(segments, Segments):
        result.info.update(seg_len=segments.seg_len, n_texts=segments.n_texts,
                           n_dropped=segments.n_dropped)
    return result


def _run_on_ray(model, ids, stats, batch_size, workers, progress, similarity_rows,
                address=None, weights="attention") -> CorpusResult:
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

    settings = dict(stats=stats, batch_size=batch_size, similarity_rows=similarity_rows,
                    weights=weights)
    run_on_ray(model.info.name, shards_of(ids, size), settings, workers, address, None,
               finished, placement=(model.info.dtype, model.info.device))
    return state["result"]
