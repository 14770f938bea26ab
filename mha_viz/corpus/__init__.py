"""Layer 5, corpus: the head statistics over many texts, read from files, segmented, run in
batches in one process, local processes or Ray actors, and merged exactly.

May import: core, maps, models, analysis, dictionaries.

Head statistics over a corpus, as the papers measure them (Clark et al. 2019 average over
about a thousand 128-token segments): mean and spread over segments, streamed.

    from mha_viz import corpus, load_model
    model = load_model("minilm")
    texts = corpus.demo_texts()                       # or corpus.read_corpus(data, "x.csv", "text")
    segments = corpus.segment(model, texts, seg_len=128)
    result = corpus.run(model, segments)              # progress=callback(done, total)
    result.mean("entropy"), result.std("entropy")     # [L, H], nats, over segments
    result.save("results.npz")                        # read back with CorpusResult.load

How it works:

- Texts are tokenized without special tokens and cut into segments of ``seg_len`` tokens
  including the model's own special tokens ([CLS] ... [SEP] for BERT); a text is never
  packed together with another, and a final piece shorter than ``min_len`` is dropped and
  counted.
- Segments run in padded batches (similar lengths together; padding is masked, so each
  segment's maps are the ones it gets alone, to float rounding), one layer at a time
  (model.attention_by_layer): each layer's maps go to every segment's accumulators
  (SegmentStatistics, mha_viz.maps.streaming) while they are fresh, then are dropped, and each
  segment's statistics are added to running moments as its batch comes out: memory does not
  grow with the corpus, and no segment's trace is built.
- Moments merge exactly (Chan et al.'s parallel update of count, mean and squared
  deviations), so a corpus split into shards gives the same answer however it is split.
  ``run(..., workers=N)`` runs shards on N Ray actors with ``run_shard``.
- A corpus of any size streams (``open_texts`` -> ``run_stream``): texts read a batch at a
  time from .txt/.csv/.jsonl/Parquet/Arrow files, folders and saved datasets, segments cut as
  they come, shards of SHARD_SEGMENTS run on the "local" or "ray" engine, finished shards kept
  in a checkpoint folder so an interrupted run resumes.

The package, by job: reading (texts of a small file), sources (texts streamed from files of
any size), segments (texts cut into token-id segments: models/segments.py), shards (groups of segments, and the
checkpoint that keeps them), statistics (one segment's accumulators), results (moments that
merge, their files), running (batches of one shard), engines (a stream of shards, local or
on Ray), ray_engine (the actors).

On a cluster: ``run_stream(..., engine="ray", address="auto")`` joins it; each actor runs
``run_shard`` (a plain function of picklable arguments, returning a picklable CorpusResult,
which a Dask delayed call could run as well) and ``CorpusResult.merge`` combines what they
return, in any order or grouping.
"""

from .engines import ENGINES, Progress, run_stream
from .feature_snippets import FeatureSnippets, feature_snippets, feature_snippets_job
from .measuring import default_batch_size, run_shard
from .reading import MAX_CORPUS_BYTES, CorpusText, columns_of, demo_texts, read_corpus
from .results import CorpusResult, Moments
from .running import PRUNING_SEGMENTS, run
from ..models.segments import MIN_SEGMENT_TOKENS, Segments, corpus_model, iter_segments, segment
from .shards import SHARD_SEGMENTS, Checkpoint, Shard, shards_of
from .sources import TextStream, open_texts
from .statistics import (ALL_STATS, IMPORTANCE, SIMILARITY_ROWS, STATS, SegmentStatistics,
                         segment_statistics, statistics_for)

__all__ = [
    "MAX_CORPUS_BYTES", "CorpusText", "columns_of", "demo_texts", "read_corpus",
    "CorpusResult", "Moments", "PRUNING_SEGMENTS", "default_batch_size", "run",
    "run_shard", "MIN_SEGMENT_TOKENS", "Segments", "segment", "ALL_STATS", "IMPORTANCE",
    "SIMILARITY_ROWS", "STATS", "SegmentStatistics", "segment_statistics", "statistics_for",
    "TextStream",
    "open_texts", "ENGINES", "Progress", "run_stream", "iter_segments", "SHARD_SEGMENTS",
    "Checkpoint", "Shard", "shards_of", "corpus_model", "FeatureSnippets", "feature_snippets",
    "feature_snippets_job",
]
