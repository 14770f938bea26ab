"""The Corpus page in the browser: 200 segments of the demo corpus run to the end with their
progress shown (segments, tokens per second, time left); a widget change and a page switch
during the run do not lose it; the results fit a phone."""

from __future__ import annotations

import re

import pytest

from tests.support.browser import assert_no_exception, settle, shoot, wait_fitted
from tests.support.layout_probe import layout_problems

pytestmark = pytest.mark.browser

PROGRESS = re.compile(r"Measuring 200 segments: (\d+) of 200 segments .*tokens/s")


def progress_done(page) -> int:
    bar = page.locator('[data-testid="stProgress"]').filter(has_text=PROGRESS)
    bar.first.wait_for(state="visible", timeout=120_000)
    return int(PROGRESS.search(bar.first.inner_text()).group(1))


def test_two_hundred_segments_survive_a_widget_change_and_a_page_switch(
        sized_tab, app_server, screenshots):
    tab = sized_tab(1400, 1400)
    tab.goto(f"{app_server.url}/Corpus?model=minilm&seglen=64&maxseg=200")
    button = tab.get_by_role("button", name="Run over 200 segments")
    button.wait_for()
    assert "200 segments" in tab.locator('[data-testid="stMain"]').inner_text()
    button.click()
    first = progress_done(tab)
    shoot(tab, screenshots, "corpus_progress")
    # a widget change reruns the page: the run goes on and its progress shows again
    sidebar = tab.locator('[data-testid="stSidebar"]')
    sidebar.get_by_text("Options", exact=True).click()
    svg = sidebar.get_by_text("SVG", exact=True)
    for _ in range(5):  # a click while the page redraws the sidebar can miss
        svg.click()
        try:
            tab.wait_for_function("() => location.search.includes('img=svg')", timeout=5_000)
            break
        except Exception:  # noqa: BLE001 - Playwright's TimeoutError: click again
            continue
    # still running (its progress goes on), or already finished: never back to the button.
    # One reading of the page: the run can finish between two (its bar then goes).
    seen = tab.wait_for_function("""(pattern) => {
        const found = Array.from(document.querySelectorAll('[data-testid="stProgress"]'))
            .map(bar => bar.innerText.match(new RegExp(pattern))).find(m => m);
        if (found) return {done: Number(found[1])};
        return document.querySelector('[data-testid="stMetricValue"]') ? {finished: true}
                                                                        : null;
    }""", arg=PROGRESS.pattern).json_value()
    assert seen.get("finished") or seen["done"] >= first, (seen, first)
    assert tab.get_by_role("button", name="Run over 200 segments").count() == 0
    # a page switch and back: the same run, or its result
    sidebar.get_by_text("Entropy", exact=True).click()
    tab.wait_for_function("() => location.pathname.endsWith('/Entropy')")
    settle(tab, 1)  # its first figure; the rest is folded
    sidebar.get_by_text("Corpus", exact=True).click()
    tab.wait_for_function("() => location.pathname.endsWith('/Corpus')")
    settle(tab, 8)
    assert_no_exception(tab, app_server)
    shoot(tab, screenshots, "corpus_results")
    body = tab.locator('[data-testid="stMain"]').inner_text()
    assert "Run over 200 segments" not in body
    assert tab.locator('[data-testid="stMetricValue"]').first.inner_text() == "200"
    shoot(tab, screenshots, "corpus_results")


def test_corpus_results_fit_a_phone(sized_tab, app_server, screenshots):
    tab = sized_tab(400, 860)
    tab.goto(f"{app_server.url}/Corpus?model=minilm&seglen=16&maxseg=12")
    tab.get_by_role("button", name="Run over 12 segments").click()
    settle(tab, 8)
    wait_fitted(tab)
    assert_no_exception(tab, app_server)
    assert not layout_problems(tab)
    shoot(tab, screenshots, "corpus_phone")
