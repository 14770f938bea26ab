"""Masking heads at long range (Wu et al. 2024, section 4): switch the top-k retrieval heads
off (their outputs set to 0 before W_O, as the pruning page does) and the copy accuracy of
needle cases falls; switch off as many heads drawn at random from the others, in several
seeded draws, and it barely moves. Any set of heads a person picks is measured the same
way."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.errors import InputError
from ..heads import parse_head_name, rank_heads
from .needles import check_cases
from .retrieval import RETRIEVAL_THRESHOLD, copy_accuracy
from .reading import check_causal


@dataclass(frozen=True)
class MaskingResult:
    """Copy accuracy (the mean over the cases of the share of answer tokens predicted right)
    with every head on, with the k top retrieval heads off, with k random other heads off
    (one value per draw) and with the heads a person picked off (None when none)."""
    k: int
    full: float
    top_heads: tuple[tuple[int, int], ...]
    top: float
    random_heads: tuple[tuple[tuple[int, int], ...], ...]
    random: np.ndarray  # [draws]
    picked_heads: tuple[tuple[int, int], ...] = ()
    picked: float | None = None

    @property
    def random_mean(self) -> float:
        return float(np.mean(self.random))


def _mask(heads, n_layer: int, n_head: int) -> np.ndarray:
    mask = np.ones((n_layer, n_head), dtype=np.float32)
    for layer, head in heads:
        mask[layer, head] = 0.0
    return mask


def _picked(heads, n_layer: int, n_head: int) -> tuple[tuple[int, int], ...]:
    """(layer, head) pairs or names ("L3.H7"), checked, in order, each once."""
    found = []
    for pair in heads:
        layer, head = parse_head_name(pair) if isinstance(pair, str) else (int(v) for v in pair)
        if not 0 <= layer < n_layer or not 0 <= head < n_head:
            raise InputError(f"head ({layer}, {head}) is out of range: layers 0..{n_layer - 1}"
                             f", heads 0..{n_head - 1}")
        found.append((layer, head))
    return tuple(dict.fromkeys(found))


def retrieval_masking(model, cases, scores, k: int | None = None, draws: int = 5,
                      seed: int = 0, heads=None, progress=None,
                      full: float | None = None) -> MaskingResult:
    """The copy accuracy of needle cases with the k heads of highest retrieval score
    ``scores`` [L, H] switched off, against k heads drawn at random (``draws`` seeded draws,
    from the heads outside the top k), and with ``heads`` ((layer, head) pairs or names
    such as "L3.H7") switched off when given. k None: the heads scoring over
    RETRIEVAL_THRESHOLD (at least one). full: the copy accuracy with every head on when it
    is known already (needle_study(model, cases).grid.mean), which spares that run.
    progress(done, total) after each case of each run."""
    check_causal(model, "masking heads at long range")
    cases = check_cases(cases)
    n_layer, n_head = model.info.n_layer, model.info.n_head
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (n_layer, n_head):
        raise InputError(f"scores must be [{n_layer}, {n_head}] (layers x heads), got "
                         f"{list(scores.shape)}")
    total_heads = n_layer * n_head
    k = max(1, int((scores > RETRIEVAL_THRESHOLD).sum())) if k is None else int(k)
    if not 1 <= k < total_heads:
        raise InputError(f"k must be from 1 to {total_heads - 1} (the model has {total_heads} "
                         f"heads), got {k}")
    if int(draws) < 1:
        raise InputError("draws must be at least 1")
    if full is not None and not 0 <= float(full) <= 1:
        raise InputError(f"full is a copy accuracy from 0 to 1, got {full}")
    picked = () if heads is None else _picked(heads, n_layer, n_head)
    top = tuple(rank_heads(scores)[:k])
    others = [(l, h) for l in range(n_layer) for h in range(n_head) if (l, h) not in top]
    rng = np.random.default_rng(int(seed))
    drawn = tuple(tuple(sorted(others[i] for i in rng.choice(len(others), min(k, len(others)),
                                                             replace=False)))
                  for _ in range(int(draws)))
    runs = ([] if full is not None else [()]) + [top, *drawn] + ([picked] if picked else [])
    accuracies = [] if full is None else [float(full)]
    for run, switched_off in enumerate(runs):
        report = None if progress is None else (
            lambda done, n, run=run: progress(run * n + done, len(runs) * n))
        mask = None if not switched_off else _mask(switched_off, n_layer, n_head)
        accuracies.append(float(copy_accuracy(model, cases, mask, report).mean()))
    return MaskingResult(k, accuracies[0], top, accuracies[1], drawn,
                         np.asarray(accuracies[2:2 + len(drawn)]), picked,
                         accuracies[-1] if picked else None)
