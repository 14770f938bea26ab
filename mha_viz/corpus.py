"""Head statistics over a corpus, as the papers measure them (Clark et al. 2019 average over
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
  (SegmentStatistics, mha_viz.streaming) while they are fresh, then are dropped, and each
  segment's statistics are added to running moments as its batch comes out: memory does not
  grow with the corpus, and no segment's trace is built.
- Moments merge exactly (Chan et al.'s parallel update of count, mean and squared
  deviations), so a corpus split into shards gives the same answer however it is split.
  ``run(..., workers=N)`` runs shards in N local processes with ``run_shard``.

On a cluster: ``run_shard(model_name, segments, stats)`` is a plain top-level function of
picklable arguments returning a picklable CorpusResult, so a Ray task
(``ray.remote(run_shard).remote(name, shard, stats)``) or a Dask delayed call runs it
unchanged on each worker; ``CorpusResult.merge`` combines what they return, in any order
or grouping.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from .errors import InputError
from .text import decode_text_file
from .trace import AttentionTrace

STATS = ("entropy", "mass", "roles", "similarity")  # from the maps: the default
# Head importance, per segment: an exact ablation sweep (a forward per head from its layer
# up) and Michel et al.'s gradient importance; and the pruning curve over the corpus.
IMPORTANCE = ("ablation", "gradient", "pruning")
ALL_STATS = STATS + IMPORTANCE
PRUNING_SEGMENTS = 32  # the pruning curve re-estimates importance at every step: a sample
# Head-to-head distances per segment on this many evenly spaced query rows (None: all);
# the pairwise comparison is the costliest statistic, N^2 x rows x T.
SIMILARITY_ROWS = 16
MAX_CORPUS_BYTES = 20 * 2**20  # an uploaded corpus; larger ones belong on the command line
MIN_SEGMENT_TOKENS = 8  # shorter final pieces of a text are dropped (and counted)


# --------------------------------------------------------------------------- reading


@dataclass
class CorpusText:
    """Texts read from a file, and what was left out."""

    texts: list[str]
    source: str  # in words: "demo: Python's documentation", "notes.csv, column 'text'"
    skipped: int = 0  # lines or rows that were not a text (invalid JSON, an empty cell)
    columns: list[str] = field(default_factory=list)  # a CSV's columns / JSON lines' fields


def demo_texts(limit: int | None = None) -> list[str]:
    """A corpus every machine has offline: the topics of the English documentation that
    ships with CPython (pydoc_data.topics), one text per paragraph of 200+ characters."""
    from pydoc_data.topics import topics

    texts = []
    for name in sorted(topics):
        for paragraph in re.split(r"\n\s*\n", topics[name]):
            paragraph = " ".join(paragraph.split())
            if len(paragraph) >= 200:
                texts.append(paragraph)
    return texts if limit is None else texts[:limit]


def _decoded(data: bytes, name: str) -> str:
    return decode_text_file(data, name, MAX_CORPUS_BYTES,
                            "a corpus may have here (the command line takes larger ones)")


def read_corpus(data: bytes, name: str, column: str | None = None) -> CorpusText:
    """Texts from a .txt (one text per line; or per paragraph when blank lines separate
    them), .csv (the ``column``; the first one when not given) or .jsonl (the field
    ``column``, default "text"; lines that are not JSON objects with it are skipped and
    counted). Raises InputError for an empty, binary or unusable file."""
    text = _decoded(data, name)
    kind = name.lower().rsplit(".", 1)[-1]
    if kind == "csv":
        result = _read_csv(text, name, column)
    elif kind in ("jsonl", "ndjson"):
        result = _read_jsonl(text, name, column or "text")
    else:
        pieces = re.split(r"\n\s*\n", text) if re.search(r"\n\s*\n", text.strip()) \
            else text.splitlines()
        result = CorpusText([p.strip() for p in pieces if p.strip()], f"'{name}'")
    if not result.texts:
        raise InputError(f"'{name}' holds no text" + (
            f" ({result.skipped} line(s) skipped)" if result.skipped else ""))
    return result


def columns_of(data: bytes, name: str) -> list[str]:
    """The columns of a .csv (its header) or the fields of a .jsonl's objects (the first
    1,000 lines), for picking the one that holds the texts; [] for other files."""
    text = _decoded(data, name)
    kind = name.lower().rsplit(".", 1)[-1]
    if kind == "csv":
        try:
            return [h.strip() for h in next(csv.reader(io.StringIO(text)), [])]
        except csv.Error:
            return []
    if kind in ("jsonl", "ndjson"):
        fields = {}
        for line in text.splitlines()[:1000]:
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(item, dict):
                fields.update(dict.fromkeys(map(str, item)))
        return list(fields)
    return []


def _read_csv(text: str, name: str, column: str | None) -> CorpusText:
    try:
        reader = csv.reader(io.StringIO(text))
        header = next(reader, None)
        rows = list(reader)
    except csv.Error as error:
        raise InputError(f"'{name}' is not a readable CSV file ({error})") from None
    if not header:
        raise InputError(f"'{name}' has no header row")
    header = [h.strip() for h in header]
    column = header[0] if column is None else column
    if column not in header:
        raise InputError(f"'{name}' has no column '{column}'; its columns are "
                         f"{', '.join(repr(h) for h in header[:20])}")
    at = header.index(column)
    texts = [row[at].strip() for row in rows if len(row) > at and row[at].strip()]
    return CorpusText(texts, f"'{name}', column '{column}'", len(rows) - len(texts), header)


def _read_jsonl(text: str, name: str, field_name: str) -> CorpusText:
    texts, skipped, fields = [], 0, {}
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        if not isinstance(item, dict):
            skipped += 1
            continue
        fields.update(dict.fromkeys(map(str, item)))
        value = item.get(field_name)
        if isinstance(value, str) and value.strip():
            texts.append(value.strip())
        else:
            skipped += 1
    if not texts and fields and field_name not in fields:
        raise InputError(f"'{name}' has no field '{field_name}'; its fields are "
                         f"{', '.join(repr(f) for f in list(fields)[:20])}")
    return CorpusText(texts, f"'{name}', field '{field_name}'", skipped, list(fields))


# --------------------------------------------------------------------------- segments


@dataclass
class Segments:
    """Token-id segments cut from texts, with the counts a page reports."""

    ids: list[list[int]]
    seg_len: int
    n_texts: int  # texts that gave at least one segment
    n_dropped: int  # pieces shorter than MIN_SEGMENT_TOKENS (whole texts or text ends)

    @property
    def n_tokens(self) -> int:
        return sum(len(s) for s in self.ids)

    def digest(self) -> str:
        """A short hash of the token ids: what a cache key needs to name this corpus."""
        h = hashlib.sha256()
        for ids in self.ids:
            h.update(np.asarray(ids, dtype=np.int64).tobytes() + b"|")
        return h.hexdigest()[:16]


def _special_wrapping(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text of its own ([CLS] / [SEP])."""
    plain = tokenizer("hello world", add_special_tokens=False)["input_ids"]
    full = tokenizer("hello world", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start:start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain):])
    return [], []


