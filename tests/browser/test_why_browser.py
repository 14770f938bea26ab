"""Why a head attends there and what heads move, in chromium (issues 48 and 49), on the bundled
induction toy as the model picker offers it: a click on a cell of a head's map opens its
score split by source, naming the previous-token head on the key side at an induction
target; a click on a masked cell says why nothing is explained, never a traceback; on a
400 px touch screen one tap does it and brings the answer into view; the "what moves" switch
changes the maps and is kept in the link; the lesson's textbook screen shows on the toy."""

from __future__ import annotations

import re

from urllib.parse import quote

import pytest
from tests.support.browser import (DEVICES, assert_no_exception, click_cell, error_texts,
                                   shoot, wait_fitted)
from tests.support.why_browser import WHY_OPEN, cell_point

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat. the cat sat on the mat."
TARGET = (38, 15)  # 'n' of the second "on" -> the space after the first "on"
PAGE = f"Attention_Maps?model=induction-toy&layer=1&head=0&text={quote(TEXT)}"
HEAD_MAP = "L1.H0: "
MESSAGE = """() => Array.from(document.querySelectorAll('[data-testid="stAlertContainer"]'))
    .some(a => a.innerText.includes('cannot see key'))"""


def why_at_the_target(tab, server, touch: bool):
    """The toy's page in tab, its induction target clicked (tapped) and explained."""
    tab.goto(f"{server.url}/{PAGE}")
    wait_fitted(tab)
    point = cell_point(tab, HEAD_MAP, *TARGET)
    if touch:
        tab.touchscreen.tap(*point)
    else:  # a click lost to a redraw is clicked again, as a person would
        click_cell(tab, point, f"wk={TARGET[1]}")
    tab.wait_for_function(WHY_OPEN, timeout=120_000)
    wait_fitted(tab)
    assert_no_exception(tab, server)
    return tab


def test_a_click_explains_a_cell_and_a_masked_one_says_why(device_tab, app_server,
                                                           screenshots):
    tab = why_at_the_target(device_tab(DEVICES["desk"]), app_server, touch=False)
    assert f"wq={TARGET[0]}" in tab.url and f"wk={TARGET[1]}" in tab.url
    said = tab.locator('[data-testid="stExpander"]').filter(
        has_text="Why this head attends there").inner_text()
    # at the target, the key side's largest part is the previous-token head's
    assert "On the key side the largest is L0.H0, a previous-token head on this text" in said
    shoot(tab, screenshots, "why_toy_desk")
    # a masked cell: query 5 cannot see key 30
    tab.mouse.click(*cell_point(tab, HEAD_MAP, 5, 30))
    tab.wait_for_function(MESSAGE, timeout=120_000)
    assert_no_exception(tab, app_server)
    assert not error_texts(tab)
    shoot(tab, screenshots, "why_toy_masked")


def test_one_tap_explains_a_cell_on_a_phone(device_tab, app_server, screenshots):
    tab = why_at_the_target(device_tab(DEVICES["phone"]), app_server, touch=True)
    tab.wait_for_timeout(1500)  # the scroll settles
    top = tab.evaluate("""() => document.querySelector('[class*="st-key-_mv_at_why"]')
        .getBoundingClientRect().top""")
    shoot(tab, screenshots, "why_toy_phone")
    assert 0 <= top < DEVICES["phone"]["viewport"]["height"] / 2, top


def test_the_what_moves_switch_changes_the_maps_and_is_kept(device_tab, app_server,
                                                           screenshots):
    tab = device_tab(DEVICES["desk"])
    tab.goto(f"{app_server.url}/Attention_Maps?model=minilm")
    tab.wait_for_function("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .some(g => String((g.layout.title || {}).text || '').includes('who attends to whom'))""")
    wait_fitted(tab)
    tab.get_by_text("What moves", exact=True).click()
    tab.wait_for_function("() => location.search.includes('weights=value')")
    wait_fitted(tab)
    tab.wait_for_function("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .some(g => String((g.layout.title || {}).text || '').includes('what moves'))""")
    assert not tab.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .some(g => String((g.layout.title || {}).text || '').includes('who attends to whom'))""")
    # the first token both ways, side by side, opened with the switch
    body = tab.locator('[data-testid="stMain"]').inner_text()
    assert "of the attention weights and" in body and "of what the heads move" in body
    shoot(tab, screenshots, "maps_what_moves_minilm")
    # kept across pages: away and back
    tab.locator('[data-testid="stSidebarNav"] a', has_text="Inside one head").first.click()
    tab.wait_for_url("**/Inside_One_Head*")
    wait_fitted(tab)
    tab.locator('[data-testid="stSidebarNav"] a', has_text="Attention maps").first.click()
    tab.wait_for_url("**/Attention_Maps*")
    wait_fitted(tab)
    assert "weights=value" in tab.url
    assert_no_exception(tab, app_server)


def test_the_lessons_textbook_screen_runs_on_the_toy(device_tab, app_server, screenshots):
    tab = device_tab({"viewport": {"width": 1280, "height": 720}})
    tab.goto(f"{app_server.url}/Inside_One_Head?model=induction-toy&lesson=1&present=1"
             f"&text={quote(TEXT)}")
    # the lesson's row, as the class sees it: a run the browser's first report interrupts
    # can end before it (wait_fitted has nothing to wait for on a screen without figures)
    tab.locator('[data-testid="stProgress"]').filter(has_text="Step 1 of").wait_for()
    wait_fitted(tab)
    titles = tab.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(
        has_text="Lesson step")
    assert titles.count() == 1
    number = None
    for k in range(1, 30):
        tab.goto(f"{app_server.url}/Inside_One_Head?model=induction-toy&lesson=1&present=1"
                 f"&text={quote(TEXT)}&lstep={k}")
        progress = tab.locator('[data-testid="stProgress"]').filter(has_text=f"Step {k} of")
        progress.wait_for()
        wait_fitted(tab)
        if "Why an induction head" in progress.inner_text():
            number = k
            break
    assert number is not None
    body = tab.locator('[data-testid="stMain"]').inner_text()
    assert "On this text, L1.H0 is an induction head" in body
    assert re.search(r"of it comes from the key sides? of L0\.H0 \(", body), body
    assert tab.locator(".js-plotly-plot").filter(has_text="by source").count() == 1
    assert_no_exception(tab, app_server)
    shoot(tab, screenshots, "lesson_textbook_toy")


def test_a_click_on_a_model_that_cannot_be_split_says_which_step_and_why(
        device_tab, app_server, screenshots):
    """The bundled image reader's encoder reads strips of pixels, not tokens: a click on its
    map says why its score has no sources to split into, on the page, not a traceback."""
    tab = device_tab(DEVICES["desk"])
    tab.goto(f"{app_server.url}/Attention_Maps?model=reader-toy&kind=encoder&layer=0&head=0")
    wait_fitted(tab)
    tab.mouse.click(*cell_point(tab, "L0.H0: ", -1, 1))  # the last query, key 1
    tab.wait_for_function("""() => Array.from(document.querySelectorAll(
        '[data-testid="stAlertContainer"]')).some(a => a.innerText.includes(
        'cannot be split by source'))""", timeout=120_000)
    assert_no_exception(tab, app_server)
    said = tab.locator('[data-testid="stAlertContainer"]').filter(
        has_text="cannot be split by source").first.inner_text()
    assert "reads an image" in said and "token" in said, said
    assert not error_texts(tab)
    shoot(tab, screenshots, "why_image_reader_refused")
