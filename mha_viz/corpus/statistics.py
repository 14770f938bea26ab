"""The per-head statistics of one segment, as accumulators fed its maps' rows."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..analysis.head_statistics import DEFAULT, FROM_MAPS
from ..analysis.head_statistics import IMPORTANCE as REGISTRY_IMPORTANCE
from ..analysis.head_statistics import (REGISTRY, Segment, SegmentAccumulators, check_names,
                                        measured)
from ..core.errors import InputError
from ..maps.trace import AttentionTrace

# The statistics are declared once, in mha_viz.analysis.head_statistics (REGISTRY): these
# names are read from there.
STATS = DEFAULT  # from the maps: the default
IMPORTANCE = REGISTRY_IMPORTANCE
ALL_STATS = tuple(REGISTRY)
# Head-to-head distances per segment on this many query rows (None: all), one drawn from
# each of as many stretches of the segment (similarity.sampled_rows; docs/analyses.md, "Over
# a corpus"): the pairwise comparison is the costliest statistic, N^2 x rows x T, and 4
# sampled rows estimate the all-rows mean better than 16 rows at fixed positions did.
SIMILARITY_ROWS = 4


class SegmentStatistics:
    """Every per-head statistic of one segment computed from its maps (the registry's
    FROM_MAPS), as accumulators (mha_viz.maps.streaming) fed blocks of the segment's rows,
    from a trace or straight from a batch's forward (run_shard). The importance statistics
    need the model again and are not here."""

    def __init__(self, stats: Sequence[str], tokens: list[str], display_tokens: list[str],
                 token_ids, n_layer: int, n_head: int, causal: bool,
                 similarity_rows: int | None = SIMILARITY_ROWS,
                 special_tokens: Mapping[str, str] | None = None,
                 threads: int | None = None):
        self.stats = tuple(stats)
        self._segment = SegmentAccumulators(stats, Segment(
            list(tokens), list(display_tokens), token_ids, n_layer, n_head, causal,
            similarity_rows, dict(special_tokens or {}), threads))

    @property
    def summary_parts(self) -> set[str]:
        """What its accumulators read from a block's summary (maps.summaries.PARTS)."""
        return {part for accumulator in self._segment.accumulators
                for part in getattr(accumulator, "summary_parts", ())}

    @property
    def accumulators(self) -> list:
        """In the order a block goes to them (streaming.ordered: the entropy, which may work
        in the block, last)."""
        from ..maps.streaming import ordered

        return ordered(self._segment.accumulators)

    def update(self, block) -> None:
        for accumulator in self.accumulators:
            accumulator.update(block)

    def result(self) -> dict[str, np.ndarray]:
        return self._segment.result()


def segment_statistics(trace: AttentionTrace, stats: Sequence[str],
                       similarity_rows: int | None = SIMILARITY_ROWS,
                       model=None) -> dict[str, np.ndarray]:
    """Every per-head statistic of one segment's trace, by name -> array (the importance
    statistics run the model again: they need it)."""
    from ..maps.streaming import accumulate, source_of

    out = {}
    from_maps = [s for s in stats if s in FROM_MAPS]
    if from_maps:
        n_layer, n_head = trace.maps_shape[:2]
        segment = SegmentStatistics(from_maps, list(trace.tokens), list(trace.display_tokens),
                                    trace.token_ids, n_layer, n_head, bool(trace.causal),
                                    similarity_rows, trace.special_tokens)
        accumulate(source_of(trace), segment.accumulators)
        out.update(segment.result())
    out.update(_importance(model, trace.token_ids, stats))
    return out


def _importance(model, token_ids, stats) -> dict[str, np.ndarray]:
    """The head-importance statistics of one segment (they run the model again)."""
    return measured(model, token_ids, stats)


def statistics_for(model) -> tuple[str, ...]:
    """The statistics a corpus run can measure through this model (corpus_model's): every
    one for a model that scores its own segments, those from the maps for an
    encoder-decoder's encoder (head importance scores the whole model)."""
    return ALL_STATS if _scores_segments(model) else FROM_MAPS


def _scores_segments(model) -> bool:
    return hasattr(model, "encoding_of_ids")


def _check_stats(stats, model=None) -> tuple[str, ...]:
    stats = check_names(stats)
    needs_score = [s for s in stats if s in IMPORTANCE]  # they run the model's own score
    if needs_score and model is not None and not _scores_segments(model):
        raise InputError(f"{', '.join(needs_score)} switch heads off and score the model, "
                         f"which over a corpus needs a decoder-only or encoder-only model "
                         f"(an encoder-decoder's corpus is read through its encoder)")
    return stats