def segment(model, texts: Iterable[str], seg_len: int = 128,
            min_len: int = MIN_SEGMENT_TOKENS, max_segments: int | None = None) -> Segments:
    """Cut each text into segments of ``seg_len`` tokens, special tokens included."""
    prefix, suffix = _special_wrapping(model.tokenizer)
    seg_len = int(seg_len)
    body = seg_len - len(prefix) - len(suffix)
    if seg_len > model.info.max_positions:
        raise InputError(f"segments of {seg_len} tokens exceed the model's context of "
                         f"{model.info.max_positions}")
    if body < 1 or seg_len < min_len:
        raise InputError(f"a segment length of {seg_len} leaves no room for text")
    out, n_texts, dropped = [], 0, 0
    for text in texts:
        with model._tokenizer_lock:
            ids = model.tokenizer(str(text), add_special_tokens=False, verbose=False)["input_ids"]
        used = False
        for start in range(0, len(ids), body):
            piece = ids[start:start + body]
            if len(piece) + len(prefix) + len(suffix) < min_len:
                dropped += 1
                continue
            out.append(prefix + list(piece) + suffix)
            used = True
            if max_segments is not None and len(out) >= max_segments:
                return Segments(out, seg_len, n_texts + 1, dropped)
        n_texts += used
        dropped += not ids
    if not out:
        raise InputError(f"every text is shorter than {min_len} tokens: nothing to measure "
                         f"({dropped} piece(s) dropped)")
    return Segments(out, seg_len, n_texts, dropped)


