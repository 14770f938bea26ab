"""The why panel as a researcher meets it (issue 57 items 3, 8, 10, 11, 14), in chromium with
real clicks and taps on the bundled induction toy, T5 toy and MiniLM: a click wins over a cell
the link already holds, the clicked cell is outlined, and the link copied after it reopens the
section on that cell; against a stronger key the sentence says this key loses, by how much,
names the parts of both signs and agrees with the gap the bars draw; a click on
cross-attention and on a long input's window gets an answer; at a desk, on a projector and on
a phone the panel states its sums, no toolbar covers a title and no colour-bar labels
overlap (screenshots why_panel_*.png)."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from tests.support.browser import (DEVICES, assert_no_exception, click_cell, error_texts, shoot,
                                   wait_fitted)
from tests.support.why_browser import (MARKED, TICKS_OVERLAP, TOOLBAR_OVER_TITLE, WHY_OPEN,
                                       cell_point, why_text)

pytestmark = pytest.mark.browser

TEXT = "the cat sat on the mat. the cat sat on the mat."
TARGET = (38, 15)  # 'n' of the second "on" -> the space after the first "on"
PAGE = f"Attention_Maps?model=induction-toy&layer=1&head=0&text={quote(TEXT)}"
HEAD_MAP = "L1.H0: "
PROJECTOR = {"viewport": {"width": 1280, "height": 720}}


def says(tab, words: str, timeout: int = 120_000) -> None:
    """Wait until the why section says words (the page's next run is over)."""
    tab.wait_for_function("""(words) => Array.from(document.querySelectorAll(
        '[data-testid="stExpander"]')).some(e => e.innerText.includes(words))""", arg=words,
        timeout=timeout)
    wait_fitted(tab)


def test_a_click_wins_over_the_cell_a_link_holds_and_the_copied_link_keeps_it(
        device_tab, app_server, screenshots):
    tab = device_tab(DEVICES["desk"])
    tab.goto(f"{app_server.url}/{PAGE}&wq=5&wk=2")  # a link copied after another click
    wait_fitted(tab)
    tab.mouse.click(*cell_point(tab, HEAD_MAP, *TARGET))
    tab.wait_for_function(f"() => location.search.includes('wq={TARGET[0]}')")
    says(tab, f"query {TARGET[0]} 'n' → key {TARGET[1]}")
    assert_no_exception(tab, app_server)
    assert "query 5 " not in why_text(tab)
    # the cell explained is outlined on the map
    assert tab.evaluate(MARKED, HEAD_MAP) == [TARGET[1] - 0.5, TARGET[0] - 0.5]
    shoot(tab, screenshots, "why_click_over_link")
    # the link as copied now: a new session opens the section on the same cell
    fresh = device_tab(DEVICES["desk"])
    fresh.goto(tab.url)
    wait_fitted(fresh)
    fresh.wait_for_function(WHY_OPEN, timeout=120_000)
    assert f"query {TARGET[0]} 'n' → key {TARGET[1]}" in why_text(fresh)
    assert fresh.evaluate(MARKED, HEAD_MAP) == [TARGET[1] - 0.5, TARGET[0] - 0.5]


def test_against_a_stronger_key_the_key_loses_and_the_sentence_says_by_how_much(
        device_tab, app_server, screenshots):
    tab = device_tab(DEVICES["desk"])
    tab.goto(f"{app_server.url}/{PAGE}")
    wait_fitted(tab)
    click_cell(tab, cell_point(tab, HEAD_MAP, TARGET[0], 14), "wk=14")
    says(tab, f"query {TARGET[0]} 'n' → key 14")
    tab.locator('[data-testid="stSelectbox"]').filter(has_text="Against").click()
    tab.keyboard.type(f"key {TARGET[1]}:")  # the list scrolls; typing finds the option
    tab.keyboard.press("Enter")
    says(tab, f"Key 14 against key {TARGET[1]}")
    assert_no_exception(tab, app_server)
    said = why_text(tab)
    verdict = re.search(r"Key 14 \(([+-][\d.]+)\) loses to key 15 \(([+-][\d.]+)\) by "
                        r"([\d.]+) \(gap ([+-][\d.]+)\)\.", said)
    assert verdict, said
    assert "wins" not in said.split("loses to key 15")[1].split("\n")[0]
    bars = tab.evaluate("""() => {
        const gd = Array.from(document.querySelectorAll('.js-plotly-plot')).find(
            g => String(g.layout.title.text).startsWith('Key 14 against key 15'));
        return {names: Array.from(gd._fullData[0].y), parts: Array.from(gd._fullData[0].x),
                gap: gd._fullData[1].x[0]};
    }""")
    assert f"{bars['gap']:+.2f}" == verdict.group(4)
    assert abs(sum(bars["parts"]) - bars["gap"]) < 1e-6
    # the largest part that makes it lose is named first, and one that pulls the other way
    named = {n: v for n, v in zip(bars["names"], bars["parts"]) if n not in ("others",)}
    losing = min(named.values())
    assert f"It loses most through" in said and f"({losing:+.2f})" in said
    if max(named.values()) > 0:
        assert f"pulling the other way" in said and f"({max(named.values()):+.2f})" in said
    shoot(tab, screenshots, "why_contrast_loses")


@pytest.mark.parametrize("size", ["desk", "projector", "phone"])
def test_the_panel_states_its_sums_at_every_size_without_covered_titles(
        device_tab, app_server, screenshots, size):
    device = {"desk": DEVICES["desk"], "projector": PROJECTOR, "phone": DEVICES["phone"]}[size]
    tab = device_tab(device)
    tab.goto(f"{app_server.url}/{PAGE}&wq={TARGET[0]}&wk={TARGET[1]}"
             + ("&present=1" if size == "projector" else ""))
    wait_fitted(tab)
    tab.wait_for_function(WHY_OPEN, timeout=120_000)
    wait_fitted(tab)
    assert_no_exception(tab, app_server)
    assert not error_texts(tab)
    said = why_text(tab)
    # the corner of the matrix is the score the sentence gives, and the sums' total
    corner = tab.evaluate("""() => {
        const gd = Array.from(document.querySelectorAll('.js-plotly-plot')).find(
            g => String(g.layout.title.text).includes('by source'));
        const z = gd._fullData[1].z;
        return z[z.length - 1][z[0].length - 1];
    }""")
    assert f"Its score is {corner:+.2f}" in said
    assert f"{corner:+.2f} in all, the score" in said
    assert "Positions enter through RoPE" in said  # the toy rotates its queries and keys
    assert tab.evaluate(TOOLBAR_OVER_TITLE) == []
    assert tab.evaluate(TICKS_OVERLAP) == []
    tab.locator('[class*="st-key-_mv_at_why"]').scroll_into_view_if_needed()
    shoot(tab, screenshots, f"why_panel_{size}")


def test_a_click_on_cross_attention_says_why_it_is_not_split(device_tab, app_server,
                                                              screenshots):
    tab = device_tab(DEVICES["desk"])
    tab.goto(f"{app_server.url}/Attention_Maps?model=t5-toy&layer=1&head=0")
    wait_fitted(tab)
    tab.mouse.click(*cell_point(tab, "L1.H0: which source", 1, 2))
    tab.wait_for_function("""() => Array.from(document.querySelectorAll(
        '[data-testid="stAlertContainer"]')).some(a => a.innerText.includes(
        'reads source 2'))""", timeout=120_000)
    assert_no_exception(tab, app_server)
    note = tab.locator('[data-testid="stAlertContainer"]').filter(
        has_text="reads source 2").inner_text()
    assert note.startswith("Target 1 ") and "with weight" in note
    assert "split by source is not built" in note and "encoder self-attention" in note
    shoot(tab, screenshots, "why_cross_attention_click")


def test_a_click_on_a_long_inputs_window_asks_why_at_64_tokens(device_tab, app_server):
    text = " ".join(["the animal did not cross the street because it was too tired"] * 40)
    tab = device_tab(DEVICES["desk"])
    tab.goto(f"{app_server.url}/Attention_Maps?model=minilm&layer=0&head=0&max_tokens=300"
             f"&wsize=64&text={quote(text)}")
    wait_fitted(tab)
    body = tab.locator('[data-testid="stMain"]').inner_text()
    assert "click it for why the head attends there" in body
    tab.mouse.click(*cell_point(tab, "L0.H0: who attends", 10, 5))
    start = 300 - 64  # the window opens at the end of the text
    tab.wait_for_function(f"() => location.search.includes('wq={start + 10}')")
    says(tab, f"query {start + 10} ")
    assert_no_exception(tab, app_server)
    assert f"→ key {start + 5} " in why_text(tab)
