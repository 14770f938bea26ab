"""The figures of the Circuits page (mha_viz.plots.circuits) and the patching CSV: the values,
layout and click targets they carry."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from mha_viz import plots
from mha_viz.analysis.circuits import Edge
from mha_viz.core.errors import InputError
from mha_viz.server import export


def test_patching_heatmap_centres_on_zero_and_marks_key_value_groups():
    shown = np.array([[0.5, -0.25, 0.0, 0.1], [np.nan, 1.0, -2.0, 0.3]])
    raw = shown * 10
    fig = plots.patching_heatmap(shown, raw, "t", "normalized", kv_heads=(0, 0, 1, 1),
                                 clickable=True)
    heat, cells = fig.data
    assert heat.zmid == 0 and heat.zmin == -2.0 and heat.zmax == 2.0
    np.testing.assert_array_equal(heat.customdata, raw)
    assert [s.x0 for s in fig.layout.shapes] == [1.5]  # one line between the two groups
    assert [a.text for a in fig.layout.annotations] == ["kv0", "kv1"]
    # the click targets: one marker per cell, [layer, head], hover with both values
    assert cells.customdata[6] == [1, 2]
    assert "L1.H2 (key/value head 1)" in cells.hovertext[6] and "-20" in cells.hovertext[6]
    assert fig.layout.clickmode == "event+select"
    assert plots.grid_point_to_head({"curve_number": 1, "customdata": [1, 2]}, 4) == (1, 2)
    # a deep model: layers along x, heads down y, the group line across
    deep = np.arange(48.0).reshape(12, 4)
    wide = plots.patching_heatmap(deep, deep, "t", "n", kv_heads=(0, 0, 1, 1), clickable=True)
    np.testing.assert_array_equal(wide.data[0].z, deep.T)
    assert list(wide.layout.xaxis.ticktext) == [f"L{l}" for l in range(12)]
    assert list(wide.layout.yaxis.ticktext) == ["H0 kv0", "H1 kv0", "H2 kv1", "H3 kv1"]
    assert wide.layout.meta["cells"] == [4, 12]
    assert [(s.y0, s.y1) for s in wide.layout.shapes] == [(1.5, 1.5)]
    marker = list(wide.data[1].customdata).index([4, 1])
    assert (wide.data[1].x[marker], wide.data[1].y[marker]) == (4, 1)
    # multi-head attention: no groups, no lines
    plain = plots.patching_heatmap(shown, raw, "t", "n", kv_heads=(0, 1, 2, 3))
    assert not plain.layout.shapes and len(plain.data) == 1
    with pytest.raises(InputError):
        plots.patching_heatmap(shown, raw[:, :2], "t", "n")


def test_position_map_marks_differing_positions_and_escapes_tokens():
    fig = plots.position_patching_map(np.eye(2, 3), np.ones((2, 3)), ["a", "$x$", "<b>"],
                                      "t", "n", differing=[1])
    ticks = list(fig.layout.xaxis.ticktext)
    assert ticks[1].startswith("★") and "$" not in ticks[1] and "<b>" not in ticks[2]
    with pytest.raises(InputError):
        plots.position_patching_map(np.eye(2, 3), np.ones((2, 3)), ["a"], "t", "n")


def test_attribution_scatter_puts_exact_on_x_and_names_the_worst():
    exact = np.array([[0.0, 0.5], [1.0, -0.2]])
    estimate = exact + np.array([[0.0, 0.3], [0.0, 0.0]])
    fig = plots.attribution_scatter(estimate, exact, 0.9, worst=["L0.H1"])
    points = fig.data[1]
    np.testing.assert_array_equal(points.x, exact.ravel())
    np.testing.assert_array_equal(points.y, estimate.ravel())
    assert list(points.text) == ["", "L0.H1", "", ""]
    assert "r = 0.900" in fig.layout.title.text


def test_circuit_graph_places_layers_top_to_bottom_and_takes_node_clicks():
    edges = [Edge("embed", "L0.H1.k", 0.5), Edge("L0.H1", "L2.H0.q", -2.0),
             Edge("L2.H0", "logits", 1.0), Edge("MLP1", "L2.H0.v", 0.1)]
    fig = plots.circuit_graph(edges, n_layer=3, n_head=2, faithfulness=0.75)
    nodes = fig.data[-1]
    assert fig.layout.meta["node_curve"] == len(fig.data) - 1
    placed = dict(zip(nodes.customdata, zip(nodes.x, nodes.y)))
    assert placed["embed"][1] == -1 and placed["logits"][1] == 3
    assert placed["L0.H1"] == (1.0, 0.0) and placed["L2.H0"] == (0.0, 2.0)
    assert placed["MLP1"][0] > 1 and 1 < placed["MLP1"][1] < 2  # right of the heads, below L1
    sizes = dict(zip(nodes.customdata, nodes.marker.size))
    assert sizes["L2.H0"] == max(sizes.values())  # |-2.0| + 1.0 + 0.1: the most weight
    lines = [t for t in fig.data if t.mode == "lines"]
    colours = {t.line.color for t in lines}
    assert colours == {plots.circuits.POSITIVE, plots.circuits.NEGATIVE}
    widest = max(lines, key=lambda t: t.line.width)
    assert widest.line.color == plots.circuits.NEGATIVE  # the -2.0 edge
    assert "recovered 75% of the way from the corrupted run to the clean run" in \
        fig.layout.title.text
    hover = fig.data[-2].text
    assert "L0.H1 → L2.H0 (its q): -2" in hover
    index = list(nodes.customdata).index("L2.H0")
    assert plots.circuit_point_to_node({"customdata": "L2.H0"}) == "L2.H0"
    assert plots.circuit_point_to_node({"curve_number": len(fig.data) - 1,
                                        "point_index": index}, list(nodes.customdata),
                                       len(fig.data) - 1) == "L2.H0"
    assert plots.circuit_point_to_node({"curve_number": 0, "point_index": 0},
                                       list(nodes.customdata), len(fig.data) - 1) is None
    assert plots.node_to_head("L12.H3") == (12, 3)
    assert plots.node_to_head("MLP3") is None and plots.node_to_head("Lx.Hy") is None
    with pytest.raises(InputError):
        plots.circuit_graph([], 3, 2)


def test_patching_csv_has_one_row_per_component():
    from mha_viz.analysis.patching import PatchingResult

    values = np.arange(6.0).reshape(2, 3)
    result = PatchingResult(
        component="head", direction="denoise", method="exact", metric="m", values=values,
        normalized=values / 5, clean=5.0, corrupted=0.0, per_pair=values[None],
        per_pair_normalized=(values / 5)[None], clean_per_pair=np.array([5.0]),
        corrupted_per_pair=np.array([0.0]), std=np.zeros((2, 3)), ci95_low=values / 5,
        ci95_high=values / 5, row_labels=["L0", "L1"], col_labels=["H0", "H1", "H2"])
    table = pd.read_csv(io.BytesIO(export.patching_csv(result)))
    assert list(table["row"]) == ["L0"] * 3 + ["L1"] * 3
    assert list(table["column"]) == ["H0", "H1", "H2"] * 2
    np.testing.assert_allclose(table["patched_metric"], values.ravel())
    np.testing.assert_allclose(table["normalized"], values.ravel() / 5)
    loaded = np.load(io.BytesIO(export.npz_bytes(result.to_npz_dict())), allow_pickle=False)
    np.testing.assert_array_equal(loaded["values"], values)
    assert list(loaded["col_labels"]) == ["H0", "H1", "H2"]


def test_patching_maps_take_one_fixed_symmetric_scale():
    """Issue 51 item 11: path patching's cells within ±0.01 were drawn on a colour bar
    stretched to ±0.01, noise drawn as structure. Maps that share an axis share one fixed
    scale: -span to +span, whatever their values; without it, the largest |value|."""
    tiny = np.array([[0.004, -0.01], [0.002, 0.0]])
    fixed = plots.patching_heatmap(tiny, tiny, "t", "c", span=1.0).data[0]
    assert (fixed.zmin, fixed.zmid, fixed.zmax) == (-1.0, 0.0, 1.0)
    stretched = plots.patching_heatmap(tiny, tiny, "t", "c").data[0]
    assert (stretched.zmin, stretched.zmax) == (-0.01, 0.01)
    positions = plots.position_patching_map(tiny, tiny, ["a", "b"], "t", "c", span=1.0).data[0]
    assert (positions.zmin, positions.zmax) == (-1.0, 1.0)


def test_no_mark_of_a_patching_figure_is_red_or_blue_but_by_its_sign():
    """One colour meaning per page (issue 51): on the Circuits page red and blue say which
    way a patch or an edge moves the metric; nodes and scatter points are neither."""
    edges = [Edge("embed", "L0.H1.k", 0.5), Edge("L0.H1", "logits", -1.0),
             Edge("MLP0", "logits", 0.2)]
    nodes = plots.circuit_graph(edges, n_layer=2, n_head=2).data[-1]
    scatter = plots.attribution_scatter(np.eye(2), np.eye(2), 1.0).data[1]
    for colour in [*nodes.marker.color, scatter.marker.color]:
        red, green, blue = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
        assert max(red, green, blue) - min(red, green, blue) < 16, colour  # a grey
