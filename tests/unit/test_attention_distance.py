"""Mean attention distance (issue 28): each head's mean over queries of sum_j a_ij |i - j|,
equal to the formula written out with numpy on maps, on a trace held whole and on the same
trace held on demand (streamed), with the uniform reference as a closed form."""

from __future__ import annotations

import numpy as np
import pytest

from mha_viz import InputError
from mha_viz import analysis as A


def formula(maps: np.ndarray) -> np.ndarray:
    n = maps.shape[-1]
    distance = np.abs(np.arange(n)[None, :] - np.arange(n)[:, None])
    return (maps * distance).sum(-1).mean(-1)


def test_the_formula_on_random_maps_and_simple_heads():
    rng = np.random.default_rng(0)
    maps = rng.random((2, 3, 7, 7)).astype(np.float32)
    maps /= maps.sum(-1, keepdims=True)
    np.testing.assert_allclose(A.mean_attention_distance(maps), formula(maps), rtol=1e-5)
    n = 6
    previous = np.zeros((1, 2, n, n), dtype=np.float32)
    previous[0, 0, 0, 0] = 1
    previous[0, 0, np.arange(1, n), np.arange(n - 1)] = 1  # each token reads the one before
    previous[0, 1] = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]  # uniform causal
    found = A.mean_attention_distance(previous)
    assert found[0, 0] == pytest.approx((n - 1) / n)
    assert found[0, 1] == pytest.approx(A.uniform_attention_distance(n, causal=True))
    full = np.full((1, 1, n, n), 1 / n, dtype=np.float32)
    assert A.mean_attention_distance(full)[0, 0] == pytest.approx(
        A.uniform_attention_distance(n, causal=False))
    with pytest.raises(InputError, match="square maps"):
        A.mean_attention_distance(_cross_source(maps))


def _cross_source(maps):
    from mha_viz.maps.streaming import MapsSource

    return MapsSource(maps[..., :4], causal=False)


def test_a_trace_whole_and_on_demand(gpt2_model):
    text = "The cat sat on the mat because it was warm, and the dog slept by the door."
    whole = gpt2_model.trace(text, maps="full")
    lazy = gpt2_model.trace(text, maps="on_demand")
    expected = formula(whole.attentions.astype(np.float64))
    np.testing.assert_allclose(A.mean_attention_distance(whole), expected, rtol=1e-5)
    np.testing.assert_allclose(A.mean_attention_distance(lazy), expected, rtol=1e-4)
    # the Entropy page's one pass over a long input's maps gives the same distances
    np.testing.assert_allclose(A.entropy_and_mass(lazy)["distance"], expected, rtol=1e-4)


def test_cosine_similarity_of_maps_equals_the_flattened_formula(gpt2_model):
    """Head diversity as the texts define it: cos(vec A_a, vec A_b), on a trace held whole,
    held on demand, and on sampled rows."""
    text = "The cat sat on the mat because it was warm, and the dog slept by the door."
    whole = gpt2_model.trace(text, maps="full")
    lazy = gpt2_model.trace(text, maps="on_demand")
    flat = whole.attentions.reshape(whole.n_layer * whole.n_head, -1).astype(np.float64)
    unit = flat / np.linalg.norm(flat, axis=1, keepdims=True)
    expected = unit @ unit.T
    np.testing.assert_allclose(A.map_cosine_similarity(whole), expected, atol=1e-5)
    np.testing.assert_allclose(A.map_cosine_similarity(lazy), expected, atol=1e-5)
    np.testing.assert_allclose(A.map_cosine_distances(whole), 1 - expected, atol=1e-5)
    n = whole.n_tokens  # three evenly spaced rows, the first and the last included
    from mha_viz.analysis.similarity import _row_selection

    rows = _row_selection(n, 3)
    assert rows[0] == 0 and rows[-1] == n - 1 and len(rows) == 3
    part = whole.attentions[:, :, rows].reshape(len(flat), -1).astype(np.float64)
    part = part / np.linalg.norm(part, axis=1, keepdims=True)
    np.testing.assert_allclose(A.map_cosine_similarity(whole, max_rows=3), part @ part.T,
                               atol=1e-5)
    assert expected.min() < 0.9  # the heads differ: a constant 1 would pass unnoticed
