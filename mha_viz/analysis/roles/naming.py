"""Every score of a trace at once, and each head's strongest role by one rule."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.arrays import RowsDone, is_many
from ...core.errors import InputError
from ...maps.trace import AttentionTrace
from ..heads import head_name
from ..token_classes import SEP_CLASS
from .scores import (TEXT_SCORE_KEYS, _check_normalization, _mean_or_zero, _prepared,
                     _streamed_scores)

# --------------------------------------------------------------------------- naming heads

# The [L, H] maps strongest_roles reads, by key (role_scores gives all but the probe's).
ROLE_KEYS = ("previous token", "next token", "duplicate token", "induction (probe)",
             "induction (text)", "first token", SEP_CLASS, "entropy")
PATTERN_ROLES = ("previous token", "next token", "duplicate token", "induction (probe)",
                 "induction (text)")
SINK_ROLES = ("first token", SEP_CLASS)
ROLE_THRESHOLD = 0.5  # a pattern or sink score at least this names the role
BROAD_THRESHOLD = 0.8  # normalized entropy at least this: "broad"
FOCUSED_THRESHOLD = 0.3  # normalized entropy at most this: "focused"
TEXT_PROBE = "the text"


def role_scores(trace, *, exclude=None, drop_special: bool = False,
                normalization: str = "ours", mass: dict | None = None,
                entropy_normalized: np.ndarray | None = None,
                progress=None) -> dict[str, np.ndarray]:
    """Every role score of one trace on its own text. -> {key: [L, H]}

    "previous token", "next token", "duplicate token", "induction (text)" (the shifted
    duplicate score): with ``exclude`` / ``drop_special`` and ``normalization`` as in those
    functions. "first token", "[SEP]": the attention mass on them (token_class_mass, the
    mean over all T rows), always on every token, whatever is left out (a sink is what
    leaving out would hide). "entropy": the normalized entropy (entropy(normalized=True),
    0 = one key, 1 = uniform) on the maps after leaving out. The probe's induction score
    ("induction (probe)") comes from induction_probe.

    mass / entropy_normalized: token_class_mass(trace) and the normalized entropy, when the
    caller has them already (corpus statistics compute each once per segment); the entropy
    is only reused when nothing is left out.

    Every score comes from one pass over the trace's blocks of query rows (left-out
    positions removed from each block as it is read); progress: optional callback(done,
    total) over those rows (it may raise to stop the computation).
    """
    _check_normalization(normalization)
    if not isinstance(trace, AttentionTrace):
        raise InputError("role_scores takes one AttentionTrace")
    prepared, = _prepared(trace, exclude=exclude, drop_special=drop_special)
    renew_entropy = entropy_normalized is None or exclude is not None or drop_special
    # every score from one pass over the blocks of rows
    found = _streamed_scores(prepared, TEXT_SCORE_KEYS, normalization,
                             mass=mass is None, entropy_rows=renew_entropy,
                             done=RowsDone(progress, trace.n_layer * trace.n_tokens))
    return roles_of(found, found["mass"] if mass is None else mass,
                    found["entropy"] if renew_entropy else entropy_normalized, prepared.lead)


def roles_of(text: dict, mass: dict, entropy_normalized: np.ndarray, lead: tuple) -> dict:
    """role_scores' dict from its parts: TextScores' result (a pattern no row has counts
    0), token_class_mass and the normalized entropy."""
    def pattern(key):
        return _mean_or_zero([s for s in [text[key]] if s is not None], lead)
    return {
        "previous token": text["previous token"],
        "next token": text["next token"],
        "duplicate token": pattern("duplicate token"),
        "induction (text)": pattern("induction (text)"),
        "first token": mass["first token"],
        SEP_CLASS: mass[SEP_CLASS],
        "entropy": entropy_normalized,
    }


def role_support(trace, *, exclude=None, drop_special: bool = False) -> dict[str, int]:
    """How many query rows each text score of role_scores averages over ("ours"), after
    leaving positions out: {"rows": T kept, "previous token": T - 1, "next token": T - 1,
    "duplicate token": queries with an earlier occurrence of their token, "induction (text)":
    queries with a shifted-duplicate target (the same queries)}. A score resting on one or
    two queries says little."""
    prepared, = _prepared(trace, exclude=exclude, drop_special=drop_special,
                          ids_needed=True, what="role_support")
    n, ids = prepared.n, prepared.ids
    # A row has a duplicate (and so a shifted-duplicate target, j + 1 <= i) when its token
    # occurred before: counted in O(T), no [T, T] masks.
    _, first = np.unique(ids, return_index=True)
    repeated = n - len(first)
    return {"rows": n, "previous token": n - 1, "next token": n - 1,
            "duplicate token": repeated, "induction (text)": repeated}


@dataclass(frozen=True)
class HeadRole:
    """One head's strongest role (see strongest_roles)."""

    name: str  # "L3.H7"
    layer: int
    head: int
    role: str  # "previous token", "induction", "sink: first token", "broad", "mixed", ...
    score: float  # the score that named the role (for broad/focused/mixed: see strongest_roles)
    probe: str  # the input that gave the score: "the text", "repeated random tokens, ..."
    also: str = ""  # other roles at or above the threshold, "first token 0.81; ..."
    tier: int = 0  # 0 pattern role, 1 sink, 2 broad / focused, 3 mixed

    def as_dict(self) -> dict:
        return {"head": self.name, "layer": self.layer, "head index": self.head,
                "role": self.role, "score": self.score, "probe": self.probe,
                "also above threshold": self.also}


