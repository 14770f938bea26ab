"""A corpus of any size, streamed: texts -> segments -> shards -> an engine -> merged moments.

    from mha_viz import corpus, load_model
    model = load_model("minilm")
    texts = corpus.open_texts("corpus.parquet", column="text")
    result = corpus.run_stream(model, texts, engine="ray", workers=4, checkpoint="run1/")

Engines: "local" runs every shard in this process (no Ray needed); "ray" runs them on Ray
actors, each loading the model once (a local Ray instance of ``workers`` CPUs, or the cluster
at ``address``). Shards merge exactly (CorpusResult.merge), so the numbers are those of one
process whatever the engine, the number of workers or the order shards finish in. With a
checkpoint folder every finished shard is kept, and a run started again on the same input
and settings reads them back instead of running them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

from ..analysis.head_statistics import per_segment
from ..core.errors import InputError
from ..maps.value_weighted import check_weights
from .results import CorpusResult
from ..models.segments import MIN_SEGMENT_TOKENS, SegmentCounts, corpus_model, iter_segments
from .shards import SHARD_SEGMENTS, Checkpoint, Shard, shards_of
from .sources import TextStream
from .statistics import SIMILARITY_ROWS, STATS, _check_stats

ENGINES = ("local", "ray")


@dataclass
class Progress:
    """Where a streamed run is, for a progress bar."""
    segments: int  # finished (run or read back from the checkpoint)
    tokens: int
    shards: int
    resumed: int  # shards read back from the checkpoint
    texts_read: int
    texts_total: int | None  # when the input says how many there are
    seconds: float
    tokens_run: int  # tokens of the shards run now (not read back): what the speed counts

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_run / self.seconds if self.seconds > 0 else 0.0

    @property
    def seconds_left(self) -> float | None:
        """From the share of the texts read so far; None when the total is unknown."""
        if not self.texts_total or not self.texts_read or self.seconds <= 0:
            return None
        share = min(1.0, self.texts_read / self.texts_total)
        return self.seconds * (1 - share) / share if share > 0 else None


def run_stream(model, texts: Iterable[str], seg_len: int = 128, stats: Sequence[str] = STATS,
               *, engine: str = "local", workers: int = 1, address: str | None = None,
               checkpoint=None, input_name: str = "", shard_segments: int = SHARD_SEGMENTS,
               max_segments: int | None = None, min_len: int = MIN_SEGMENT_TOKENS,
               texts_total: int | None = None, batch_size: int | None = None,
               similarity_rows: int | None = SIMILARITY_ROWS, threads: int | None = None,
               progress: Callable[[Progress], None] | None = None,
               weights: str = "attention") -> CorpusResult:
    """Every statistic over the segments of a stream of texts (see the module docstring).
    input_name: what the checkpoint records of the input (a file's name; with the shards'
    own digests it tells a resumed run from a run on another input). weights="value": the
    statistics of maps read the value-weighted maps."""
    stats = _check_stats(stats, corpus_model(model))
    check_weights(weights)
    at_once = [name for name in stats if name not in per_segment(stats)]
    if at_once:
        raise InputError(f"{', '.join(at_once)} is measured over the whole corpus at once, "
                         f"not streamed: run it on a sample with corpus.run")
    if engine not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    workers = int(workers)
    if workers < 1:
        raise InputError(f"workers must be at least 1, got {workers}")
    counts = SegmentCounts()
    # A Parquet input on Ray: each worker reads its own row groups (in parallel); else this
    # process reads the texts and cuts the segments, and workers get shards of them.
    groups = (texts.row_groups() if engine == "ray" and isinstance(texts, TextStream)
              and max_segments is None else None)
    if groups is not None:
        shards = iter(groups)
    else:
        shards = shards_of(iter_segments(model, texts, seg_len, min_len, max_segments,
                                         counts), shard_segments)
    store = None
    if checkpoint is not None:
        store = Checkpoint(checkpoint, dict(
            model=model.info.name, stats=list(stats), seg_len=int(seg_len),
            min_len=int(min_len), shard_segments=int(shard_segments),
            max_segments=max_segments, similarity_rows=similarity_rows, input=input_name,
            # recorded when not the weights: a folder of an earlier run still resumes
            **({} if weights == "attention" else {"weights": weights}),
            units="row groups" if groups is not None else "segments"))
    started = time.perf_counter()
    state = {"result": CorpusResult({}, 0, 0), "shards": 0, "resumed": 0, "tokens_run": 0}

    def finished(shard: Shard, result: CorpusResult, resumed: bool = False) -> None:
        if store is not None and not resumed:
            store.save(shard, result)
        if groups is not None:  # the worker cut the texts: its counts come with the result
            info = result.info
            counts.texts_read += info.pop("texts_read", 0)
            counts.n_texts += info.pop("n_texts", 0)
            counts.n_dropped += info.pop("n_dropped", 0)
            texts.skipped += info.pop("skipped", 0)
            counts.n_segments += result.n_segments
        state["result"] = state["result"].merge(result)
        state["shards"] += 1
        state["resumed"] += resumed
        state["tokens_run"] += 0 if resumed else result.n_tokens
        if progress is not None:
            done = state["result"]
            progress(Progress(done.n_segments, done.n_tokens, state["shards"],
                              state["resumed"], counts.texts_read, texts_total,
                              time.perf_counter() - started, state["tokens_run"]))

    def to_run() -> Iterator[Shard]:
        for shard in shards:
            kept = None if store is None else store.load(shard)
            if kept is None:
                yield shard
            else:
                finished(shard, kept, resumed=True)

    settings = dict(stats=stats, batch_size=batch_size, similarity_rows=similarity_rows,
                    weights=weights)
    if engine == "local":
        from .measuring import run_shard

        for shard in to_run():
            finished(shard, run_shard(model, shard.ids, **settings))
    else:
        from .ray_engine import run_on_ray

        run_on_ray(model.info.name, to_run(), settings, workers, address, threads, finished,
                   row_groups=None if groups is None else (int(seg_len), int(min_len)),
                   placement=(model.info.dtype, model.info.device))
    result = state["result"]
    if not result.n_segments:
        raise InputError(f"every text is shorter than {min_len} tokens: nothing to measure "
                         f"({counts.n_dropped} piece(s) dropped)")
    result.info.pop("shard_digest", None)
    result.info.update(model=model.info.name, stats=list(stats), seg_len=int(seg_len),
                       n_texts=counts.n_texts, n_dropped=counts.n_dropped,
                       texts_read=counts.texts_read, engine=engine, workers=workers,
                       shards=state["shards"], resumed_shards=state["resumed"],
                       similarity_rows=similarity_rows, weights=weights,
                       seconds=round(time.perf_counter() - started, 3))
    return result

