"""The Features page's figures (plots.features): each draws the numbers it is given, where a
reader finds them (a token's cell, a head's row and a source's column with their totals, a
feature's bar), reports a click back as the position or feature it drew, and fits a desk,
a projector (1280x720, presentation mode) and a phone (400 px)."""

import numpy as np
import pytest

from mha_viz import plots
from mha_viz.core.errors import InputError
from mha_viz.plots.fit import NARROW_PX, Screen, fit_figure

pytestmark = pytest.mark.unit

TOKENS = ["<|endoftext|>", "t", "h", "e", "␣", "c", "a", "t", "␣", "s", "a", "t", "␣", "t"]
SCREENS = {"desk": Screen(1100), "projector": Screen(1240, 700, present=True),
           "phone": Screen(360)}


def test_the_strip_colours_each_token_by_its_activation_and_marks_the_query():
    activation = np.linspace(0.0, 2.6, len(TOKENS))
    fig = plots.feature_strip(TOKENS, activation, "f3 fires here", "white = 0", per_row=6,
                              marked=8)
    z = np.asarray(fig.data[0].z, dtype=float)
    np.testing.assert_allclose(z.ravel()[:len(TOKENS)], activation)
    assert np.isnan(z.ravel()[len(TOKENS):]).all() and fig.data[0].zmax == pytest.approx(2.6)
    (rect,) = fig.layout.shapes
    assert (rect.x0 + 0.5, rect.y0 + 0.5) == (8 % 6, 8 // 6)
    markers = fig.data[1]
    assert list(markers.customdata) == list(range(len(TOKENS)))
    assert plots.index_of_point({"customdata": markers.customdata[11]}) == 11
    assert plots.index_of_point({"customdata": {"0": 4}}) == 4
    assert plots.index_of_point({"x": 1}) is None
    with pytest.raises(InputError):
        plots.feature_strip(TOKENS, np.zeros((2, 2)), "t", "n")


def test_the_sources_map_holds_the_terms_and_their_totals():
    generator = np.random.default_rng(0)
    terms = generator.normal(size=(4, 9))
    heads = [f"L1.H{h}" for h in range(4)]
    fig = plots.feature_sources_map(terms, heads, TOKENS[:9], "f3 at query 8 by source")
    np.testing.assert_allclose(np.asarray(fig.data[0].z, dtype=float), terms)
    totals = np.asarray(fig.data[1].z, dtype=float)
    np.testing.assert_allclose(totals[:4, 9], terms.sum(1))  # each head's part
    np.testing.assert_allclose(totals[4, :9], terms.sum(0))  # each source's part
    assert totals[4, 9] == pytest.approx(terms.sum())  # the corner: every term
    assert list(fig.layout.yaxis.ticktext) == heads + ["total"]
    assert list(fig.layout.xaxis.ticktext)[1:] == [f"{j} {t}" for j, t in enumerate(TOKENS[:9])
                                                   ][1:] + ["total"]
    assert fig.layout.xaxis.ticktext[0] == "0 &lt;|endof…"  # cut, Plotly's markup escaped
    # on a phone the tokens run down the map: the same totals, turned
    down = plots.feature_sources_map(terms, heads, TOKENS[:9], "t", sources_down=True)
    np.testing.assert_allclose(np.asarray(down.data[0].z, dtype=float), terms.T)
    np.testing.assert_allclose(np.asarray(down.data[1].z, dtype=float)[:9, 4], terms.sum(0))
    assert list(down.layout.xaxis.ticktext) == heads + ["total"]
    # a long text's token labels are thinned across a phone, each kept one by its position
    wide = plots.feature_sources_map(generator.normal(size=(4, 60)), heads, ["␣"] * 60, "t")
    fit_figure(wide, Screen(360))
    kept = list(wide.layout.xaxis.ticktext)
    step = int(kept[1].split()[0])
    assert len(kept) < 61 and kept[:2] == ["0 ␣", f"{step} ␣"] and step > 1


def test_the_bars_rank_a_heads_features_and_report_a_click():
    features = [396, 336, 12]
    weight, summed, share = np.array([3.1, 2.0, 0.4]), np.array([6.2, 2.5, 4.0]), \
        np.array([0.5, 0.8, 0.1])
    fig = plots.head_features_bars(features, weight, summed, share, "L1.H0", "top", picked=336)
    bars = fig.data[0]
    np.testing.assert_allclose(bars.x, weight)
    assert list(bars.y) == ["f396", "f336", "f12"] and list(bars.customdata) == features
    assert list(bars.marker.line.width) == [0, 3, 0]
    assert "summed activation 2.500 × share on L1.H0 0.800" in bars.hovertext[1]
    assert plots.index_of_point({"customdata": 336}) == 336
    with pytest.raises(InputError):
        plots.head_features_bars([1, 2], weight, summed, share, "L1.H0", "top")


@pytest.mark.parametrize("screen", list(SCREENS))
def test_every_figure_fits_each_screen(screen):
    """Titles wrapped inside the figure's width, a projector's text at 14 px at least, a
    phone's figures within its width."""
    generator = np.random.default_rng(1)
    at = SCREENS[screen]
    figures = [
        plots.feature_strip(TOKENS, generator.random(len(TOKENS)),
                            "Where f396 fires on this text: each token by its activation",
                            "white = 0, the darkest its largest here; click a token",
                            per_row=6 if at.width < NARROW_PX else 12, marked=3),
        plots.feature_sources_map(generator.normal(size=(4, 14)),
                                  [f"L1.H{h}" for h in range(4)], TOKENS,
                                  "f396 at query 13 't': its pre-activation by head and source "
                                  "token"),
        plots.head_features_bars(list(range(8)), np.sort(generator.random(8))[::-1],
                                 generator.random(8), generator.random(8), "L1.H0",
                                 "L1.H0's strongest features on this text"),
        plots.signed_bars(["␣the", "aution", "ridges", "␣of"], np.array([1.2, 0.8, -0.4, -1.1]),
                          "The next tokens f396 raises and lowers", "its decoder row")]
    for fig in figures:
        fit_figure(fig, at)
        width = fig.layout.width or at.width
        assert width <= at.width
        title, _, note = fig.layout.title.text.partition("<sup>")
        size = fig.layout.title.font.size or 16
        for lines, scale in ((title, 1.0), (note.replace("</sup>", ""), 0.75)):
            for line in lines.split("<br>"):
                assert len(line) * 0.6 * scale * size <= width - 20, (screen, line)
        if at.present:
            assert fig.layout.font.size >= 14
