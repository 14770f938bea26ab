"""The bundled causal model, SmolLM2-135M, on every page in headless chromium, at desktop,
projector (1280x720) and phone (400 px) sizes. Screenshots land in artifacts/screenshots/."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from tests.support.browser import (READY, SIZES, assert_no_exception,  # noqa: E402
                                   assert_only_own_host, click_cell, error_texts, open_page,
                                   settle, shoot, wait_fitted)
from tests.support.layout_probe import layout_problems  # noqa: E402

pytestmark = pytest.mark.browser

QUERY = "?model=smollm2&text=The%20cat%20sat%20on%20the%20mat%20because%20it%20was%20warm."
PAGES = [("", 0), ("Attention_Maps", 5), ("Entropy", 5), ("Head_Similarity", 3),
         ("Pruning_Impact", 1), ("Inside_One_Head", 9), ("Predictions", 3), ("Head_Roles", 1)]


PAGE_LINKS = '[data-testid="stMain"] [data-testid="stPageLink"]'
# a finished run (READY, no chart asked) that drew at least n page links
LINKS_DRAWN = f"""([selector, n]) => ({READY})(0) &&
    document.querySelectorAll(selector).length >= n"""


def wait_for_links(tab, server, n: int) -> None:
    """Home's n page links drawn by a finished run. A run that the browser's first report
    (its viewport) starts can begin after settle() on a loaded machine: a CI run once counted
    no link at all there, twice, though the page's last section was drawn."""
    try:
        tab.wait_for_function(LINKS_DRAWN, arg=[PAGE_LINKS, n], polling=200, timeout=90_000)
    except Exception as error:  # noqa: BLE001 - Playwright's timeout: say what the page held
        state = tab.evaluate("""(selector) => [location.pathname + location.search,
            document.querySelector('[data-testid="stApp"]')?.getAttribute(
                'data-test-script-state'), document.querySelectorAll(selector).length,
            document.querySelector('[data-testid="stMain"]')?.innerText.slice(0, 600)]""",
                             PAGE_LINKS)
        raise AssertionError(f"{n} page links never drawn: {state}\n{server.log_tail()}") \
            from error


@pytest.mark.slow
@pytest.mark.parametrize("size", list(SIZES))
def test_smollm2_every_page(sized_tab, app_server, screenshots, size):
    width, height = SIZES[size]
    tab = sized_tab(width, height)
    for path, n_charts in PAGES:
        open_page(tab, app_server, path, n_charts, QUERY)
        assert_no_exception(tab, app_server)
        assert not error_texts(tab)
        body = tab.locator('[data-testid="stMain"]').inner_text()
        if path == "":
            assert "share keys and values" in body and "SmolLM2" in body
            # the page links read in order, top to bottom, also when the columns stack
            wait_for_links(tab, app_server, 13)
            links = tab.locator(PAGE_LINKS)
            boxes = [(b["y"], b["x"], t) for b, t in zip(
                (links.nth(i).bounding_box() for i in range(links.count())),
                links.all_inner_texts())]
            titles = [t for _, _, t in sorted(boxes)]
            # the lesson first, on the first screen (issue 57 item 7: it was at 2,900 px
            # of 3,972, under the page list)
            lesson = titles.pop(0)
            assert lesson.endswith("A lesson: inside one head, one step per screen"), titles
            assert min(boxes)[0] < tab.viewport_size["height"], boxes
            assert titles[:12] == [
                "Attention maps", "Entropy", "Head similarity", "Pruning impact",
                "Inside one head", "Predictions", "Head roles", "Corpus", "Circuits",
                "Training", "Long range", "Features"], boxes
        if path == "Inside_One_Head":
            assert "Rotary positions (RoPE)" in body
        if size == "phone":  # figures stack, keep >= 250 px, and no text overprints
            wait_fitted(tab)
            assert not layout_problems(tab), (path, layout_problems(tab))
        # on a phone the sidebar starts closed: open, it covers the whole page
        collapsed = tab.locator('[data-testid="stSidebar"]').get_attribute("data-collapsed")
        assert collapsed == ("true" if size == "phone" else "false"), (path, collapsed)
        shoot(tab, screenshots, f"smollm2_{size}_{path or 'home'}")
    assert_only_own_host(tab, app_server)


@pytest.mark.slow
def test_presentation_mode_on_a_projector(sized_tab, app_server, screenshots):
    """?present=1 at 1280x720: large type, the sidebar closed, each grid within one screen,
    no text over other text, on every page."""
    tab = sized_tab(*SIZES["projector"])
    for path, n_charts in PAGES:
        open_page(tab, app_server, path, n_charts, QUERY + "&present=1")
        wait_fitted(tab)
        assert_no_exception(tab, app_server)
        assert tab.evaluate("getComputedStyle(document.documentElement).fontSize") == "24px"
        assert tab.locator('[data-testid="stSidebar"]').get_attribute(
            "data-collapsed") == "true"
        title = tab.locator('[data-testid="stMain"] h1').first.bounding_box()
        header = tab.locator('[data-testid="stHeader"]').bounding_box()
        assert title["y"] >= header["y"] + header["height"], (path, title, header)
        assert not layout_problems(tab), (path, layout_problems(tab))
        heights = tab.evaluate("""() => Array.from(document.querySelectorAll(
            '.js-plotly-plot')).map(gd => gd.getBoundingClientRect().height)""")
        assert all(h <= 720 for h in heights), (path, heights)
        shoot(tab, screenshots, f"smollm2_present_{path or 'home'}")


