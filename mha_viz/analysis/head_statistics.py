"""The registry of per-head statistics: each is declared once here (what it reads, the arrays
it gives, its label, unit and docs section), and corpus mode, the command line, the Corpus
page's picker and docs/analyses.md read it from here.

A statistic computed from maps names the accumulators it reads (ACCUMULATORS: built once per
segment and shared, so the role scores reuse the entropy's and the mass's) and a function from
those accumulators to named [L, H] arrays. One that runs the model again (head importance)
gives a function of the model and the segment's token ids instead (measure), and one measured
once over a sample of the corpus's segments rather than per segment (the pruning curve, which
re-estimates importance after every step over the whole sample) gives a function of the model
and the sample (over_sample): its arrays are curves, kept apart from the per-head moments.

A statistic's arrays are named in the result it gives: ``named`` maps each member to its
array (entropy: "raw" -> "entropy", "normalized" -> "entropy_normalized"), or ``prefix``
groups an open set of them ("mass " + a token class); ``members`` reads them back, so no
reader parses an array's name. ``view`` says how the Corpus page draws it: "scale" (a switch
between raw and normalized), "choice" (a picker of members), "similarity" (head-to-head
distances, clustered), "heatmap" (each array's mean and spread per head), "curve".

To add a statistic: an accumulator in analysis/ (mha_viz.maps.streaming's protocol: update,
merge, result), an entry below, and its test. The corpus, the command line and the Corpus page
pick it up; its docs section must exist in docs/analyses.md (a test reads it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from ..core.errors import InputError
from .distance import AttentionDistance
from .entropy import RowEntropy, mean_over_rows
from .roles import TEXT_SCORE_KEYS, TextScores, roles_of
from .similarity import ComparedRows, sampled_rows
from .token_classes import ClassMass


@dataclass(frozen=True)
class Segment:
    """What a segment's accumulators are built from."""
    tokens: list[str]
    display_tokens: list[str]
    token_ids: Sequence[int]
    n_layer: int
    n_head: int
    causal: bool
    similarity_rows: int | None = None
    # the tokenizer's special tokens by role (trace.special_tokens), which the token classes
    # read ("[CLS]" is the "cls" token)
    special_tokens: Mapping[str, str] = field(default_factory=dict)
    # threads the head-to-head comparison may use (None: default_threads()); a corpus batch
    # that runs its segments on threads of its own gives 1
    threads: int | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


# Accumulators that several statistics may read, each built once per segment.
ACCUMULATORS: dict[str, Callable[[Segment], object]] = {
    "row_entropy": lambda s: RowEntropy(s.n_layer, s.n_head, s.n_tokens, s.causal),
    "class_mass": lambda s: ClassMass(s, s.n_layer, s.n_head, s.n_tokens),
    "text_scores": lambda s: TextScores((s.n_layer, s.n_head), s.n_tokens,
                                        np.asarray(s.token_ids), TEXT_SCORE_KEYS),
    "attention_distance": lambda s: AttentionDistance(s.n_layer, s.n_head),
    "compared_rows": lambda s: ComparedRows(
        s.n_layer, s.n_head, s.n_tokens,
        sampled_rows(s.n_tokens, s.similarity_rows, s.token_ids), n_threads=s.threads),
}


@dataclass(frozen=True)
class HeadStatistic:
    name: str  # as the command line and a result's arrays name it
    label: str  # for a picker
    unit: str
    docs: str  # the section of docs/analyses.md that defines it
    reads: tuple[str, ...] = ()  # ACCUMULATORS it reads (from the maps)
    arrays: Callable[[Mapping[str, object]], dict[str, np.ndarray]] | None = None
    measure: Callable | None = None  # (model, token_ids) -> arrays: runs the model again
    # (model, [token ids of each sampled segment]) -> curves: once over a sample, not per
    # segment (the corpus samples SAMPLE_SEGMENTS)
    over_sample: Callable | None = None
    default: bool = True  # in a corpus run unless others are asked for
    named: Mapping[str, str] = field(default_factory=dict)  # member -> array name
    prefix: str = ""  # or: every array named prefix + member
    view: str = "heatmap"  # how the Corpus page draws it (the module's docstring)

    @property
    def needs_model(self) -> bool:
        return self.measure is not None or self.over_sample is not None or not self.reads

    @property
    def per_segment(self) -> bool:
        """Measured on each segment and merged (False: once over a sample)."""
        return self.over_sample is None

    def members(self, names) -> dict[str, str]:
        """The arrays among ``names`` this statistic gave, by member (see the module's
        docstring): {"first token": "mass first token", ...} for "mass"."""
        names = list(names)
        if self.prefix:
            return {n[len(self.prefix):]: n for n in names if n.startswith(self.prefix)}
        return {member: array for member, array in self.named.items() if array in names}


def _entropy(acc) -> dict[str, np.ndarray]:
    return {"entropy": mean_over_rows(acc["row_entropy"].result(normalized=False)),
            "entropy_normalized": mean_over_rows(acc["row_entropy"].result(normalized=True))}


def _mass(acc) -> dict[str, np.ndarray]:
    return {MASS + name: value for name, value in acc["class_mass"].result().items()}


def _roles(acc) -> dict[str, np.ndarray]:
    text = acc["text_scores"]
    normalized = mean_over_rows(acc["row_entropy"].result(normalized=True))
    scores = roles_of(text.result("ours"), acc["class_mass"].result(), normalized,
                      text.sums["previous token"].shape)
    # the normalized entropy is entropy's own array
    return {ROLE + name: value for name, value in scores.items() if name != "entropy"}


