"""A long input in headless chromium (issue 12): SmolLM2 on about 2,000 tokens of real text,
past what its maps whole would take of the default memory budget, so its maps are computed on
demand. Attention maps shows the overview and a window that moves along the text; Entropy
shows every head's entropy; at desktop, projector and phone sizes. Screenshots land in
artifacts/screenshots/ (look at them)."""

from __future__ import annotations

import os
from urllib.parse import quote_plus

import pytest

from tests.support.browser import (assert_no_exception, assert_only_own_host, error_texts,
                                   open_page, require_browser, start_server, wait_fitted)
from tests.support.layout_probe import layout_problems

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SIZES = {"desktop": (1400, 1000), "projector": (1280, 720), "phone": (400, 860)}
# The y labels of a figure: the window's first row names its position.
FIRST_ROW = """(i) => {
    const gd = document.querySelectorAll('.js-plotly-plot')[i];
    return gd && gd.data && gd.data[0] && gd.data[0].y ? String(gd.data[0].y[0]) : '';
}"""


def shoot_figures(tab, screenshots, name: str) -> None:
    """The page's top, then each figure scrolled into view (the app scrolls inside its main
    area, so a full-page screenshot shows only the first screen)."""
    tab.screenshot(path=str(screenshots / f"{name}.png"))
    figures = tab.locator(".js-plotly-plot")
    for i in range(figures.count()):
        figures.nth(i).scroll_into_view_if_needed()
        tab.wait_for_timeout(300)
        tab.screenshot(path=str(screenshots / f"{name}_figure{i}.png"))


@pytest.fixture(scope="module")
def long_server(tmp_path_factory):
    """The default budget (2,560 MB: one input may take 640 MB; SmolLM2's whole maps fit up
    to 788 tokens), SmolLM2 the model."""
    require_browser()
    yield from start_server(tmp_path_factory.mktemp("long") / "server.log",
                            MHA_VIZ_MEMORY_MB="2560", MHA_VIZ_DEFAULT_MODEL="smollm2")


# MHA_VIZ_LONG_TOKENS=8192 runs the same tests at SmolLM2's whole context (minutes: not in CI)
LONG_TOKENS = int(os.environ.get("MHA_VIZ_LONG_TOKENS", "2048"))


@pytest.fixture(scope="module")
def long_query():
    from mha_viz import corpus, load_model

    paragraphs, text = corpus.demo_texts(), ""
    model = load_model("smollm2")
    for paragraph in paragraphs:  # real prose, just over LONG_TOKENS - 48 tokens
        text += paragraph + "\n\n"
        if len(model.encode(text).input_ids) > LONG_TOKENS - 48:
            break
    return f"?model=smollm2&max_tokens={LONG_TOKENS}&text=" + quote_plus(text)


def test_attention_maps_of_a_long_input(sized_tab, long_server, long_query, screenshots):
    for size, (width, height) in SIZES.items():
        tab = sized_tab(width, height)
        open_page(tab, long_server, "Attention_Maps", 4, long_query + "&layer=3&head=2")
        assert_no_exception(tab, long_server)
        assert not error_texts(tab)
        body = tab.locator('[data-testid="stMain"]').inner_text()
        assert "the maps are computed when you look at them" in body
        wait_fitted(tab)
        titles = tab.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
            .map(gd => String(gd.layout.title.text))""")
        assert titles[0].startswith("L3.H2: overview") and "downsampled" in titles[0]
        assert titles[1].startswith("L3.H2: who attends to whom")
        if size == "phone":
            assert not layout_problems(tab), layout_problems(tab)
        shoot_figures(tab, screenshots, f"long_input_{LONG_TOKENS}_maps_{size}")
    # the window moves: by the URL, and by the slider's keys
    tab = sized_tab(*SIZES["desktop"])
    open_page(tab, long_server, "Attention_Maps", 4, long_query + "&window=1000")
    assert tab.evaluate(FIRST_ROW, 1).startswith("1000 ")
    slider = tab.locator('[data-testid="stSlider"] input[type="range"]').first
    slider.focus()
    slider.press("Home")
    tab.wait_for_function(f"() => ({FIRST_ROW})(1).startsWith('0 ')", polling=200)
    assert_no_exception(tab, long_server)
    # the mean of layer 3's heads, asked for by the URL
    open_page(tab, long_server, "Attention_Maps", 4, long_query + "&layer=3&lmean=1")
    assert_no_exception(tab, long_server)
    wait_fitted(tab)
    titles = tab.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .map(gd => String(gd.layout.title.text))""")
    assert titles[0].startswith("L3 head mean: overview"), titles
    assert titles[1].startswith("L3 head mean: who attends to whom"), titles
    shoot_figures(tab, screenshots, f"long_input_{LONG_TOKENS}_maps_head_mean")
    assert_only_own_host(tab, long_server)


def test_entropy_of_a_long_input(sized_tab, long_server, long_query, screenshots):
    tab = sized_tab(*SIZES["desktop"])
    # every head's entropy, then its token-class mass, streamed over the whole text: at
    # 8,192 tokens minutes of work (the page shows their progress meanwhile)
    tab.set_default_timeout(180_000 * max(1, LONG_TOKENS // 1024))
    open_page(tab, long_server, "Entropy", 5, long_query)
    assert_no_exception(tab, long_server)
    assert not error_texts(tab)
    wait_fitted(tab)
    shoot_figures(tab, screenshots, f"long_input_{LONG_TOKENS}_entropy")
