"""Long computations run as jobs: a widget change or a page switch does not stop them (the
page finds them again and their progress goes on), and only Cancel does."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from tests.support.browser import assert_no_exception, open_page, settle, shoot  # noqa: E402

pytestmark = pytest.mark.browser

STEP = re.compile(r"Pruning curve.*: (\d+) of (\d+)")
CURVE_DRAWN = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(
    p => p.layout.title && p.layout.title.text.includes('as heads are removed'))"""


def steps_done(page) -> int:
    """The curve job's progress as the page shows it, waiting for its first step."""
    bar = page.locator('[data-testid="stProgress"]').filter(has_text=STEP)
    bar.first.wait_for(state="visible", timeout=120_000)
    return int(STEP.search(bar.first.inner_text()).group(1))


def start_curve(page, server, text: str) -> None:
    open_page(page, server, "Pruning_Impact", 1, "?by=ablation&text=" + quote(text))
    page.get_by_role("button", name=re.compile("Run the pruning curve")).click()


def test_a_job_survives_a_widget_change_and_a_page_switch(page, app_server, screenshots):
    text = " ".join(["The curve keeps running while the person looks at other things."] * 6)
    start_curve(page, app_server, text)
    before = steps_done(page)
    # a widget change stops the script run; the job goes on and the rerun shows it again
    page.get_by_text("Normalize within each layer").click()
    page.wait_for_function("() => location.search.includes('gnorm=1')")
    after_toggle = steps_done(page)
    assert after_toggle >= before
    shoot(page, screenshots, "jobs_progress_after_a_widget_change")
    # a page switch and back: still the same job, or its finished curve
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.get_by_text("Entropy", exact=True).click()
    page.wait_for_function("() => location.pathname.endsWith('/Entropy')")
    settle(page, 1)  # its first figure; the rest is folded
    sidebar.get_by_text("Pruning impact", exact=True).click()
    page.wait_for_function("() => location.pathname.endsWith('/Pruning_Impact')")
    page.wait_for_function(CURVE_DRAWN, timeout=300_000, polling=500)
    settle(page, 2)  # the ablation map and the curve
    assert_no_exception(page, app_server)
    assert page.get_by_role("button", name=re.compile("Run the pruning curve")).count() == 0


def test_cancel_stops_the_job_and_it_can_run_again(page, app_server, screenshots):
    text = " ".join(["Cancel is the one thing that stops a running computation."] * 6)
    start_curve(page, app_server, text)
    steps_done(page)
    page.get_by_role("button", name="Cancel", exact=True).click()
    again = page.get_by_role("button", name=re.compile(r"Run the pruning curve.*cancelled"))
    again.wait_for()
    settle(page, 1)
    assert page.locator('[data-testid="stProgress"]').count() == 0
    assert not page.evaluate(CURVE_DRAWN)
    shoot(page, screenshots, "jobs_cancelled")
    # asked again, it runs again: cancelled again while it runs, or (the first run's sweep
    # kept, a quiet machine runs the rest in about a second) its curve drawn
    again.click()
    page.wait_for_function(f"() => ({CURVE_DRAWN})() || Array.from(document.querySelectorAll("
                           f"'[data-testid=stProgress]')).some(p => /Pruning curve/.test("
                           f"p.innerText))", timeout=120_000, polling=100)
    if not page.evaluate(CURVE_DRAWN):
        page.get_by_role("button", name="Cancel", exact=True).click()
        page.wait_for_function(f"() => ({CURVE_DRAWN})() || Array.from(document.querySelectorAll("
                               f"'button')).some(b => /cancelled/.test(b.innerText))",
                               timeout=120_000, polling=200)
    assert_no_exception(page, app_server)
