"""The Features page in headless chromium on the bundled induction toy (issue 55 item 5): a
click on a token of the strip asks the feature there (the URL keeps it), and the head x
source map and its sum follow; one tap does it on a 400 px touch screen; the page's figures
fit a desk, a projector (1280x720, presentation mode) and a phone without text that
overprints; and the why panel's "In features" view opens on a clicked cell of the same head
with its sum. Screenshots land in artifacts/screenshots/."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from tests.support.browser import (DEVICES, SIZES, assert_no_exception, error_texts, settle,
                                   shoot, wait_fitted)
from tests.support.layout_probe import layout_problems
from tests.support.why_browser import WHY_OPEN, cell_point

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat. the cat sat on the mat."
QUERY = "?model=induction-toy&layer=1&head=0&text=" + quote(TEXT)
STRIP = "Where f"  # the strip's title starts so
PER_ROW = {"desk": 12, "phone": 6}
ASKED = 38  # 'n' of the second "on": the induction head reads the first "on"'s next token


def sources_at(query: int) -> str:
    """A figure whose title says the feature is split at `query` is drawn."""
    return f"""() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(
        g => String((g.layout.title || {{}}).text || '').includes(' at query {query} '))"""


NO_SKELETON = """() => !document.querySelector('[data-testid="stSkeleton"]')"""


def shot(tab, screenshots, name: str) -> None:
    """A screenshot once nothing on the page is still a skeleton (a chart whose code, or
    an element a rerun redraws, has not arrived)."""
    tab.wait_for_function(NO_SKELETON, polling=200)
    shoot(tab, screenshots, name)


def main_text(tab) -> str:
    return tab.locator('[data-testid="stMain"]').inner_text()


def token_point(tab, position: int, per_row: int) -> tuple[float, float]:
    """The middle of a token's cell on the strip (row, column of its grid)."""
    return cell_point(tab, STRIP, position // per_row, position % per_row)


def ask_a_token(tab, server, per_row: int, touch: bool) -> None:
    point = token_point(tab, ASKED, per_row)
    tab.touchscreen.tap(*point) if touch else tab.mouse.click(*point)
    tab.wait_for_function(sources_at(ASKED), timeout=120_000)
    wait_fitted(tab)
    assert_no_exception(tab, server)
    assert f"fq={ASKED}" in tab.url
    said = main_text(tab)
    assert f"pre-activation at query {ASKED} 'n'" in said and "in all" in said, said[-600:]


def test_a_click_on_a_token_shows_its_sources_and_the_why_panel_in_features(
        device_tab, app_server, screenshots):
    tab = device_tab(DEVICES["desk"])
    tab.goto(f"{app_server.url}/Features{QUERY}")
    wait_fitted(tab)
    assert_no_exception(tab, app_server)
    assert not error_texts(tab)
    shot(tab, screenshots, "features_toy_desk_opened")
    ask_a_token(tab, app_server, PER_ROW["desk"], touch=False)
    shot(tab, screenshots, "features_toy_desk")
    assert not layout_problems(tab), layout_problems(tab)
    # the same head's why panel: a click on the induction target, then "In features"
    tab.goto(f"{app_server.url}/Attention_Maps{QUERY}")
    wait_fitted(tab)
    tab.mouse.click(*cell_point(tab, "L1.H0: ", 38, 15))
    tab.wait_for_function(WHY_OPEN, timeout=120_000)
    wait_fitted(tab)
    tab.get_by_text("In features", exact=True).click()
    tab.wait_for_function("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .some(g => String((g.layout.title || {}).text || '').includes(', in features'))""",
                          timeout=120_000)
    wait_fitted(tab)
    assert_no_exception(tab, app_server)
    said = main_text(tab)
    assert "The sums, in the features of induction-toy/L1.resid_pre:" in said
    assert "in all, the score" in said and "wfeat=1" in tab.url
    tab.locator(".js-plotly-plot").filter(has_text="in features").first.scroll_into_view_if_needed()
    shot(tab, screenshots, "why_in_features_toy_desk")


def test_one_tap_on_a_phone_asks_a_token(device_tab, app_server, screenshots):
    tab = device_tab(DEVICES["phone"])
    tab.goto(f"{app_server.url}/Features{QUERY}")
    wait_fitted(tab)
    ask_a_token(tab, app_server, PER_ROW["phone"], touch=True)
    tab.evaluate("window.scrollTo(0, 0)")
    shot(tab, screenshots, "features_toy_phone")
    tab.locator(".js-plotly-plot").filter(has_text="pre-activation").first \
        .scroll_into_view_if_needed()
    shot(tab, screenshots, "features_toy_phone_sources")
    assert not layout_problems(tab), layout_problems(tab)


def test_a_projector_shows_the_page_legibly(sized_tab, app_server, screenshots):
    tab = sized_tab(*SIZES["projector"])
    tab.goto(f"{app_server.url}/Features{QUERY}&present=1")
    wait_fitted(tab)
    settle(tab, 3)
    assert_no_exception(tab, app_server)
    shot(tab, screenshots, "features_toy_projector")
    tab.locator(".js-plotly-plot").filter(has_text="pre-activation").first \
        .scroll_into_view_if_needed()
    shot(tab, screenshots, "features_toy_projector_sources")
    assert not layout_problems(tab), layout_problems(tab)