MASS, ROLE = "mass ", "role "  # the prefixes of the token classes' and the roles' arrays
SAMPLE_SEGMENTS = 32  # an over_sample statistic's sample: the corpus's first segments
PRUNING_CURVE = {"fraction": "pruning_curve_fraction", "score": "pruning_curve_score"}


def _pruning_curve(model, sample) -> dict[str, np.ndarray]:
    """Michel et al.'s iterative pruning over the sample: each step re-estimates every
    head's importance on the whole sample, so the curve is one, not a mean over segments."""
    from .pruning import pruning_curve

    curve = pruning_curve(model, [model.encoding_of_ids(ids) for ids in sample], by="gradient")
    return {PRUNING_CURVE["fraction"]: np.asarray(curve.fractions),
            PRUNING_CURVE["score"]: np.asarray(curve.scores)}


def _ablation(model, token_ids) -> dict[str, np.ndarray]:
    from .pruning import ablation_effects

    return {"ablation_effect": ablation_effects(model, [model.encoding_of_ids(token_ids)])}


def _gradient(model, token_ids) -> dict[str, np.ndarray]:
    from .pruning import gradient_importance

    return {"gradient_importance": gradient_importance(model, [model.encoding_of_ids(
        token_ids)])}


REGISTRY: dict[str, HeadStatistic] = {s.name: s for s in (
    HeadStatistic("entropy", "Entropy", "nats", "Entropy", ("row_entropy",), _entropy,
                  named={"raw": "entropy", "normalized": "entropy_normalized"}, view="scale"),
    HeadStatistic("mass", "Where attention goes (token classes)", "fraction",
                  "Where attention goes", ("class_mass",), _mass, prefix=MASS, view="choice"),
    HeadStatistic("roles", "Role scores", "score", "Where attention goes",
                  ("text_scores", "class_mass", "row_entropy"), _roles, prefix=ROLE,
                  view="choice"),
    HeadStatistic("similarity", "Head similarity (JS divergence)", "nats",
                  "Head similarity", ("compared_rows",),
                  lambda acc: {"js_divergence": acc["compared_rows"].result()},
                  named={"js_divergence": "js_divergence"}, view="similarity"),
    HeadStatistic("distance", "Mean attention distance", "tokens", "Entropy",
                  ("attention_distance",),
                  lambda acc: {"distance": acc["attention_distance"].result()}, default=False,
                  named={"distance": "distance"}),
    # head importance: an exact ablation sweep (a forward per head from its layer up),
    # Michel et al.'s gradient importance, and the pruning curve over a sample
    HeadStatistic("ablation", "Ablation effect (slow: a forward per head)", "Δ score",
                  "Pruning impact", measure=_ablation, default=False,
                  named={"ablation_effect": "ablation_effect"}),
    HeadStatistic("gradient", "Gradient importance", "|∂ score|", "Pruning impact",
                  measure=_gradient, default=False,
                  named={"gradient_importance": "gradient_importance"}),
    HeadStatistic("pruning", "Pruning curve", "score", "Pruning impact",
                  over_sample=_pruning_curve, default=False, named=PRUNING_CURVE,
                  view="curve"),
)}

FROM_MAPS = tuple(name for name, s in REGISTRY.items() if not s.needs_model)
DEFAULT = tuple(name for name, s in REGISTRY.items() if s.default)
IMPORTANCE = tuple(name for name, s in REGISTRY.items() if s.needs_model)


def array_names(statistic: HeadStatistic, names) -> list[str]:
    """The arrays of a result that a statistic gave (HeadStatistic.members)."""
    return list(statistic.members(names).values())


def check_names(stats: Sequence[str]) -> tuple[str, ...]:
    stats = tuple(stats)
    unknown = [s for s in stats if s not in REGISTRY]
    if unknown or not stats:
        raise InputError(f"statistics must be some of {', '.join(REGISTRY)}, got {stats}")
    return stats


class SegmentAccumulators:
    """The accumulators the asked-for statistics read, each built once for a segment, and
    their arrays by name once every block has gone through."""

    def __init__(self, stats: Sequence[str], segment: Segment):
        self.stats = [REGISTRY[name] for name in stats if not REGISTRY[name].needs_model]
        wanted = dict.fromkeys(key for s in self.stats for key in s.reads)
        self.by_name = {key: ACCUMULATORS[key](segment) for key in wanted}

    @property
    def accumulators(self) -> list:
        return list(self.by_name.values())

    def result(self) -> dict[str, np.ndarray]:
        out = {}
        for statistic in self.stats:
            out.update(statistic.arrays(self.by_name))
        return out


def per_segment(stats: Sequence[str]) -> list[str]:
    """The statistics among ``stats`` measured on each segment (not once over a sample)."""
    return [name for name in stats if REGISTRY[name].per_segment]


def over_sample(model, sample, stats: Sequence[str]) -> dict[str, np.ndarray]:
    """The statistics among ``stats`` measured once over a sample of segments' token ids."""
    return _each(stats, "over_sample", model, sample)


def measured(model, token_ids, stats: Sequence[str]) -> dict[str, np.ndarray]:
    """The statistics that run the model again, for one segment's token ids."""
    return _each(stats, "measure", model, token_ids)


def _each(stats: Sequence[str], part: str, *args) -> dict[str, np.ndarray]:
    """The arrays of every statistic among ``stats`` that has ``part`` (a function of args)."""
    out = {}
    for name in stats:
        given = getattr(REGISTRY[name], part)
        if given is not None:
            out.update(given(*args))
    return out