IOI_QUERY = ("?model=smollm2&text=When%20Mary%20and%20John%20went%20to%20the%20store%2C%20John"
             "%20gave%20a%20drink%20to&measure=target&target=%20Mary&contrast=%20John")


@pytest.mark.slow
@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_pruning_measures_one_prediction(sized_tab, app_server, screenshots, size):
    """Pruning impact on the indirect-object sentence, measured by logit(' Mary') −
    logit(' John'): the sweep's top heads are the ones whose removal lowers it."""
    tab = sized_tab(*SIZES[size])
    open_page(tab, app_server, "Pruning_Impact", 2, IOI_QUERY)
    assert_no_exception(tab, app_server)
    assert not error_texts(tab)
    body = tab.locator('[data-testid="stMain"]').inner_text()
    assert "logit('␣Mary') − logit('␣John') at position 13" in body
    assert "Heads that matter most (largest drop)" in body
    shoot(tab, screenshots, f"smollm2_{size}_pruning_target_metric")
    tab.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
    shoot(tab, screenshots, f"smollm2_{size}_pruning_target_metric_sweep")


@pytest.mark.slow
def test_click_a_token_to_explain_its_prediction(sized_tab, app_server, screenshots):
    """Click ' John' (the second one) in the loss strip: the attribution moves to the
    prediction of that token, made at the token before it."""
    tab = sized_tab(*SIZES["desktop"])
    text = "When Mary and John went to the store, John gave a drink to"
    open_page(tab, app_server, "Predictions", 2, f"?model=smollm2&text={quote(text)}")
    x, y = tab.evaluate("""() => {
        const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
            .find(p => p._fullData.some(t => t.name === 'tokens'));
        const cells = gd._fullData.find(t => t.name === 'tokens');
        const n = Array.from(cells.hovertext).findLastIndex(h => h.includes("'␣John'"));
        const fl = gd._fullLayout, box = gd.getBoundingClientRect();
        return [box.left + fl.xaxis._offset + fl.xaxis.l2p(cells.x[n]),
                box.top + fl.yaxis._offset + fl.yaxis.l2p(cells.y[n])];
    }""")
    click_cell(tab, (x, y), "position=8")  # a click lost to a redraw: clicked again
    settle(tab, 2)
    assert_no_exception(tab, app_server)
    body = tab.locator('[data-testid="stMain"]').inner_text()
    assert "After ',' (position 8) the model expected" in body
    assert "the text goes on with '␣John'" in body
    tab.get_by_text("Which heads write one prediction").scroll_into_view_if_needed()
    shoot(tab, screenshots, "smollm2_desktop_predictions_clicked_token")


# Every change of the app's script state, as the page goes through it.
# every value the app's script state takes, in order: a MutationObserver records each change
# of the attribute (a timer's polling missed a quick run on a busy machine); a value set is
# the next record's old value, or the attribute's value now for the last record
RUN_LOG = """(() => { window.__runs = [];
    new MutationObserver(records => records.forEach((r, i) => window.__runs.push(
        i + 1 < records.length ? records[i + 1].oldValue
                               : r.target.getAttribute(r.attributeName))))
        .observe(document, {subtree: true, attributes: true, attributeOldValue: true,
                            attributeFilter: ['data-test-script-state']}); })()"""


def test_a_new_tab_lays_figures_out_on_its_first_run(browser, app_server):
    """The window size the last tab reported (a cookie) lays out a new tab's figures on its
    first run: one script run, not a second one once the page has measured itself. A
    cookie that is not three small numbers is ignored."""
    context = browser.new_context(viewport={"width": 1000, "height": 800})
    try:
        first = context.new_page()
        first.set_default_timeout(120_000)
        open_page(first, app_server, "Entropy", 5)
        wait_fitted(first)
        first.close()
        second = context.new_page()
        second.set_default_timeout(120_000)
        second.add_init_script(RUN_LOG)
        open_page(second, app_server, "Entropy", 5)
        wait_fitted(second)
        second.wait_for_timeout(1500)  # a second run, if one were coming, would start by now
        assert second.evaluate("window.__runs").count("running") == 1
        widths = second.evaluate("""() => Array.from(document.querySelectorAll(
            '.js-plotly-plot')).map(g => g.layout.meta.fitted)""")
        assert set(widths) == {widths[0]} and 400 <= widths[0] <= 1000, widths
        for value in ("99999x1x1", "<b>x</b>", "1000x800", "-5x-5x-5"):
            context.add_cookies([{"name": "mha_viz_viewport", "value": value,
                                  "url": app_server.url}])
            tab = context.new_page()
            tab.set_default_timeout(120_000)
            open_page(tab, app_server, "Entropy", 5)
            wait_fitted(tab)  # measured again by the page itself
            assert_no_exception(tab, app_server)
            tab.close()
    finally:
        context.close()
