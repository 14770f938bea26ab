"""Token-id segments cut from texts: the unit every corpus statistic is measured on, and what
a dictionary trains on (analysis/features: below the corpus layer, so it lives with the model)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from ..core.errors import InputError

MIN_SEGMENT_TOKENS = 8  # shorter final pieces of a text are dropped (and counted)


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

    def identity(self) -> tuple:
        """What names these segments in a stored result's key (core.digest): their ids."""
        return (self.ids, self.seg_len)


def _special_wrapping(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text of its own ([CLS] / [SEP])."""
    plain = tokenizer("hello world", add_special_tokens=False)["input_ids"]
    full = tokenizer("hello world", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start:start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain):])
    return [], []


@dataclass
class SegmentCounts:
    """What cutting a stream of texts has done so far."""
    texts_read: int = 0
    n_texts: int = 0  # texts that gave at least one segment
    n_dropped: int = 0  # pieces shorter than the minimum (whole texts or text ends)
    n_segments: int = 0


def corpus_model(model):
    """What a corpus runs through: the model itself, or an encoder-decoder's encoder (the
    texts are its sources: model.corpus_model())."""
    reader = getattr(model, "corpus_model", None)
    return model if reader is None else reader()


def iter_segments(model, texts: Iterable[str], seg_len: int = 128,
                  min_len: int = MIN_SEGMENT_TOKENS, max_segments: int | None = None,
                  counts: SegmentCounts | None = None) -> Iterator[list[int]]:
    """Each text cut into segments of ``seg_len`` tokens, special tokens included, one at a
    time as the texts come (a corpus of any size); counts, when given, follows along."""
    model = corpus_model(model)
    prefix, suffix = _special_wrapping(model.tokenizer)
    seg_len = int(seg_len)
    body = seg_len - len(prefix) - len(suffix)
    if seg_len > model.info.max_positions:
        raise InputError(f"segments of {seg_len} tokens exceed the model's context of "
                         f"{model.info.max_positions}")
    if body < 1 or seg_len < min_len:
        raise InputError(f"a segment length of {seg_len} leaves no room for text")
    counts = SegmentCounts() if counts is None else counts
    for text in texts:
        counts.texts_read += 1
        with model._tokenizer_lock:
            ids = model.tokenizer(str(text), add_special_tokens=False, verbose=False)["input_ids"]
        used = False
        for start in range(0, len(ids), body):
            piece = ids[start:start + body]
            if len(piece) + len(prefix) + len(suffix) < min_len:
                counts.n_dropped += 1
                continue
            if not used:
                counts.n_texts += 1
                used = True
            counts.n_segments += 1
            yield prefix + list(piece) + suffix
            if max_segments is not None and counts.n_segments >= max_segments:
                return
        counts.n_dropped += not ids


def segment(model, texts: Iterable[str], seg_len: int = 128,
            min_len: int = MIN_SEGMENT_TOKENS, max_segments: int | None = None) -> Segments:
    """Cut each text into segments of ``seg_len`` tokens, special tokens included."""
    counts = SegmentCounts()
    out = list(iter_segments(model, texts, seg_len, min_len, max_segments, counts))
    if not out:
        raise InputError(f"every text is shorter than {min_len} tokens: nothing to measure "
                         f"({counts.n_dropped} piece(s) dropped)")
    return Segments(out, int(seg_len), counts.n_texts, counts.n_dropped)
