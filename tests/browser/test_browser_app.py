"""The app in headless chromium: every page draws its Plotly charts without an exception,
bad input shows a message, a grid click picks a head, choices survive page switches and the
URL, downloads work, and the browser talks to no host but the app's own server.

Screenshots land in artifacts/screenshots/ (look at them).
"""

from __future__ import annotations

import io
import re
from urllib.parse import quote, urlparse

import pytest
from tests.support.browser import (HOME_TOKENS, assert_no_exception, assert_only_own_host,
                                   error_texts, open_page, settle, shoot)

pytestmark = pytest.mark.browser

PAGES = [("", 0), ("Attention_Maps", 5), ("Entropy", 5)]


ENTROPY_OF_L1_H2 = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(
    p => p.layout && p.layout.title && String(p.layout.title.text).startsWith('L1.H2: entropy'))"""


def open_section(page, label: str) -> None:
    """Open a page's folded section (ui.drawn_when_opened) as a reader does, by a click on its
    label, unless it is open already."""
    section = page.locator('[data-testid="stExpander"] details').filter(has_text=label).first
    if section.get_attribute("open") is None:
        section.locator("summary").click()


@pytest.mark.parametrize("model", ["minilm", "gpt2"])
def test_every_page_renders(page, app_server, screenshots, model, gpt2_folder):
    query = "" if model == "minilm" else f"?model=folder&folder={quote(str(gpt2_folder))}"
    for path, n_charts in PAGES:
        open_page(page, app_server, path, n_charts, query)
        assert_no_exception(page, app_server)
        assert not error_texts(page)
        if n_charts == 0:
            assert page.locator(HOME_TOKENS).count() == 1  # the tokens
        else:
            assert page.locator(".js-plotly-plot").count() == n_charts
            # every figure shows this run's input
            ids = page.evaluate("Array.from(document.querySelectorAll('.js-plotly-plot'))"
                                ".map(p => p.layout.meta && p.layout.meta.input)")
            assert len(set(ids)) == 1 and ids[0]
        shoot(page, screenshots, f"{model}_{path or 'Home'}")
    assert_only_own_host(page, app_server)


def test_sentence_pair_and_hidden_special_tokens(page, app_server, screenshots):
    query = ("?text=" + quote("Where did the cat sleep last night?") + "&pair="
             + quote("The cat slept on the warm mat by the kitchen door.") + "&hide=special")
    open_page(page, app_server, "Attention_Maps", 4, query)
    assert_no_exception(page, app_server)
    assert "renormalized" in page.locator('[data-testid="stAlert"]').first.inner_text()
    shoot(page, screenshots, "minilm_pair_Attention_Maps")
    open_page(page, app_server, "Entropy", 5, query)
    assert_no_exception(page, app_server)
    shoot(page, screenshots, "minilm_pair_Entropy")
    assert_only_own_host(page, app_server)


def test_long_input_is_thinned(page, app_server, screenshots):
    text = " ".join(["The animal didn't cross the street because it was too tired."] * 45)
    open_page(page, app_server, "Attention_Maps", 4, "?text=" + quote(text))
    assert_no_exception(page, app_server)
    main = page.locator('[data-testid="stMain"]').inner_text()
    assert "Long input (512 tokens)" in main and "block-averaged" in main
    assert "only the first 512 are traced" in main
    shoot(page, screenshots, "minilm_long_Attention_Maps")


@pytest.mark.parametrize("case,query,message", [
    ("empty_text", "?text=", "The text is empty"),
    ("not_a_checkpoint", "?model=folder&folder=/usr/share", "not a checkpoint this server offers"),
])
def test_bad_input_shows_a_message(page, app_server, screenshots, case, query, message):
    for path, _ in PAGES:
        page.goto(f"{app_server.url}/{path}{query}")
        page.wait_for_selector('[data-testid="stAlertContentError"]')
        settle(page, 0)
        assert_no_exception(page, app_server)
        errors = error_texts(page)
        assert errors and message in errors[0], errors
        shoot(page, screenshots, f"bad_{case}_{path or 'Home'}")


def test_grid_click_picks_a_head_and_the_choice_follows_to_other_pages(
        page, app_server, screenshots):
    open_page(page, app_server, "Attention_Maps", 4)
    box = page.get_by_label("Text", exact=True)
    box.fill("Students read about attention heads in a quiet classroom.")
    box.press("Control+Enter")
    page.wait_for_function("() => location.search.includes('text=')")
    settle(page, 4)
    # click the centre of thumbnail L1.H2 in the grid (trace 1 holds one point per head)
    x, y = page.evaluate("""() => {
        const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
            .find(p => p._fullData.some(t => t.name === 'thumbnails'));
        const heads = gd._fullData.find(t => t.name === 'heads');
        const n = Array.from(heads.hovertext).indexOf('L1.H2');
        const fl = gd._fullLayout, box = gd.getBoundingClientRect();
        return [box.left + fl.xaxis._offset + fl.xaxis.l2p(heads.x[n]),
                box.top + fl.yaxis._offset + fl.yaxis.l2p(heads.y[n])];
    }""")
    page.mouse.click(x, y)
    page.get_by_text("One head: L1.H2").wait_for()
    settle(page, 4)
    assert "layer=1" in page.url and "head=2" in page.url
    shoot(page, screenshots, "grid_click_L1.H2")

    page.locator('[data-testid="stSidebar"]').get_by_text("Entropy", exact=True).click()
    page.wait_for_function("() => location.pathname.endsWith('/Entropy')")
    settle(page, 1)
    open_section(page, "Entropy of each query token in one head")
    page.wait_for_function(ENTROPY_OF_L1_H2, polling=200)  # the per-query chart of L1.H2
    settle(page, 2)
    assert_no_exception(page, app_server)
    assert page.get_by_label("Text", exact=True).input_value().startswith("Students read")
    assert "layer=1" in page.url and "head=2" in page.url and "text=" in page.url
    shoot(page, screenshots, "entropy_after_page_switch")

    # the copied link reproduces the view in a new session
    link = page.url
    other = page.context.new_page()
    other.goto(link + "&open=query_entropy")  # a link opens the section it names
    other.wait_for_function(ENTROPY_OF_L1_H2, polling=200)
    settle(other, 2)
    assert other.get_by_label("Text", exact=True).input_value().startswith("Students read")
    other.close()
    assert_only_own_host(page, app_server)


def test_downloads(page, app_server):
    from mha_viz import AttentionTrace

    open_page(page, app_server, "Attention_Maps", 4, "?layer=2&head=5")
    with page.expect_download() as info:
        page.get_by_role("button", name=re.compile("L2.H5 as CSV")).click()
    csv = info.value.path().read_text(encoding="utf-8").splitlines()
    assert csv[0].startswith("query \\ key,0 [CLS],1 the,2 animal")
    assert len(csv) == 17 and csv[1].startswith("0 [CLS],")
    row = [float(v) for v in csv[3].split(",")[1:]]
    assert abs(sum(row) - 1) < 1e-4
    with page.expect_download() as info:
        page.get_by_role("button", name=re.compile("Trace")).click()
    trace = AttentionTrace.load(io.BytesIO(info.value.path().read_bytes()))
    assert trace.attentions.shape == (6, 12, 16, 16) and trace.model_name == "minilm"
    # the camera button is Plotly's own, configured to save PNG (the sidebar switches to SVG)
    config = page.evaluate("document.querySelector('.js-plotly-plot')._context"
                           ".toImageButtonOptions")
    assert config["format"] == "png"


# Playwright's "Pixel 5": Streamlit closes the sidebar after navigation on a touch device
# with a phone's user agent, not on a narrow desktop window.
PHONE = dict(viewport={"width": 393, "height": 727}, device_scale_factor=2.75, is_mobile=True,
             has_touch=True, user_agent="Mozilla/5.0 (Linux; Android 11; Pixel 5) "
             "AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Mobile Safari/537.36")


def test_sidebar_lists_every_page_and_closes_after_a_tap_on_a_phone(browser, app_server,
                                                                     screenshots):
    """Streamlit's navigation (st.navigation) names the pages in order, "Home" first; on a
    phone the sidebar starts closed, and after a page is tapped in it, it closes again and
    the text chosen before the switch is still the text."""
    context = browser.new_context(**PHONE)
    try:
        tab = context.new_page()
        tab.set_default_timeout(120_000)
        open_page(tab, app_server, "", 0, "?text=" + quote("A cat sat on a mat."))
        sidebar = tab.locator('[data-testid="stSidebar"]')
        assert sidebar.get_attribute("data-collapsed") == "true"
        tab.locator('[data-testid="stExpandSidebarButton"]').tap()
        links = tab.locator('[data-testid="stSidebarNavLink"]')
        links.first.wait_for()
        assert links.all_inner_texts() == [
            "Home", "Attention maps", "Entropy", "Head similarity", "Pruning impact",
            "Inside one head", "Predictions", "Head roles", "Corpus", "Circuits", "Training",
            "Long range", "Features"]
        shoot(tab, screenshots, "phone_sidebar_open")
        links.nth(2).tap()
        settle(tab, 1)  # Entropy's first figure; the rest is folded
        assert urlparse(tab.url).path == "/Entropy"
        tab.wait_for_function(
            """() => document.querySelector('[data-testid="stSidebar"]')
                     .getAttribute('data-collapsed') === 'true'""")
        assert "A cat sat on a mat." in tab.locator('[data-testid="stSidebar"] textarea'
                                                     ).first.input_value()
        assert_no_exception(tab, app_server)
        shoot(tab, screenshots, "phone_after_tap")
    finally:
        context.close()


def test_a_first_visit_by_a_direct_link_runs_through_the_app_navigation(browser, tmp_path):
    """A server whose first visitor opens /Entropy directly: Streamlit's old pages/-folder
    mode would run the page alone and list the pages by file name ("app"); the page is run
    through app.py's navigation instead."""
    from tests.support.browser import start_server

    servers = start_server(tmp_path / "server.log")
    server = next(servers)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        tab = context.new_page()
        tab.set_default_timeout(120_000)
        open_page(tab, server, "Entropy", 5, "?model=minilm")
        links = tab.locator('[data-testid="stSidebarNavLink"]').all_inner_texts()
        assert links[:3] == ["Home", "Attention maps", "Entropy"], links
        assert_no_exception(tab, server)
    finally:
        context.close()
        servers.close()
