"""The Circuits page in headless chromium on the bundled SmolLM2: the indirect-object pair's
head map read against the library, a click on a head that opens path patching into it, the
circuit graph and a click on its node that opens that head's attention map, bad input, and
the page at desktop, projector (1280x720) and phone (400 px) sizes."""

from __future__ import annotations

from urllib.parse import quote

import numpy as np
import pytest
from tests.support.browser import (SIZES, assert_no_exception, assert_only_own_host,  # noqa: E402
                                   error_texts, open_page, settle, shoot, wait_fitted)
from tests.support.circuits_browser import (NODE_CENTRE, click_point,  # noqa: E402
                                            run_path_patching)
from tests.support.layout_probe import layout_problems  # noqa: E402

pytestmark = pytest.mark.browser

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
QUERY = "?model=smollm2"

GRAPH_FITTED = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(
    gd => gd._fullData && gd._fullData.some(t => t.name === 'nodes')
        && gd.layout.meta && gd.layout.meta.fitted)"""
CELL_CENTRE = """([layer, head]) => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(p => p._fullData.some(t => t.name === 'heads'));
    const cells = gd._fullData.find(t => t.name === 'heads');
    const i = Array.from(cells.customdata).findIndex(c => c[0] === layer && c[1] === head);
    const fl = gd._fullLayout, box = gd.getBoundingClientRect();
    return [box.left + fl.xaxis._offset + fl.xaxis.l2p(cells.x[i]),
            box.top + fl.yaxis._offset + fl.yaxis.l2p(cells.y[i])];
}"""
def open_without_charts(page, server, query: str) -> None:
    """Open the page where a message, not a chart, ends it; wait until the run is over and
    the message is there (a rerun after the URL hand-over may redraw the page once)."""
    page.goto(f"{server.url}/Circuits{query}")
    for _ in range(2):
        page.wait_for_selector('[data-testid="stAlert"]')
        settle(page, 0)


def shown_head_map(tab) -> np.ndarray:
    z = tab.evaluate("""() => {
        const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
            .find(p => p._fullData.some(t => t.name === 'heads'));
        return Array.from(gd._fullData[0].z, row => Array.from(row));
    }""")
    return np.array(z, dtype=float).T  # drawn with the layers along x


@pytest.mark.slow
def test_head_patching_in_the_browser_matches_the_library(sized_tab, app_server, screenshots):
    from mha_viz import load_model
    from mha_viz.analysis import activation_patching
    from mha_viz.analysis.prompts import PromptPair

    tab = sized_tab(*SIZES["desktop"])
    open_page(tab, app_server, "Circuits", 1, QUERY)
    assert_no_exception(tab, app_server)
    assert not error_texts(tab)
    body = tab.locator('[data-testid="stMain"]').inner_text()
    assert "Clean: 14 tokens" in body and "Corrupted: 14 tokens" in body
    expected = activation_patching(load_model("smollm2"),
                                   [PromptPair(CLEAN, CORRUPTED, " Mary", " John")], None,
                                   "logit_diff", "head", "denoise")
    np.testing.assert_allclose(shown_head_map(tab), expected.normalized, atol=1e-6)
    table = tab.locator('[data-testid="stTable"]').first.inner_text()
    assert "L23.H3" in table and f"{expected.normalized[23, 3]:+.3f}" in table
    shoot(tab, screenshots, "circuits_desktop_heads")

    # a click on L20.H0 makes it path patching's receiver
    click_point(tab, CELL_CENTRE, [20, 0])
    tab.wait_for_function("() => location.search.includes('c_recv=L20.H0')")
    settle(tab, 0)
    assert_no_exception(tab, app_server)
    run_path_patching(tab, "L20.H0", "q", timeout=180_000)
    assert_no_exception(tab, app_server)
    shoot(tab, screenshots, "circuits_desktop_paths")
    assert_only_own_host(tab, app_server)


def test_the_circuit_graph_and_a_node_click(sized_tab, app_server, screenshots):
    tab = sized_tab(*SIZES["desktop"])
    open_page(tab, app_server, "Circuits", 1, QUERY + "&c_view=circuit")
    assert_no_exception(tab, app_server)
    body = tab.locator('[data-testid="stMain"]').inner_text()
    assert "Recovered by the kept edges" in body and "Edges kept" in body
    tab.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
    shoot(tab, screenshots, "circuits_desktop_graph")
    click_point(tab, NODE_CENTRE, "L23.H3")
    tab.wait_for_url("**/Attention_Maps**", timeout=60_000)
    settle(tab, 3)  # the grid, the head and its lines; the rest of the page is folded
    assert_no_exception(tab, app_server)
    assert "layer=23" in tab.url and "head=3" in tab.url
    text = tab.locator('[data-testid="stSidebar"] textarea').first.input_value()
    assert text == CLEAN
    shoot(tab, screenshots, "circuits_desktop_node_opened")


@pytest.mark.parametrize("query, message", [
    (f"&corrupted={quote('When Mary and John went to the big store, Mary gave a drink to')}",
     "the clean prompt is 14 tokens and the corrupted prompt 15"),
    (f"&corrupted={quote(CLEAN)}", "the same tokens"),
    ("&c_target=%20Maryland%20Mary", "target"),
])
def test_bad_pairs_in_the_browser(page, app_server, query, message):
    open_without_charts(page, app_server, QUERY + query)
    assert_no_exception(page, app_server)
    errors = error_texts(page)
    assert len(errors) == 1 and message in errors[0], errors
    clean = page.get_by_label("Clean prompt", exact=True)
    clean.wait_for()  # the inputs are still there
    assert clean.count() == 1
    page_text = page.locator('[data-testid="stMain"]').inner_text()
    assert "Traceback" not in page_text


def test_minilm_has_nothing_to_patch(page, app_server):
    open_without_charts(page, app_server, "?model=minilm")
    assert_no_exception(page, app_server)
    assert "not a causal language model" in page.locator('[data-testid="stMain"]').inner_text()


@pytest.mark.parametrize("size", ["projector", "phone"])
def test_circuits_at_projector_and_phone_sizes(sized_tab, app_server, screenshots, size):
    tab = sized_tab(*SIZES[size])
    present = "&present=1" if size == "projector" else ""
    open_page(tab, app_server, "Circuits", 1, QUERY + present)
    wait_fitted(tab)
    assert_no_exception(tab, app_server)
    if size == "phone":
        assert not layout_problems(tab), layout_problems(tab)
    shoot(tab, screenshots, f"circuits_{size}_top")
    tab.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
    shoot(tab, screenshots, f"circuits_{size}_heads")
    open_page(tab, app_server, "Circuits", 1, QUERY + present + "&c_view=circuit")
    # the graph laid out for this screen (not a count of charts: the head map of the last
    # view may still be leaving the page)
    tab.wait_for_function(GRAPH_FITTED, polling=200)
    settle(tab, 1)
    tab.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
    shoot(tab, screenshots, f"circuits_{size}_graph")
