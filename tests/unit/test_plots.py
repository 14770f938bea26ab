"""Tests of mha_viz.maps.downsample and mha_viz.plots: real values, not just "it ran"."""

from __future__ import annotations

import json
import re

import numpy as np
import plotly.graph_objects as go
import pytest

from mha_viz import plots as P
from mha_viz.core.errors import InputError
from mha_viz.maps.downsample import block_reduce, block_sizes, downsampled_labels, thin_labels


def softmax_rows(x: np.ndarray, causal: bool = False) -> np.ndarray:
    if causal:
        t = x.shape[-1]
        x = np.where(np.tril(np.ones((t, t), dtype=bool)), x, -np.inf)
    e = np.exp(x - x.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def random_attention(shape, seed=0, causal=False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return softmax_rows(rng.normal(size=shape).astype(np.float32) * 2, causal)


def hover(trace, i: int, j: int) -> str:
    """What Plotly shows for heatmap cell (row i, col j): the template with %{x} etc. filled."""
    out = trace.hovertemplate.replace("<extra></extra>", "")
    out = out.replace("%{y}", str(trace.y[i])).replace("%{x}", str(trace.x[j]))
    return re.sub(r"%\{z:\.(\d)f\}", lambda m: f"{float(trace.z[i][j]):.{m.group(1)}f}", out)


def unescape(s: str) -> str:
    return s.replace("&#36;", "$").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


# --------------------------------------------------------------------------- downsample


def test_block_reduce_divisible_mean_by_hand():
    m = np.arange(16, dtype=float).reshape(4, 4)
    red, f = block_reduce(m, max_size=2)
    assert f == 2
    np.testing.assert_allclose(red, [[(0 + 1 + 4 + 5) / 4, (2 + 3 + 6 + 7) / 4],
                                     [(8 + 9 + 12 + 13) / 4, (10 + 11 + 14 + 15) / 4]])


def test_block_reduce_partial_last_block_uses_real_size():
    m = np.arange(25, dtype=float).reshape(5, 5)
    red, f = block_reduce(m, max_size=2)  # ceil(5 / 2) = 3: blocks [0:3] and [3:5]
    assert f == 3 and red.shape == (2, 2)
    expected = [[m[a:b, c:d].mean() for c, d in ((0, 3), (3, 5))] for a, b in ((0, 3), (3, 5))]
    np.testing.assert_allclose(red, expected)
    assert red[1, 1] == pytest.approx((18 + 19 + 23 + 24) / 4)  # not padded with zeros


def test_block_reduce_max_and_leading_axes():
    rng = np.random.default_rng(1)
    m = rng.random((2, 3, 7, 7)).astype(np.float32)
    red, f = block_reduce(m, max_size=3, reduce="max")
    assert f == 3 and red.shape == (2, 3, 3, 3) and red.dtype == np.float32
    assert red[1, 2, 2, 0] == m[1, 2, 6:7, 0:3].max()
    assert red[0, 1, 0, 1] == m[0, 1, 0:3, 3:6].max()
    mean, _ = block_reduce(m, max_size=3)
    np.testing.assert_allclose(mean[1, 0, 2, 2], m[1, 0, 6:, 6:].mean(), rtol=1e-6)


def test_block_reduce_untouched_when_small():
    m = np.ones((3, 5, 5), dtype=np.float32)
    red, f = block_reduce(m, max_size=5)
    assert f == 1 and red is m


def test_block_reduce_rejects_bad_reduce():
    with pytest.raises(ValueError):
        block_reduce(np.ones((4, 4)), 2, reduce="median")


@pytest.mark.parametrize("t,max_size", [(12, 4), (13, 4), (101, 32)])
def test_block_reduce_row_stochastic_invariants(t, max_size):
    a = random_attention((t, t), seed=t)
    red, f = block_reduce(a, max_size)
    sizes = block_sizes(t, f)
    # Each reduced row is the average of its rows spread over key blocks: weighting every
    # column block by its size gives back exactly 1 ...
    np.testing.assert_allclose((red * sizes[None, :]).sum(-1), 1.0, atol=1e-6)
    # ... and the total mass is preserved when every block is weighted by its cell count.
    np.testing.assert_allclose((red * np.outer(sizes, sizes)).sum(), a.sum(dtype=np.float64),
                               rtol=1e-6)
    if t % f == 0:  # equal blocks: plain row sums are 1 / f
        np.testing.assert_allclose(red.sum(-1), 1.0 / f, atol=1e-6)
    else:
        assert not np.allclose(red.sum(-1), 1.0 / f)


def test_thin_labels():
    labels = [f"w{i}" for i in range(100)]
    vals, text = thin_labels(labels, 10)
    assert len(vals) <= 10 and vals[0] == 0
    assert len(set(np.diff(vals))) == 1  # evenly spaced
    assert text == [labels[v] for v in vals]
    assert thin_labels(["a", "a", "b"], 10) == ([0, 1, 2], ["a", "a", "b"])


def test_downsampled_labels():
    labels = list("abcdefghij")
    assert downsampled_labels(labels, 4) == ["0–3 a…", "4–7 e…", "8–9 i…"]
    assert downsampled_labels(labels, 3)[-1] == "9 j"
    assert downsampled_labels(labels, 1) == labels


# --------------------------------------------------------------------------- head_heatmap

TOKENS = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]


def test_head_heatmap_duplicate_labels_keep_all_positions():
    a = random_attention((8, 8))
    fig = P.head_heatmap(a, TOKENS, title="L0.H0")
    tr = fig.data[-1]
    assert np.asarray(tr.z).shape == (8, 8)
    assert len(tr.x) == 8 and len(set(tr.x)) == 8 and len(set(tr.y)) == 8
    assert list(fig.layout.xaxis.ticktext) == TOKENS  # both "the" ticks present
    assert list(fig.layout.yaxis.ticktext) == TOKENS
    np.testing.assert_allclose(np.asarray(tr.z), a)


def test_head_heatmap_hover_shows_tokens_and_positions():
    a = random_attention((8, 8))
    tr = P.head_heatmap(a, TOKENS).data[-1]
    assert hover(tr, 2, 5) == f"query 2 'cat' → key 5 'the': {a[2, 5]:.3f}"
    assert hover(tr, 5, 1) == f"query 5 'the' → key 1 'the': {a[5, 1]:.3f}"


def test_head_heatmap_causal_grey_mask():
    a = random_attention((8, 8), causal=True)
    fig = P.head_heatmap(a, TOKENS, causal=True)
    z = np.asarray(fig.data[-1].z, dtype=float)
    upper = np.triu(np.ones((8, 8), dtype=bool), 1)
    assert np.isnan(z[upper]).all() and np.isfinite(z[~upper]).all()
    masks = [s for s in fig.layout.shapes if s.name == "causal mask"]
    assert len(masks) == 1 and masks[0].fillcolor == P.MASK_GREY
    assert "masked" in fig.layout.title.text
    small = P.head_heatmap(a[:3, :3], TOKENS[:3], causal=True)
    path = [s for s in small.layout.shapes if s.name == "causal mask"][0].path
    assert path == "M 2.5,-0.5 L 0.5,-0.5 L 0.5,0.5 L 1.5,0.5 L 1.5,1.5 L 2.5,1.5 L 2.5,2.5 L 2.5,2.5 Z"
    # Without the option the zeros are drawn as zeros.
    plain = P.head_heatmap(a, TOKENS, causal=True, grey_causal_mask=False)
    assert not np.isnan(np.asarray(plain.data[-1].z, dtype=float)).any()
    assert not plain.layout.shapes


def test_head_heatmap_downsampled_causal_masks_whole_blocks_only():
    a = random_attention((10, 10), causal=True)
    fig = P.head_heatmap(a, [f"t{i}" for i in range(10)], causal=True, max_size=5)
    z = np.asarray(fig.data[-1].z, dtype=float)
    assert z.shape == (5, 5)
    assert np.isnan(z[0, 1]) and np.isfinite(z[1, 1]) and np.isfinite(z[4, 0])
    assert z[1, 1] == pytest.approx(a[2:4, 2:4].mean(), rel=1e-5)
    assert "downsampled 2×" in fig.layout.title.text
    assert hover(fig.data[-1], 1, 0).startswith("query 2–3 't2'… → key 0–1 't0'…: mean ")


def test_head_heatmap_pair_boundary_blocks():
    a = random_attention((8, 8))
    fig = P.head_heatmap(a, TOKENS, pair_boundary=5)
    rects = {s.name: s for s in fig.layout.shapes if s.type == "rect"}
    assert set(rects) == {"A→A", "A→B", "B→A", "B→B"}
    ab = rects["A→B"]  # queries of A (rows 0..4), keys of B (columns 5..7)
    assert (ab.y0, ab.y1, ab.x0, ab.x1) == (-0.5, 4.5, 4.5, 7.5)
    down = P.head_heatmap(random_attention((40, 40)), [str(i) for i in range(40)],
                          pair_boundary=20, max_size=10)
    ba = {s.name: s for s in down.layout.shapes}["B→A"]
    assert (ba.y0, ba.x1) == (4.5, 4.5)  # position 20 of 40 at factor 4 -> between blocks 4 and 5
    with pytest.raises(InputError):
        P.head_heatmap(a, TOKENS, pair_boundary=8)


def test_head_heatmap_rejects_label_mismatch():
    with pytest.raises(InputError):
        P.head_heatmap(random_attention((8, 8)), TOKENS[:7])


# --------------------------------------------------------------------------- grid


def test_model_view_grid_single_trace_and_head_mapping():
    att = random_attention((2, 3, 4, 4))
    att[1, 2] = np.eye(4, dtype=np.float32)
    fig = P.model_view_grid(att, thumb_size=4, selected=(1, 2))
    assert [type(t) for t in fig.data] == [go.Heatmap, go.Scatter]
    image = np.asarray(fig.data[0].z)
    assert image.dtype == np.uint8
    step = 4 + 1  # thumbnail + one gap cell
    assert image.shape == (2 * step - 1, 3 * step - 1)
    thumb = image[step:step + 4, 2 * step:2 * step + 4]
    np.testing.assert_array_equal(thumb, np.where(np.eye(4), 255, 1))  # scaled to its max
    for l in range(2):
        for h in range(3):
            a = att[l, h]
            expected = 1 + np.rint(254 * a / a.max())
            got = image[l * step:l * step + 4, h * step:h * step + 4]
            np.testing.assert_array_equal(got, expected, err_msg=f"thumbnail L{l}.H{h}")
    assert (image[4, :] == 0).all() and (image[:, 4] == 0).all()  # gaps
    pts = fig.data[1]
    assert len(pts.x) == 6
    for n, (l, h) in enumerate(pts.customdata):
        assert (l, h) == (n // 3, n % 3) and pts.hovertext[n] == f"L{l}.H{h}"
    assert pts.x[5] == 2 * step + 1.5 and pts.y[5] == step + 1.5
    assert P.grid_point_to_head({"customdata": [1, 2]}, 3) == (1, 2)
    assert P.grid_point_to_head({"curve_number": 1, "point_index": 4}, 3) == (1, 1)
    assert P.grid_point_to_head({"curve_number": 0, "point_index": 4}, 3) is None
    sel = [s for s in fig.layout.shapes if s.name == "selected"]
    assert len(sel) == 1 and sel[0].x0 < 2 * step < 2 * step + 3 < sel[0].x1


def test_model_view_grid_json_small_at_12x12x500():
    att = np.random.default_rng(0).random((12, 12, 500, 500), dtype=np.float32)
    att /= att.sum(-1, keepdims=True)
    fig = P.model_view_grid(att)
    size = len(fig.to_json())
    assert size < 1_000_000, size
    assert len(fig.data) == 2 and len(fig.data[1].x) == 144


# --------------------------------------------------------------------------- line view


def test_line_view_bins_not_lines_at_200():
    a = random_attention((200, 200))
    labels = [f"w{i % 50}" for i in range(200)]
    fig = P.line_view(a, labels, min_weight=0.02)
    lines = [t for t in fig.data if t.mode == "lines" and t.showlegend is False]
    legend = [t for t in fig.data if t.mode == "lines" and t.showlegend is not False]
    assert 1 <= len(lines) <= 6 and len(legend) == 1 and len(fig.data) <= 9
    # a NaN breaks the line after each segment (typed arrays: Plotly draws NaN as a gap)
    n_segments = sum(int(np.isnan(np.asarray(t.x, dtype=float)).sum()) for t in lines)
    assert n_segments == int((a >= 0.02).sum())
    texts = [t for t in fig.data if t.mode == "text"]
    assert [len(t.text) for t in texts] == [200, 200]


def test_line_view_heads_truncation_and_query():
    a = random_attention((4, 250, 250))
    labels = [f"w{i}" for i in range(250)]
    fig = P.line_view(a, labels, heads=[1, 3], layer=5)
    names = {t.name for t in fig.data if t.mode == "lines"}
    assert names == {"L5.H1", "L5.H3"}
    colours = {t.name: t.line.color for t in fig.data if t.mode == "lines"}
    assert colours["L5.H1"] != colours["L5.H3"]
    assert "first 200 of 250" in fig.layout.title.text
    one = P.line_view(a[0, :10, :10], labels[:10], query=3, min_weight=0.0)
    bins = [t for t in one.data if t.mode == "lines" and t.showlegend is False]
    ys = [v for t in bins for v in t.y[0::3]]
    assert set(ys) == {3}  # every line starts at query 3
    hov = [h for t in bins for h in t.hovertext if h]
    assert any("query 3 'w3' → key" in h for h in hov)


# --------------------------------------------------------------------------- layer x head


def test_layer_head_heatmap_values_and_hover():
    v = np.arange(12 * 12, dtype=float).reshape(12, 12) / 10
    fig = P.layer_head_heatmap(v, "Entropy", "nats", reference=np.log(128),
                               reference_name="uniform over 128 keys")
    tr = fig.data[0]
    assert tr.text[3][7] == "L3.H7"
    assert tr.hovertemplate.replace("%{text}", tr.text[3][7]).startswith("L3.H7: %{z:.2f}")
    assert tr.texttemplate == "%{z:.2f}"
    assert "4.85" in tr.colorbar.title.text
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.yaxis.ticktext[0] == "L0"
    big = P.layer_head_heatmap(np.zeros((24, 20)), "t", "c")
    assert big.data[0].texttemplate is None
    div = P.layer_head_heatmap(np.array([[-1.0, 0.5], [2.0, 0.0]]), "Ablation", "Δ",
                               diverging=True)
    assert div.data[0].zmid == 0 and div.data[0].zmin == -2 and div.data[0].zmax == 2


def test_per_query_line_reference():
    v = np.array([0.0, 0.5, 0.9, 1.2])
    ref = np.log(np.arange(1, 5))
    fig = P.per_query_line(v, ["a", "b", "a", "c"], "Row entropy", reference=ref,
                           reference_name="ln(i+1)")
    bar, line = fig.data
    np.testing.assert_allclose(bar.y, v)
    assert bar.hovertext[2] == "query 2 'a'"
    np.testing.assert_allclose(line.y, ref)
    assert line.line.dash == "dash" and line.name == "ln(i+1)"
    flat = P.per_query_line(v, list("abcd"), "t", reference=np.log(4))
    assert list(flat.data[1].y) == [np.log(4)] * 2


def test_class_mass_by_layer_mean_min_max():
    m = np.array([[0.1, 0.3], [0.5, 0.9]])
    fig = P.class_mass_by_layer({"[SEP]": m, "previous": m / 2})
    sep = fig.data[0]
    assert sep.name == "[SEP]"
    np.testing.assert_allclose(sep.y, [0.2, 0.7])
    np.testing.assert_allclose(np.asarray(sep.customdata), [[0.1, 0.3], [0.5, 0.9]])
    assert list(fig.layout.xaxis.ticktext) == ["L0", "L1"]


# --------------------------------------------------------------------------- similarity


def _distances(n, seed=0):
    rng = np.random.default_rng(seed)
    d = rng.random((n, n)) * np.log(2)
    d = (d + d.T) / 2
    np.fill_diagonal(d, 0)
    return d


def test_distance_heatmap_kind_in_title_and_colorbar():
    d = _distances(12)
    js = P.distance_heatmap(d, n_head=4)
    assert "Jensen-Shannon divergence (nats)" in js.layout.title.text
    assert "Jensen-Shannon divergence" in js.data[0].colorbar.title.text
    dist = P.distance_heatmap(np.sqrt(d), n_head=4, kind="js_distance")
    assert "Jensen-Shannon distance" in dist.layout.title.text
    assert "divergence" not in dist.layout.title.text
    cosine = P.distance_heatmap(d, n_head=4, kind="cosine")
    assert "cosine distance" in cosine.layout.title.text
    with pytest.raises(InputError):
        P.distance_heatmap(d, n_head=4, kind="euclid")
    lines = [s for s in js.layout.shapes if s.type == "line"]
    assert len(lines) == 2 * 2  # 3 layers -> 2 boundaries, one line per axis
    assert {s.x0 for s in lines if s.x0 == s.x1} == {3.5, 7.5}


def test_distance_heatmap_order_and_layer_strip():
    d = _distances(12)
    order = np.array([5, 0, 11, 3, 8, 1, 2, 4, 6, 7, 9, 10])
    fig = P.distance_heatmap(d, n_head=4, order=order)
    main = fig.data[0]
    np.testing.assert_allclose(np.asarray(main.z), d[np.ix_(order, order)])
    assert list(main.x)[:3] == ["L1.H1", "L0.H0", "L2.H3"]
    strips = [t for t in fig.data[1:] if t.name == "layer"]
    assert len(strips) == 2
    np.testing.assert_array_equal(np.asarray(strips[0].z).ravel(), order // 4)
    with pytest.raises(InputError):
        P.distance_heatmap(d, n_head=4, order=np.arange(11))


def test_head_scatter_layers_and_highlight():
    coords = np.random.default_rng(0).normal(size=(12, 2))
    fig = P.head_scatter(coords, n_head=4, highlight=[6])
    layers = [t for t in fig.data if t.name.startswith("L")]
    assert [t.name for t in layers] == ["L0", "L1", "L2"]
    assert layers[1].hovertext[2] == "L1.H2"
    np.testing.assert_allclose([layers[1].x[2], layers[1].y[2]], coords[6])
    assert len({t.marker.color for t in layers}) == 3
    assert fig.data[-1].text == ("L1.H2",)


# --------------------------------------------------------------------------- pruning, matrix


def test_pruning_curve_percent():
    fig = P.pruning_curve_figure([0, 0.1, 0.5], [3.0, 3.1, 4.0], baseline=3.0, score_name="loss")
    np.testing.assert_allclose(fig.data[0].x, [0, 10, 50])
    assert fig.layout.xaxis.ticksuffix == "%"
    assert list(fig.data[1].y) == [3.0, 3.0]


def test_matrix_figure_duplicates_masks_and_values():
    m = np.array([[1.0, -np.inf], [2.0, 3.0], [0.5, 0.25]])
    fig = P.matrix_figure(m, ["the", "cat", "the"], ["k0", "k1"], "scores")
    tr = fig.data[0]
    z = np.asarray(tr.z, dtype=float)
    assert z.shape == (3, 2) and np.isnan(z[0, 1]) and z[2, 1] == 0.25
    assert list(fig.layout.yaxis.ticktext) == ["the", "cat", "the"]
    assert list(fig.layout.yaxis.tickvals) == [0, 1, 2]
    assert tr.text[2][0] == "the (2) · k0 (0)"
    assert tr.texttemplate == "%{z:.2f}"
    big = P.matrix_figure(np.zeros((30, 30)), [str(i) for i in range(30)],
                          [str(i) for i in range(30)], "big")
    assert big.data[0].texttemplate is None


# --------------------------------------------------------------------------- safety, config


def test_no_dollar_anywhere():
    toks = ["$", "cost", "$5", "<s>", "a&b", "$x$"]
    a = random_attention((6, 6), causal=True)
    att = np.stack([np.stack([a, a]), np.stack([a, a])])
    d = _distances(4)
    figs = [
        P.head_heatmap(a, toks, title="price in $", causal=True, pair_boundary=2),
        P.head_heatmap(np.tile(a, (3, 3)), toks * 3, title="$", max_size=6),
        P.model_view_grid(att, title="$ heads $"),
        P.line_view(att[0], toks, layer=0, title="$"),
        P.layer_head_heatmap(np.ones((2, 2)), "$ title $", "$ per head", reference=1.0,
                             reference_name="$ref$"),
        P.per_query_line(np.ones(6), toks, "$", reference=1.0, reference_name="$u$",
                         y_title="$"),
        P.class_mass_by_layer({"$": np.ones((2, 2))}, title="$"),
        P.distance_heatmap(d, 2, title="$"),
        P.distance_heatmap(d, 2, order=np.array([3, 2, 1, 0])),
        P.head_scatter(np.zeros((4, 2)), 2, highlight=[1], title="$"),
        P.pruning_curve_figure([0, 0.5], [1, 2], baseline=1, score_name="$ loss"),
        P.matrix_figure(np.ones((6, 2)), toks, ["$", "b"], "$ matrix", row_title="$",
                        col_title="$"),
    ]
    for fig in figs:
        js = fig.to_json()
        assert "$" not in js
    # The dollar is still there for the reader, as an entity Plotly decodes.
    heat = figs[0].data[-1]
    assert unescape(hover(heat, 3, 2)).startswith("query 3 '<s>' → key 2 '$5': ")
    assert unescape(hover(heat, 4, 4)).startswith("query 4 'a&b' → key 4 'a&b': ")
    assert "&#36;" in figs[0].layout.title.text


def test_figure_config():
    png = P.FIGURE_CONFIG()
    assert png["displaylogo"] is False
    assert png["toImageButtonOptions"] == {"format": "png", "filename": "mha-viz", "scale": 2}
    svg = P.FIGURE_CONFIG("svg")
    assert svg["toImageButtonOptions"]["format"] == "svg"
    for cfg in (png, svg):
        assert "toImage" not in cfg.get("modeBarButtonsToRemove", [])
        json.dumps(cfg)
    with pytest.raises(InputError):
        P.FIGURE_CONFIG("jpeg")


def test_plots_module_does_not_import_streamlit():
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(P))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}
    assert "streamlit" not in imported


def test_loss_strip_cells_take_clicks_that_name_their_token():
    from mha_viz import plots

    tokens = [f"t{i}" for i in range(15)]
    loss = np.r_[np.nan, np.linspace(0.5, 3, 14)]
    fig = plots.token_loss_strip(tokens, loss, [f"tip {i}" for i in range(15)], per_row=12)
    cells = next(t for t in fig.data if t.name == "tokens")
    assert list(cells.x) == list(range(12)) + [0, 1, 2] and list(cells.y) == [0] * 12 + [1] * 3
    point = {"curve_number": 1, "point_index": 13, "customdata": cells.customdata[13],
             "x": 1, "y": 1}
    assert plots.strip_point_to_token(point) == 13
    assert plots.strip_point_to_token({"customdata": {"0": 4}}) == 4  # a typed array
    assert plots.strip_point_to_token({"x": 1}) is None
    assert plots.strip_point_to_token({"customdata": "junk"}) is None


def test_log_colour_scale_keeps_the_plain_values_in_hover_and_cells():
    values = np.array([[1e-4, -0.02, 0.5], [2.0, 0.0, -2.0]])
    fig = P.layer_head_heatmap(values, "t", "Δ", diverging=True, log_scale=True)
    trace = fig.data[0]
    z = np.array(trace.z, dtype=float)
    assert np.allclose(np.asarray(trace.customdata, dtype=float), values)
    assert "customdata" in trace.hovertemplate and "customdata" in trace.texttemplate
    # colour = signed decades above 1/1000 of the largest size; the smallest sizes at 0
    assert z[1, 0] == pytest.approx(3.0) and z[1, 2] == pytest.approx(-3.0)
    assert z[0, 2] == pytest.approx(np.log10(0.5 / 2e-3))
    assert z[0, 0] == 0.0 and z[1, 1] == 0.0
    assert list(trace.colorbar.tickvals) == [-3, -2, -1, 0, 1, 2, 3]
    assert trace.colorbar.ticktext[-1] == "2" and "log colour scale" in fig.layout.title.text


def test_attention_thumbnails_use_the_same_colour_scale_as_single_maps():
    assert P.GRID_SCALE == P.WEIGHT_SCALE


def test_per_query_line_is_a_filled_line_past_bars_up_to():
    n = P.layer_head.BARS_UP_TO + 1
    v = np.linspace(0.0, 2.0, n)
    fig = P.per_query_line(v, [f"t{i}" for i in range(n)], "Row entropy", reference=1.0)
    values = fig.data[0]
    assert values.type == "scatter" and values.fill == "tozeroy"
    np.testing.assert_allclose(values.y, v)
    assert values.hovertext[n - 1] == f"query {n - 1} 't{n - 1}'"
    short = P.per_query_line(v[:-1], [f"t{i}" for i in range(n - 1)], "Row entropy")
    assert short.data[0].type == "bar"


def test_model_view_grid_from_thumbnails_kept_between_runs_is_the_same_figure():
    """The Attention maps page keeps the block-averaged thumbnails per input and hands them
    over: the figure, its note that they were averaged included, is the one from the maps."""
    maps = np.random.default_rng(0).random((2, 3, 100, 100)).astype(np.float32)
    maps /= maps.sum(-1, keepdims=True)
    whole = P.model_view_grid(maps, thumb_size=32, selected=(1, 2))
    thumbnails, factor = block_reduce(maps, 32)
    assert factor == 4
    kept = P.model_view_grid(thumbnails, thumb_size=32, selected=(1, 2), from_tokens=100)
    assert np.array_equal(np.asarray(whole.data[0].z), np.asarray(kept.data[0].z))
    assert whole.layout.title.text == kept.layout.title.text
    assert "downsampled 4× (100 → 25 positions)" in kept.layout.title.text


def test_needle_grid_puts_depth_down_and_length_across():
    from mha_viz.plots.long_range import labelled_bars, needle_grid_figure

    accuracy = np.array([[1.0, 0.5, 0.0], [0.25, 0.75, 1.0]])  # [lengths, depths]
    fig = needle_grid_figure([256, 1024], [0.0, 0.5, 1.0], accuracy, "Grid $x$")
    trace = fig.data[0]
    np.testing.assert_array_equal(np.asarray(trace.z), accuracy.T)  # row = depth
    assert list(fig.layout.xaxis.ticktext) == ["256", "1,024"]
    assert list(fig.layout.yaxis.ticktext) == ["0%", "50%", "100%"]
    assert (trace.zmin, trace.zmax) == (0.0, 1.0) and "$" not in fig.layout.title.text
    assert trace.customdata[2][1] == "1,024 tokens, needle at 100%"
    with pytest.raises(InputError, match=r"\[lengths, depths\] = \[2, 2\]"):
        needle_grid_figure([256, 1024], [0.0, 1.0], accuracy, "bad")
    bars = labelled_bars(["full", "sink + window", "window only"], [3.1, 3.3, 7.9], "Loss",
                         "nats", marked=[False, True, False])
    bar = bars.data[0]
    np.testing.assert_array_equal(bar.x, [3.1, 3.3, 7.9])
    assert list(bar.y) == [0, 1, 2] and bars.layout.yaxis.autorange == "reversed"  # in order
    assert bar.marker.color[1] != bar.marker.color[0] == bar.marker.color[2]
    assert list(bar.text) == ["full: 3.100", "sink + window: 3.300", "window only: 7.900"]
    with pytest.raises(InputError):
        labelled_bars([], [], "empty", "nats")
