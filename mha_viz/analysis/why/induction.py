"""The textbook case of a head's score, found on a text (docs/analyses.md, "The textbook
case"; Olsson et al. 2022, "In-context Learning and Induction Heads"): the head above layer 0
with the highest induction score on the text, the query of the second copy whose induction
target it weighs most, that target, and the layer-0 head with the highest previous-token
score, whose output the induction head's key side reads (K-composition)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.errors import InputError
from ..heads import head_name
from ..roles import previous_token_scores, shifted_duplicate_scores


@dataclass(frozen=True)
class InductionExample:
    layer: int  # the induction head
    head: int
    query: int  # a query whose token occurred before
    key: int  # its induction target: the token after that earlier occurrence
    weight: float  # the head's weight from query to key
    induction_score: float  # the head's induction score on the text
    previous_layer: int  # the previous-token head of layer 0
    previous_head: int
    previous_score: float


def key_side_writers(parts: list[tuple[str, float]], below_layer: int, n_head: int,
                     share: float = 0.5) -> list[tuple[str, float]]:
    """Of a score's key-side parts (source, value), strongest first, the heads of the layers
    below ``below_layer`` (the induction head's) that raise it by at least ``share`` of the
    largest such part: the previous-token heads it reads, all of them when several write
    nearly as much."""
    names = {head_name(layer, head) for layer in range(int(below_layer))
             for head in range(int(n_head))}
    heads = [(s, v) for s, v in parts if s in names and v > 0]
    if not heads:
        return []
    top = max(v for _, v in heads)
    return [(s, v) for s, v in heads if v >= share * top]


def induction_example(trace, head: tuple[int, int] | None = None) -> InductionExample:
    """The induction head of a text with repeats (or ``head``, (layer, head) above layer 0:
    the one another measure names) and its strongest (query, target) pair; refused when the
    model has one layer or the text repeats no token."""
    if trace.value_weighted:
        raise InputError("the textbook case reads the attention weights: trace the text "
                         "with weights='attention'")
    if trace.n_layer < 2:
        raise InputError("an induction head reads a previous-token head of an earlier layer: "
                         "this model has one layer")
    ids = np.asarray(trace.token_ids)
    targets = [(i, j + 1) for i in range(len(ids)) for j in range(i - 1)
               if ids[j] == ids[i]]  # key j + 1 < i: the token after an earlier occurrence
    if not targets:
        raise InputError("this text repeats no token, so no query has an induction target: "
                         "repeat a passage")
    induction = shifted_duplicate_scores(trace)
    induction[0] = -np.inf  # layer 0 reads no earlier head
    if head is None:
        layer, head = np.unravel_index(np.argmax(induction), induction.shape)
    else:
        layer, head = int(head[0]), int(head[1])
        if not 1 <= layer < trace.n_layer or not 0 <= head < trace.n_head:
            raise InputError(f"head {(layer, head)} is not a head above layer 0 of this model")
    rows = trace.head_map(int(layer), int(head))
    query, key = max(targets, key=lambda pair: (rows[pair], pair[0]))
    previous = previous_token_scores(trace)[0]
    before = int(np.argmax(previous))
    return InductionExample(int(layer), int(head), int(query), int(key),
                            float(rows[query, key]), float(induction[layer, head]), 0,
                            before, float(previous[before]))
