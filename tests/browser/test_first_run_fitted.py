"""A new visitor's page runs once, already laid out for the screen (issue 59, a visitor's CPU):
the page's HTML writes the viewport cookie from the window before Streamlit starts
(mha_viz/server/static_assets.py), and the reporter's own measure then agrees with it, so
the page is not run a second time for the figures' layout. Runs are counted on the server,
by the app's per-run profiles (MHA_VIZ_PROFILE)."""

from __future__ import annotations

import pytest
from tests.support.browser import DEVICES, require_browser, start_server, wait_fitted

pytestmark = pytest.mark.browser

SCREENS = {"desk": DEVICES["desk"], "phone": DEVICES["phone"],
           "projector": {"viewport": {"width": 1280, "height": 720}}}
COOKIE = "mha_viz_viewport"
FITTED_WIDTHS = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
    .map(gd => gd.layout.meta.fitted)"""


@pytest.fixture(scope="module")
def counted_server(tmp_path_factory):
    """A server of its own that writes a profile file for each page run."""
    require_browser()
    runs = tmp_path_factory.mktemp("runs")
    for server in start_server(tmp_path_factory.mktemp("fitted") / "server.log",
                               MHA_VIZ_PROFILE=str(runs), MHA_VIZ_WARM_START="0"):
        server.runs = runs
        yield server


@pytest.mark.parametrize("screen,query", [("desk", ""), ("phone", ""),
                                          ("projector", "&present=1"), ("phone", "&present=1")])
def test_a_new_visitor_s_page_runs_once_fitted_to_the_screen(browser, counted_server, screen,
                                                             query):
    before = set(counted_server.runs.iterdir())
    context = browser.new_context(**SCREENS[screen])  # a browser never used: no cookie
    try:
        tab = context.new_page()
        tab.set_default_timeout(180_000)
        tab.goto(f"{counted_server.url}/Entropy?model=minilm{query}")
        wait_fitted(tab)
        tab.wait_for_timeout(1500)  # a rerun the reporter asked for would have started
        wait_fitted(tab)
        cookies = [c["value"] for c in context.cookies() if c["name"] == COOKIE]
        widths = tab.evaluate(FITTED_WIDTHS)
    finally:
        context.close()
    runs = set(counted_server.runs.iterdir()) - before
    assert len(runs) == 1, f"{len(runs)} runs of the page\n{counted_server.log_tail()}"
    width, height, window = (int(v) for v in cookies[0].split("x"))
    assert widths and all(w == width for w in widths), (widths, cookies)
    assert window == SCREENS[screen]["viewport"]["width"] // 20 * 20
    # the window's height counts in presentation mode only, which a phone ignores
    presenting = query and screen != "phone"
    assert height == (SCREENS[screen]["viewport"]["height"] // 20 * 20 if presenting else 0)
