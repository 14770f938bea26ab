"""mha_viz.plots.fit: figures laid out for the screen they are shown on."""

import numpy as np
import pytest

from mha_viz import plots
from mha_viz.plots.fit import NARROW_PX, Screen, fit_figure


def _attention(n):
    a = np.random.default_rng(0).random((n, n))
    return a / a.sum(-1, keepdims=True)


def test_grid_maps_get_square_cells_and_a_colour_bar_as_tall_as_the_map():
    fig = fit_figure(plots.layer_head_heatmap(np.ones((6, 4)), "t", "nats"), Screen(1000))
    m = fig.layout.margin
    plot_h = fig.layout.height - m.t - m.b
    plot_w = fig.layout.width - m.l - m.r
    assert abs(plot_h / 6 - plot_w / 4) < 1.0  # square cells
    assert fig.layout.width < 1000  # its natural size, not stretched
    # the colour bar spans the plot area, which the map now fills
    assert fig.data[0].colorbar.len in (None, 1)


def test_on_a_phone_the_colour_bar_goes_under_the_map_and_the_map_keeps_its_width():
    fig = fit_figure(plots.head_heatmap(_attention(11), [f"tok{i}" for i in range(11)]),
                     Screen(368))
    assert fig.data[0].colorbar.orientation == "h"
    m = fig.layout.margin
    assert (fig.layout.width or 368) - m.l - m.r >= 250


def test_on_a_phone_a_grid_of_few_columns_widens_to_a_usable_plot():
    """Issue 49: the Training page's 2 layers x 4 heads map was 136 px wide at 400 px."""
    screen = Screen(360)  # a 400-px phone's main column, as the browser reports it
    fig = fit_figure(plots.layer_head_heatmap(np.ones((2, 4)), "t", "score"), screen)
    m = fig.layout.margin
    assert (fig.layout.width or screen.width) - m.l - m.r >= 250
    wide = fit_figure(plots.layer_head_heatmap(np.ones((2, 4)), "t", "score"), Screen(1000))
    m = wide.layout.margin
    assert wide.layout.width - m.l - m.r < 250  # a desk keeps square cells of its size


def test_numbers_in_cells_only_where_they_fit():
    fig = plots.matrix_figure(np.random.default_rng(1).random((11, 11)),
                              [str(i) for i in range(11)], [str(i) for i in range(11)], "m")
    assert fit_figure(fig, Screen(1200)).data[0].texttemplate  # 34 px cells hold "0.12"
    fig = plots.matrix_figure(np.random.default_rng(1).random((11, 11)),
                              [str(i) for i in range(11)], [str(i) for i in range(11)], "m")
    assert not fit_figure(fig, Screen(300)).data[0].texttemplate  # ~20 px cells do not


def test_crowded_tick_labels_are_thinned_by_the_space_they_have():
    labels = [f"t{i}" for i in range(200)]
    fig = plots.tensor_figure(np.zeros((4, 200)), ["a", "b", "c", "d"], labels, "wide",
                              show_values=False, max_ticks=200)
    before = len(fig.layout.xaxis.tickvals)
    fit_figure(fig, Screen(400))
    after = len(fig.layout.xaxis.tickvals)
    assert after < before and after * 12 * 1.35 <= 400


def test_long_titles_wrap_to_the_width_and_the_figure_grows_to_hold_them():
    title = "A rather long title that would run off the right edge of a phone screen"
    fig = plots.per_query_line(np.ones(5), list("abcde"), title)
    height = fig.layout.height
    fit_figure(fig, Screen(NARROW_PX - 200))
    assert "<br>" in fig.layout.title.text
    assert fig.layout.height > height


def test_presentation_mode_enlarges_type_and_fits_a_grid_within_one_screen():
    fig = fit_figure(plots.layer_head_heatmap(np.ones((30, 9)), "t", "nats"),
                     Screen(1200, height=720, present=True))
    assert fig.layout.font.size >= 18
    assert fig.layout.height <= 720


def test_long_token_labels_are_shortened_on_a_phone_only():
    labels = ["averyveryverylongtoken"] + [f"t{i}" for i in range(5)]
    fig = fit_figure(plots.head_heatmap(_attention(6), labels), Screen(368))
    assert max(len(t) for t in fig.layout.yaxis.ticktext) <= 8
    fig = fit_figure(plots.head_heatmap(_attention(6), labels), Screen(1000))
    assert "averyveryverylongtoken" in "".join(fig.layout.yaxis.ticktext)


@pytest.mark.parametrize("cookie, size", [
    ("1000x800x1400", {"width": 1000, "height": 800, "window": 1400}),
    ("1000x0x1400", {"width": 1000, "height": 0, "window": 1400}),
    (None, None), ("", None), ("99999x1x1", None), ("1000x800", None), ("<b>x</b>", None),
    ("-5x-5x-5", None), ("1000x800x1400; evil=1", None), ("50x800x1400", None)])
def test_viewport_cookie_is_read_strictly(monkeypatch, cookie, size):
    """The size a browser's last tab reported comes back from a cookie the visitor can
    write: only three numbers in range are used."""
    from types import SimpleNamespace

    from mha_viz.ui import output

    cookies = {} if cookie is None else {output.VIEWPORT_COOKIE: cookie}
    monkeypatch.setattr(output, "st", SimpleNamespace(context=SimpleNamespace(cookies=cookies)))
    assert output._size_from_cookie() == size


