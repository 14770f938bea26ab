"""The why panel's figures as a screen lays them out (issue 57 items 8 and 10), against sums
and positions written here: the source matrix's totals are its rows' and columns' sums and its
corner their sum, every value written signed; a token axis thinned to fit says each kept
label's position (on the induction toy's character text every fourth label was '␣'); a grid
of one to three rows takes its colour bar under it (beside it the bar was as short as a row,
its ticks overprinted and its title was cut to "core"); a number exactly as wide as its cell
is kept."""

from __future__ import annotations

import numpy as np

from mha_viz import plots
from mha_viz.plots.fit import Screen, fit_figure


def test_the_source_matrix_carries_its_row_and_column_totals():
    cells = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]])
    fig = plots.source_matrix(cells, ["L0.H1", "others"], ["embed", "L2 MLP", "others"],
                              "score by source")
    np.testing.assert_array_equal(fig.data[0].z, cells)
    totals = np.array(fig.data[1].z, dtype=float)
    np.testing.assert_allclose(totals[:2, 3], [1.0 - 2.0 + 0.5, 0.25 + 3.0 - 1.0])
    np.testing.assert_allclose(totals[2, :3], [1.25, 1.0, -0.5])
    assert totals[2, 3] == cells.sum()
    assert np.isnan(totals[:2, :3]).all()  # the cells are trace 0's
    assert fig.data[0].texttemplate == fig.data[1].texttemplate == "%{z:+.2f}"
    assert list(fig.layout.yaxis.ticktext)[-1] == list(fig.layout.xaxis.ticktext)[-1] == "total"
    # laid out for a column of a desk and of a phone, its numbers stay written
    for width in (520, 368):
        fitted = fit_figure(plots.source_matrix(cells, ["a", "b"], ["c", "d", "e"], "t"),
                            Screen(width))
        assert fitted.data[0].texttemplate and fitted.data[1].texttemplate


def test_the_contrast_bars_end_with_their_sum():
    fig = plots.source_bars(["L0.H0", "embed", "others"], np.array([1.5, -0.5, 0.25]),
                            "Key 3 against key 5", total=1.25, total_label="gap")
    assert list(fig.data[1].y) == ["gap"] and fig.data[1].x[0] == 1.25
    assert sum(fig.data[0].x) == fig.data[1].x[0]


def test_a_thinned_token_axis_says_each_labels_position():
    text = "the cat sat on the mat. the cat sat on the mat."
    labels = ["BOS"] + ["␣" if c == " " else c for c in text]
    n = len(labels)
    attention = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    # on a projector's short map every few rows keep a label: each names its row
    fig = fit_figure(plots.head_heatmap(attention, labels, height=300),
                     Screen(1200, height=720, present=True))
    ticks = list(fig.layout.yaxis.ticktext)
    assert len(ticks) < n
    kept = [int(t.split(" ", 1)[0]) for t in ticks]
    assert [t.split(" ", 1)[1] for t in ticks] == [labels[k] for k in kept]
    # a map thinned by its builder (past max_ticks) numbers its labels the same way
    long = plots.head_heatmap(attention, labels, max_ticks=10)
    assert all(t.split(" ", 1)[1] == labels[int(t.split(" ", 1)[0])]
               for t in long.layout.xaxis.ticktext)
    # all labels shown: none numbered
    short = plots.head_heatmap(attention[:6, :6], labels[:6])
    assert list(short.layout.xaxis.ticktext) == labels[:6]


def test_a_grid_of_a_row_or_three_takes_its_colour_bar_under_it():
    one_row = fit_figure(plots.layer_head_heatmap(np.random.rand(1, 4), "into L1.H0",
                                                  "score"), Screen(800))
    assert one_row.data[0].colorbar.orientation == "h"
    tall = fit_figure(plots.layer_head_heatmap(np.random.rand(6, 4), "t", "score"),
                      Screen(800))
    assert tall.data[0].colorbar.orientation != "h"