# --------------------------------------------------------------------------- moments


@dataclass
class Moments:
    """Running count, mean and sum of squared deviations per element (float64), ignoring
    NaN (a statistic undefined for a segment). Merging is exact and associative."""

    count: np.ndarray
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def of(cls, value: np.ndarray) -> "Moments":
        value = np.asarray(value, dtype=np.float64)
        ok = np.isfinite(value)
        return cls(ok.astype(np.float64), np.where(ok, value, 0.0), np.zeros(value.shape))

    def merge(self, other: "Moments") -> "Moments":
        n = self.count + other.count
        with np.errstate(invalid="ignore", divide="ignore"):
            delta = other.mean - self.mean
            weight = np.where(n > 0, other.count / np.where(n > 0, n, 1), 0.0)
            mean = self.mean + delta * weight
            m2 = self.m2 + other.m2 + delta ** 2 * self.count * weight
        return Moments(n, mean, m2)

    def std(self) -> np.ndarray:
        """Standard deviation over segments (ddof=0; NaN where no segment had a value)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.count > 0, np.sqrt(self.m2 / np.where(self.count > 0,
                                                                       self.count, 1)), np.nan)

    def average(self) -> np.ndarray:
        return np.where(self.count > 0, self.mean, np.nan)


# --------------------------------------------------------------------------- statistics


class SegmentStatistics:
    """Every per-head statistic of one segment computed from its maps (STATS), as
    accumulators (mha_viz.streaming) fed blocks of the segment's rows, from a trace or
    straight from a batch's forward (run_shard): entropy (raw and normalised, one pass),
    token-class mass, the role scores on the text and head distances on the sampled rows.
    The importance statistics need the model again and are not here."""

    def __init__(self, stats: Sequence[str], tokens: list[str], display_tokens: list[str],
                 token_ids, n_layers: int, n_heads: int, causal: bool,
                 similarity_rows: int | None = SIMILARITY_ROWS):
        from .analysis.entropy import RowEntropy
        from .analysis.roles import TEXT_SCORE_KEYS, TextScores
        from .analysis.similarity import ComparedRows
        from .analysis.token_classes import ClassMass

        labels = _Labels(tokens, display_tokens)
        n = len(tokens)
        self.stats = tuple(stats)
        self.entropy = self.mass = self.text = self.compared = None
        if "entropy" in stats or "roles" in stats:
            self.entropy = RowEntropy(n_layers, n_heads, n, causal)
        if "mass" in stats or "roles" in stats:
            self.mass = ClassMass(labels, n_layers, n_heads, n)
        if "roles" in stats:
            self.text = TextScores((n_layers, n_heads), n, np.asarray(token_ids),
                                   TEXT_SCORE_KEYS)
        if "similarity" in stats:
            self.compared = ComparedRows(n_layers, n_heads, n, similarity_rows)

    @property
    def accumulators(self) -> list:
        """In the order a block goes to them (streaming.ordered: the entropy, which may work
        in the block, last)."""
        from .streaming import ordered

        return ordered([a for a in (self.mass, self.text, self.compared, self.entropy)
                        if a is not None])

    def update(self, block) -> None:
        for accumulator in self.accumulators:
            accumulator.update(block)

    def result(self) -> dict[str, np.ndarray]:
        from .analysis.entropy import mean_over_rows
        from .analysis.roles import roles_of

        out = {}
        normalised = mass = None
        if self.entropy is not None:
            normalised = mean_over_rows(self.entropy.result(normalized=True))
        if self.mass is not None:
            mass = self.mass.result()
        if "entropy" in self.stats:
            out["entropy"] = mean_over_rows(self.entropy.result(normalized=False))
            out["entropy_normalised"] = normalised
        if "mass" in self.stats:
            for name, value in mass.items():
                out["mass " + name] = value
        if "roles" in self.stats:
            scores = roles_of(self.text.result("ours"), mass, normalised,
                              self.text.sums["previous token"].shape)
            for name, value in scores.items():
                if name != "entropy":  # the normalised entropy above
                    out["role " + name] = value
        if self.compared is not None:
            out["js_distance"] = self.compared.result()
        return out


@dataclass(frozen=True)
class _Labels:
    """What the token-class mass reads of a segment: its tokens and display tokens."""
    tokens: list[str]
    display_tokens: list[str]


def segment_statistics(trace: AttentionTrace, stats: Sequence[str],
                       similarity_rows: int | None = SIMILARITY_ROWS,
                       model=None) -> dict[str, np.ndarray]:
    """Every per-head statistic of one segment's trace, by name -> array (the importance
    statistics run the model again: they need it)."""
    from .streaming import accumulate, source_of

    out = {}
    from_maps = [s for s in stats if s in STATS]
    if from_maps:
        n_layers, n_heads = trace.maps_shape[:2]
        segment = SegmentStatistics(from_maps, list(trace.tokens), list(trace.display_tokens),
                                    trace.token_ids, n_layers, n_heads, bool(trace.causal),
                                    similarity_rows)
        accumulate(source_of(trace), segment.accumulators)
        out.update(segment.result())
    out.update(_importance(model, trace.token_ids, stats))
    return out


def _importance(model, token_ids, stats) -> dict[str, np.ndarray]:
    """The head-importance statistics of one segment (they run the model again)."""
    from .analysis.pruning import ablation_effects, gradient_importance

    out = {}
    if "ablation" in stats:
        out["ablation_effect"] = ablation_effects(model, [model.encoding_of_ids(token_ids)])
    if "gradient" in stats:
        out["gradient_importance"] = gradient_importance(model, [model.encoding_of_ids(
            token_ids)])
    return out


def _check_stats(stats) -> tuple[str, ...]:
    stats = tuple(stats)
    unknown = [s for s in stats if s not in ALL_STATS]
    if unknown or not stats:
        raise InputError(f"statistics must be some of {', '.join(ALL_STATS)}, got {stats}")
    return stats


# --------------------------------------------------------------------------- results


@dataclass
class CorpusResult:
    """Moments of every statistic over the segments of a corpus, and how it was cut."""

    moments: dict[str, Moments]
    n_segments: int
    n_tokens: int
    info: dict = field(default_factory=dict)  # model, seg_len, n_texts, dropped, stats, ...
    # whole-corpus curves, not per segment: pruning_curve_fraction, pruning_curve_score
    curves: dict[str, np.ndarray] = field(default_factory=dict)

    def mean(self, name: str) -> np.ndarray:
        return self.moments[name].average()

    def std(self, name: str) -> np.ndarray:
        return self.moments[name].std()

    @property
    def names(self) -> list[str]:
        return list(self.moments)

    def merge(self, other: "CorpusResult") -> "CorpusResult":
        """The result of both shards' segments together."""
        if not self.moments:
            return other
        if not other.moments:
            return self
        if set(self.moments) != set(other.moments):
            raise InputError("shards measured different statistics")
        return CorpusResult({k: self.moments[k].merge(other.moments[k]) for k in self.moments},
                            self.n_segments + other.n_segments,
                            self.n_tokens + other.n_tokens, {**other.info, **self.info},
                            {**other.curves, **self.curves})

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array under a name that says what it is: entropy_mean, entropy_std,
        mass_first_token_mean, role_previous_token_std, js_distance_mean, ..., n_segments."""
        out = {"n_segments": np.asarray(self.n_segments), "n_tokens": np.asarray(self.n_tokens)}
        for name, moments in self.moments.items():
            key = _key(name)
            out[f"{key}_mean"] = moments.average()
            out[f"{key}_std"] = moments.std()
            out[f"{key}_count"] = moments.count
        out.update(self.curves)
        return out

    def save(self, path_or_file) -> None:
        """An .npz of every array (numpy reads it with allow_pickle=False) plus the info."""
        np.savez_compressed(path_or_file, **self.arrays(),
                            info=np.asarray(json.dumps({**self.info,
                                                        "statistics": self.names})))

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        self.save(buffer)
        return buffer.getvalue()

    @classmethod
    def load(cls, path_or_file) -> "CorpusResult":
        """Read what save() wrote (means and spreads; merging needs the m2 it keeps)."""
        with np.load(path_or_file, allow_pickle=False) as data:
            info = json.loads(str(data["info"]))
            moments = {}
            for name in info.get("statistics", []):
                key = _key(name)
                count, mean, std = (data[f"{key}_count"], data[f"{key}_mean"],
                                    data[f"{key}_std"])
                moments[name] = Moments(count, np.nan_to_num(mean),
                                        np.nan_to_num(std) ** 2 * count)
            curves = {k: data[k] for k in data.files if k.startswith("pruning_curve_")}
            return cls(moments, int(data["n_segments"]), int(data["n_tokens"]), info, curves)

    def table_csv(self, name: str) -> bytes:
        """One [L, H] statistic as CSV: layer, head, mean, std, segments."""
        mean, std, count = self.mean(name), self.std(name), self.moments[name].count
        lines = ["layer,head,mean,std,segments"]
        for layer in range(mean.shape[0]):
            for head in range(mean.shape[1]):
                lines.append(f"{layer},{head},{mean[layer, head]:.6g},{std[layer, head]:.6g},"
                             f"{int(count[layer, head])}")
        return ("\n".join(lines) + "\n").encode()


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


# --------------------------------------------------------------------------- running


def _batch_statistics(model, batch: list[list[int]], stats: Sequence[str],
                      similarity_rows: int | None) -> list[dict[str, np.ndarray]]:
    """One padded forward for a batch of segments, run a layer at a time: each layer's
    maps go to every segment's accumulators while they are fresh, and are dropped; -> each
    segment's statistics."""
    from .streaming import RowBlock

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
        from .model import load_model

        model = load_model(model)
    stats = _check_stats(stats)
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


