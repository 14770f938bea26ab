"""When a patching result shows nothing: an effect too small to tell from no effect
(docs/analyses.md, "Causal interventions"). A map whose every cell is that small says so
instead of stretching its colour bar over noise."""

from __future__ import annotations

import numpy as np

# A patch that moves the metric less than this share of the way between the corrupted and
# the clean run is not told from one that moves it not at all: float32 runs differ by ~1e-4
# of a typical gap, and one pair gives no spread to judge by.
NOISE_FLOOR = 0.02


def noise_level(result) -> float:
    """The size of a normalized effect that cannot be told from none: NOISE_FLOOR, or over
    several pairs, if larger, twice the largest standard error of a component's mean
    effect (its spread over the pairs / sqrt(pairs))."""
    level = NOISE_FLOOR
    if result.n_pairs > 1:
        spread = np.asarray(result.std, dtype=float)
        spread = spread[np.isfinite(spread)]
        if spread.size:
            level = max(level, 2.0 * float(spread.max()) / np.sqrt(result.n_pairs))
    return level


def within_noise(result) -> bool:
    """Whether every component's mean effect is smaller than noise_level (True for a
    result with no finite effect: nothing to show either)."""
    effect = np.abs(np.asarray(result.effect, dtype=float))
    effect = effect[np.isfinite(effect)]
    return bool(effect.size == 0 or effect.max() < noise_level(result))