def _role_label(key: str, first_token_name: str) -> str:
    if key.startswith("induction"):
        return "induction"
    if key == "first token":
        return f"sink: {first_token_name}"
    if key == SEP_CLASS:
        return f"sink: {SEP_CLASS}"
    return key


def strongest_roles(scores, probes=None, *, threshold: float = ROLE_THRESHOLD,
                    broad_threshold: float = BROAD_THRESHOLD,
                    focused_threshold: float = FOCUSED_THRESHOLD,
                    first_token_name: str = "first token",
                    order: str = "strength") -> list[HeadRole]:
    """Name each head's strongest role. -> one HeadRole per head.

    scores: {key: [L, H]} with keys from ROLE_KEYS (any subset; role_scores gives all but
        "induction (probe)"; NaN scores are ignored). probes: {key: description of the input
        that gave it}; keys not given are "the text" (give "induction (probe)" its
        probe_description).
    The rule, in order:
    1. pattern roles (previous token, next token, duplicate token, induction on the probe,
       induction on the text): if any score >= ``threshold`` (0.5), the highest of them
       (both induction scores name the role "induction"; the probe column says which);
    2. else the sinks (mass on the first token / [CLS], on [SEP]): if any >= ``threshold``,
       the larger ("sink: first token", "sink: [SEP]");
    3. else by the normalized entropy e: "broad" when e >= ``broad_threshold`` (0.8, score e),
       "focused" when e <= ``focused_threshold`` (0.3, score 1 - e: focused on something
       none of the roles names), otherwise "mixed" (score e).
    Pattern roles come before sinks because a head that does its job where it can often
    rests on the sink elsewhere (an induction head on a text without repeats). ``also``
    lists the other pattern and sink scores >= threshold. The thresholds are meant for the
    "ours" normalization: "transformer_lens" scores are smaller (divided by all rows).
    order: "strength" sorts by tier (pattern, sink, broad / focused, mixed), then by score,
        highest first; "head" keeps layer-major order (L0.H0, L0.H1, ...).
    first_token_name: "[CLS]" for BERT, "first token" otherwise (used in the role text).
    """
    if order not in ("strength", "head"):
        raise InputError(f"order must be 'strength' or 'head', got {order!r}")
    unknown = set(scores) - set(ROLE_KEYS)
    if unknown:
        raise InputError(f"unknown role keys {sorted(unknown)}; expected some of "
                         f"{', '.join(ROLE_KEYS)}")
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in scores.items()}
    if not arrays:
        raise InputError("strongest_roles needs at least one [L, H] score map")
    shapes = {a.shape for a in arrays.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise InputError(f"every score map must be the same [L, H] shape, got {shapes}")
    probes = dict(probes or {})
    n_layer, n_head = next(iter(shapes))
    rows = []
    for layer in range(n_layer):
        for head in range(n_head):
            values = {k: float(a[layer, head]) for k, a in arrays.items()
                      if np.isfinite(a[layer, head])}
            passed = {k: v for k, v in values.items()
                      if k in PATTERN_ROLES + SINK_ROLES and v >= threshold}
            chosen, tier = None, 3
            for tier_index, group in enumerate((PATTERN_ROLES, SINK_ROLES)):
                candidates = [k for k in group if k in passed]
                if candidates:
                    # highest score; ties go to the earlier key in the group
                    chosen = max(candidates, key=lambda k: (passed[k], -group.index(k)))
                    tier = tier_index
                    break
            if chosen is not None:
                role, score = _role_label(chosen, first_token_name), passed[chosen]
                probe = probes.get(chosen, TEXT_PROBE)
            else:
                e = values.get("entropy")
                probe = probes.get("entropy", TEXT_PROBE)
                if e is None:
                    role, score, tier = "mixed", float("nan"), 3
                elif e >= broad_threshold:
                    role, score, tier = "broad", e, 2
                elif e <= focused_threshold:
                    role, score, tier = "focused", 1.0 - e, 2
                else:
                    role, score, tier = "mixed", e, 3
            also = "; ".join(f"{_role_label(k, first_token_name)} {v:.2f}"
                             + (" (probe)" if k == "induction (probe)" else
                                " (text)" if k == "induction (text)" else "")
                             for k, v in sorted(passed.items(), key=lambda kv: -kv[1])
                             if k != chosen)
            rows.append(HeadRole(head_name(layer, head), layer, head, role, score, probe,
                                 also, tier))
    if order == "strength":
        rows.sort(key=lambda r: (r.tier, -r.score if np.isfinite(r.score) else np.inf,
                                 r.layer, r.head))
    return rows
