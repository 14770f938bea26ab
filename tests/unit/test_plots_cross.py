"""Cross-attention figures (issue 27): a rectangular target x source heatmap with each row's
strongest source token marked, and the all-heads grid of rectangular maps, whose click points
sit on each thumbnail's centre."""

from __future__ import annotations

import numpy as np

from mha_viz import analysis as A
from mha_viz import plots


def cross_maps(seed=0, shape=(2, 3, 5, 9)):
    rng = np.random.default_rng(seed)
    maps = rng.random(shape).astype(np.float32) ** 4
    return maps / maps.sum(-1, keepdims=True)


def test_cross_heatmap_marks_each_rows_strongest_source():
    maps = cross_maps()
    weights = maps[1, 2]
    rows, cols = [f"t{i}" for i in range(5)], [f"s{j}" for j in range(9)]
    fig = plots.cross_attention_heatmap(weights, rows, cols, title="x")
    heat, marks = fig.data
    assert np.asarray(heat.z).shape == (5, 9) and list(heat.y)[0] == "0 't0'"
    expected = weights.argmax(1)
    assert list(marks.x) == [f"{j} 's{j}'" for j in expected]
    assert list(marks.y) == list(heat.y)
    assert fig.layout.meta["cells"] == [5, 9]


def test_grid_of_rectangular_maps_puts_click_points_on_thumbnails():
    maps = cross_maps()
    fig = plots.model_view_grid(maps, thumb_size=32, selected=(1, 2))
    image = np.asarray(fig.data[0].z)
    gap = 1  # round(9 / 12)
    assert image.shape == (2 * 5 + gap, 3 * 9 + 2 * gap)
    points = fig.data[1]
    # L1.H2's point: in the middle of the thumbnail at rows 6..10, columns 20..28
    index = 1 * 3 + 2
    assert (points.x[index], points.y[index]) == (2 * 10 + 4.0, 1 * 6 + 2.0)
    assert plots.grid_point_to_head({"customdata": points.customdata[index]}, 3) == (1, 2)


def test_mean_cross_attention_and_agreement():
    maps = cross_maps()
    mean = A.mean_cross_attention(maps, [1])
    np.testing.assert_allclose(mean, maps[1].astype(np.float64).mean(0))
    np.testing.assert_allclose(mean.sum(-1), 1.0, atol=1e-6)
    best = A.strongest_source(mean)
    alignment = list(best[:3]) + [(best[3] + 1) % 9, None]
    assert A.alignment_agreement(mean, alignment) == 0.75