# what Plotly's d3 writes for ".2g": two significant digits, trailing zeros kept
MINILM_EFFECTS = np.array([[0.0009, -0.0019, 0.012] * 4] * 6)  # 6 layers x 12 heads
LONGEST = "-0.0019"  # and "0.00090": 7 glyphs


@pytest.mark.parametrize("screen", [Screen(1400), Screen(1280, height=720, present=True)])
def test_cell_numbers_are_12_px_at_least_and_their_cells_hold_the_longest(screen):
    """Issue 51 item 14: MiniLM's ablation map wrote ".2g" numbers at 10 px in 34-px cells,
    where "0.00090" and "-0.0019" ran together. A desk writes them at 12 px at least (a
    projector 14), in cells widened to hold the longest."""
    fig = fit_figure(plots.layer_head_heatmap(MINILM_EFFECTS, "Δ shift", "Δ", fmt=".2g",
                                              diverging=True), screen)
    trace = fig.data[0]
    assert trace.texttemplate, "the numbers fit a wide screen"
    size = trace.textfont.size
    assert size >= (14 if screen.present else 12)
    m = fig.layout.margin
    cell = ((fig.layout.width or screen.width) - m.l - m.r) / 12
    assert cell >= size * 0.6 * len(LONGEST), (cell, size)


def test_cell_numbers_that_do_not_fit_at_12_px_are_left_out():
    fig = fit_figure(plots.layer_head_heatmap(MINILM_EFFECTS, "Δ shift", "Δ", fmt=".2g"),
                     Screen(400))
    assert not fig.data[0].texttemplate


@pytest.mark.parametrize("screen", [Screen(1400), Screen(1280, height=720, present=True)])
def test_a_maps_title_wraps_to_the_map_not_the_screen(screen):
    """Issue 51 item 14: a map narrower than the screen kept its title on one line as wide
    as the screen, cut at the map's edge ("…switched off (zero ablat")."""
    title = "Δ embedding shift when a head is switched off (zero ablation)"
    fig = fit_figure(plots.layer_head_heatmap(np.ones((2, 4)), title, "Δ", show_values=False),
                     screen)
    assert fig.layout.width is not None and fig.layout.width < screen.width
    size = fig.layout.title.font.size
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) > 1
    assert all(len(line) * 0.6 * size <= fig.layout.width - 20 for line in lines), (
        lines, fig.layout.width)
    assert fig.layout.margin.t >= len(lines) * size * 1.3  # room above the plot for them


# A lesson's step on a 1280x720 projector: the figures' column (3/5 of the main column) and
# the height left under the lesson's header and progress row.
LESSON_PROJECTOR = Screen(692, height=544, present=True, fill=True)
TOKENS = [f"{i} ␣word{i}" for i in range(40)]


def _plot_height(fig) -> float:
    m = fig.layout.margin
    return fig.layout.height - m.t - m.b


def _labels_kept(axis) -> int:
    return len(axis.ticktext if axis.ticktext is not None else axis.tickvals)


@pytest.mark.parametrize("n", [13, 15])
def test_a_lessons_map_fills_the_projectors_height_and_keeps_every_label(n):
    """Issue 57 item 4: steps 6-8's 15x15 map was 410x130 px with every third query
    labelled; a lesson's map now has the screen's height (>= 300 px plot area, within it)
    and a label for every token."""
    scores = np.random.default_rng(0).normal(0, 6, (n, n))
    fig = fit_figure(plots.tensor_figure(scores, TOKENS[:n], TOKENS[:n], f"scores: {n} × {n}",
                                         row_title="query", col_title="key"),
                     LESSON_PROJECTOR)
    assert 300 <= _plot_height(fig) and fig.layout.height <= LESSON_PROJECTOR.height
    assert _labels_kept(fig.layout.yaxis) == n and _labels_kept(fig.layout.xaxis) == n
    assert fig.layout.yaxis.tickfont.size >= 14  # still legible from the back
    wide = fit_figure(plots.tensor_figure(scores[:, :4].repeat(16, 1), TOKENS[:n],
                                          [f"k{j}" for j in range(64)], "Q: 13 × 64"),
                      Screen(220, height=544, present=True, fill=True))  # one of Q, K, V
    assert 300 <= _plot_height(wide) and wide.layout.height <= 544
    assert _labels_kept(wide.layout.yaxis) == n


def test_a_lessons_map_of_40_tokens_keeps_every_label_on_a_desk():
    fig = fit_figure(plots.tensor_figure(np.eye(40), TOKENS, TOKENS, "weights: 40 × 40"),
                     Screen(720, fill=True))  # 1400 px wide: the figures' column
    assert _labels_kept(fig.layout.yaxis) == 40 and _labels_kept(fig.layout.xaxis) == 40
    assert _plot_height(fig) >= 40 * 12 * 1.15  # a row as tall as its label


def test_two_maps_side_by_side_fill_a_lessons_screen_with_their_bar_beside_them():
    """Issue 57 item 1: step 13's two maps had plot areas of 201x18 px, their colour bars
    over the key labels."""
    fig = fit_figure(plots.head_heatmap_row([_attention(13), _attention(13)], TOKENS[:13],
                                            ["weights", "share moved"], title="L1.H2"),
                     LESSON_PROJECTOR)
    assert 300 <= _plot_height(fig) and fig.layout.height <= LESSON_PROJECTOR.height
    assert fig.layout.coloraxis.colorbar.orientation != "h"  # beside, not on the labels

