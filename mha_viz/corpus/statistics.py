"""The per-head statistics of one segment, as accumulators fed its maps' rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..core.errors import InputError
from ..maps.trace import AttentionTrace

STATS = ("entropy", "mass", "roles", "similarity")  # from the maps: the default
# Head importance, per segment: an exact ablation sweep (a forward per head from its layer
# up) and Michel et al.'s gradient importance; and the pruning curve over the corpus.
IMPORTANCE = ("ablation", "gradient", "pruning")
ALL_STATS = STATS + IMPORTANCE
# Head-to-head distances per segment on this many evenly spaced query rows (None: all);
# the pairwise comparison is the costliest statistic, N^2 x rows x T.
SIMILARITY_ROWS = 16


class SegmentStatistics:
    """Every per-head statistic of one segment computed from its maps (STATS), as
    accumulators (mha_viz.maps.streaming) fed blocks of the segment's rows, from a trace or
    straight from a batch's forward (run_shard): entropy (raw and normalised, one pass),
    token-class mass, the role scores on the text and head distances on the sampled rows.
    The importance statistics need the model again and are not here."""

    def __init__(self, stats: Sequence[str], tokens: list[str], display_tokens: list[str],
                 token_ids, n_layer: int, n_head: int, causal: bool,
                 similarity_rows: int | None = SIMILARITY_ROWS):
        from ..analysis.entropy import RowEntropy
        from ..analysis.roles import TEXT_SCORE_KEYS, TextScores
        from ..analysis.similarity import ComparedRows
        from ..analysis.token_classes import ClassMass

        labels = _Labels(tokens, display_tokens)
        n = len(tokens)
        self.stats = tuple(stats)
        self.entropy = self.mass = self.text = self.compared = None
        if "entropy" in stats or "roles" in stats:
            self.entropy = RowEntropy(n_layer, n_head, n, causal)
        if "mass" in stats or "roles" in stats:
            self.mass = ClassMass(labels, n_layer, n_head, n)
        if "roles" in stats:
            self.text = TextScores((n_layer, n_head), n, np.asarray(token_ids),
                                   TEXT_SCORE_KEYS)
        if "similarity" in stats:
            self.compared = ComparedRows(n_layer, n_head, n, similarity_rows)

    @property
    def accumulators(self) -> list:
        """In the order a block goes to them (streaming.ordered: the entropy, which may work
        in the block, last)."""
        from ..maps.streaming import ordered

        return ordered([a for a in (self.mass, self.text, self.compared, self.entropy)
                        if a is not None])

    def update(self, block) -> None:
        for accumulator in self.accumulators:
            accumulator.update(block)

    def result(self) -> dict[str, np.ndarray]:
        from ..analysis.entropy import mean_over_rows
        from ..analysis.roles import roles_of

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
    from ..maps.streaming import accumulate, source_of

    out = {}
    from_maps = [s for s in stats if s in STATS]
    if from_maps:
        n_layer, n_head = trace.maps_shape[:2]
        segment = SegmentStatistics(from_maps, list(trace.tokens), list(trace.display_tokens),
                                    trace.token_ids, n_layer, n_head, bool(trace.causal),
                                    similarity_rows)
        accumulate(source_of(trace), segment.accumulators)
        out.update(segment.result())
    out.update(_importance(model, trace.token_ids, stats))
    return out


def _importance(model, token_ids, stats) -> dict[str, np.ndarray]:
    """The head-importance statistics of one segment (they run the model again)."""
    from ..analysis.pruning import ablation_effects, gradient_importance

    out = {}
    if "ablation" in stats:
        out["ablation_effect"] = ablation_effects(model, [model.encoding_of_ids(token_ids)])
    if "gradient" in stats:
        out["gradient_importance"] = gradient_importance(model, [model.encoding_of_ids(
            token_ids)])
    return out


def _check_stats(stats, model=None) -> tuple[str, ...]:
    stats = tuple(stats)
    unknown = [s for s in stats if s not in ALL_STATS]
    if unknown or not stats:
        raise InputError(f"statistics must be some of {', '.join(ALL_STATS)}, got {stats}")
    needs_score = [s for s in stats if s in IMPORTANCE]  # they run the model's own score
    if needs_score and model is not None and not hasattr(model, "encoding_of_ids"):
        raise InputError(f"{', '.join(needs_score)} switch heads off and score the model, "
                         f"which over a corpus needs a decoder-only or encoder-only model "
                         f"(an encoder-decoder's corpus is read through its encoder)")
    return stats
