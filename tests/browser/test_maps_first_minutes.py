"""Issue 51 on the Attention maps page, at the size where each item was seen (SmolLM2, 30
layers x 9 heads): the All heads figure is as tall as its thumbnails and its toolbar does not
cover its title (item 2); one tap on a thumbnail on a 400 px touch screen picks the head and
brings its map into view (item 3)."""

from __future__ import annotations

import pytest
from tests.support.browser import DEVICES, assert_no_exception, shoot, wait_fitted

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PHONE, DESK = DEVICES["phone"], DEVICES["desk"]
# The All heads figure: its height, its plot area's, and where its title's text and its
# toolbar's buttons lie (the toolbar shows while the pointer is over the figure).
GRID_BOXES = """() => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot')).find(
        g => String((g.layout.title || {}).text || '').startsWith('All heads'));
    const box = r => ({left: r.left, right: r.right, top: r.top, bottom: r.bottom});
    const area = gd.querySelector('.nsewdrag').getBoundingClientRect();
    const title = Array.from(gd.querySelectorAll('.gtitle, .gtitle tspan'))
        .map(t => box(t.getBoundingClientRect())).filter(r => r.right > r.left);
    const buttons = Array.from(gd.querySelectorAll('.modebar-btn'))
        .map(b => box(b.getBoundingClientRect())).filter(r => r.right > r.left);
    return {height: gd.getBoundingClientRect().height, plot: area.height, title, buttons};
}"""
ONE_HEAD = """() => {
    const h = Array.from(document.querySelectorAll('[data-testid="stMain"] h3'))
        .find(e => e.innerText.startsWith('One head:'));
    if (!h) return null;
    const r = h.getBoundingClientRect();
    return {text: h.innerText, top: r.top, bottom: r.bottom};
}"""


GRID_AREA = """() => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot')).find(
        g => String((g.layout.title || {}).text || '').startsWith('All heads'));
    gd.scrollIntoView({block: 'start'});
    const r = gd.querySelector('.nsewdrag').getBoundingClientRect();
    return {x: r.left, y: r.top, width: r.width, height: r.height,
            top: gd.getBoundingClientRect().top};
}"""


def grid_area(tab) -> dict:
    """The All heads figure scrolled to the top of the screen; its plot area's box."""
    tab.wait_for_function("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .some(g => String((g.layout.title || {}).text || '').startsWith('All heads'))""")
    wait_fitted(tab)
    tab.evaluate(GRID_AREA)
    tab.wait_for_timeout(400)
    return tab.evaluate(GRID_AREA)


@pytest.mark.parametrize("device", ["phone", "desk"])
def test_the_grid_is_as_tall_as_its_thumbnails_and_its_toolbar_clears_its_title(
        device_tab, app_server, screenshots, device):
    tab = device_tab(PHONE if device == "phone" else DESK)
    tab.goto(f"{app_server.url}/Attention_Maps?model=smollm2")
    wait_fitted(tab)
    assert_no_exception(tab, app_server)
    area = grid_area(tab)
    tab.mouse.move(area["x"] + 10, area["y"] + 10)  # the pointer over it shows the toolbar
    tab.wait_for_timeout(500)
    found = tab.evaluate(GRID_BOXES)
    shoot(tab, screenshots, f"maps_grid_{device}")
    # the figure holds its plot area, its title and the heads' labels: no white bands
    assert found["height"] - found["plot"] <= 200, found
    assert found["buttons"], "the toolbar did not show"
    covered = [(t, b) for t in found["title"] for b in found["buttons"]
               if t["left"] < b["right"] and b["left"] < t["right"]
               and t["top"] < b["bottom"] and b["top"] < t["bottom"]]
    assert not covered, covered


def test_one_tap_on_a_thumbnail_picks_the_head_and_shows_its_map(device_tab, app_server,
                                                                 screenshots):
    tab = device_tab(PHONE)
    tab.goto(f"{app_server.url}/Attention_Maps?model=smollm2&layer=1&head=2")
    wait_fitted(tab)
    assert tab.evaluate(ONE_HEAD)["text"].startswith("One head: L1.H2")
    area = grid_area(tab)
    # the thumbnail of L3.H5: row 3 of 30, column 5 of 9
    tab.touchscreen.tap(area["x"] + area["width"] * 5.5 / 9,
                        area["y"] + area["height"] * 3.5 / 30)
    tab.wait_for_function("() => location.search.includes('layer=3')", timeout=60_000)
    wait_fitted(tab)
    tab.wait_for_timeout(1500)  # the scroll settles
    assert "head=5" in tab.url, tab.url
    shown = tab.evaluate(ONE_HEAD)
    shoot(tab, screenshots, "maps_tap_phone")
    assert shown["text"].startswith("One head: L3.H5"), shown
    height = PHONE["viewport"]["height"]
    assert 0 <= shown["top"] < height / 2, shown  # the map it changed is on the screen