def _shard_in_worker(args) -> CorpusResult:
    name, shard, stats, batch_size, similarity_rows = args
    torch.set_num_threads(1)  # N workers share the cores
    return run_shard(name, shard, stats, batch_size, similarity_rows=similarity_rows)


def run(model, segments: Segments | Sequence[Sequence[int]], stats: Sequence[str] = STATS,
        batch_size: int | None = None, workers: int = 1, progress: Callable | None = None,
        similarity_rows: int | None = SIMILARITY_ROWS) -> CorpusResult:
    """Statistics over every segment: mean and spread per head. workers > 1 runs shards in
    that many processes (each loads the model by its name; progress counts finished
    shards). progress(done, total) is called as segments finish; if it raises (a cancelled
    job), the run stops."""
    stats = _check_stats(stats)
    ids = segments.ids if isinstance(segments, Segments) else [list(s) for s in segments]
    if not ids:
        raise InputError("the corpus has no segments")
    started = time.perf_counter()
    if workers <= 1:
        result = run_shard(model, ids, stats, batch_size, progress, similarity_rows)
    else:
        result = _run_in_processes(model, ids, stats, batch_size, int(workers), progress,
                                   similarity_rows)
    if "pruning" in stats:  # iterative over the corpus: one curve, on a sample of segments
        from .analysis.pruning import pruning_curve

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


def _run_in_processes(model, ids, stats, batch_size, workers, progress,
                      similarity_rows) -> CorpusResult:
    import multiprocessing

    name = model.info.name  # what load_model was given: each worker loads it again
    n_shards = max(workers, min(len(ids), 4 * workers))
    size = math.ceil(len(ids) / n_shards)
    shards = [ids[i:i + size] for i in range(0, len(ids), size)]
    context = multiprocessing.get_context("spawn")
    result, done = CorpusResult({}, 0, 0), 0
    with context.Pool(workers) as pool:
        try:
            for part in pool.imap_unordered(
                    _shard_in_worker,
                    [(name, shard, stats, batch_size, similarity_rows) for shard in shards]):
                result = result.merge(part)
                done += part.n_segments
                if progress is not None:
                    progress(done, len(ids))
        except BaseException:
            pool.terminate()
            raise
    return result


def cache_key(model, segments: Segments, stats: Sequence[str],
              similarity_rows: int | None = SIMILARITY_ROWS) -> tuple:
    """What identifies a run: the model, the segments' ids and the settings."""
    return ("corpus", model.info.name, segments.digest(), tuple(stats), similarity_rows)
