"""The Circuits page in chromium: where a node of the circuit graph is on the screen, a
click on a point of a figure, and a path patching run (tests/browser)."""

from __future__ import annotations

NODE_CENTRE = """(name) => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(p => p._fullData.some(t => t.name === 'nodes'));
    const nodes = gd._fullData.find(t => t.name === 'nodes');
    const i = Array.from(nodes.customdata).indexOf(name);
    const fl = gd._fullLayout, box = gd.getBoundingClientRect();
    return [box.left + fl.xaxis._offset + fl.xaxis.l2p(nodes.x[i]),
            box.top + fl.yaxis._offset + fl.yaxis.l2p(nodes.y[i])];
}"""


def click_point(tab, locate: str, arg) -> None:
    """Scroll the point that ``locate`` finds (page coordinates of the viewport) to the middle
    of the window, then click it."""
    x, y = tab.evaluate(locate, arg)
    height = tab.viewport_size["height"]
    tab.mouse.move(x, height / 2)  # the wheel scrolls what is under the mouse: the page
    tab.mouse.wheel(0, y - height / 2)
    tab.wait_for_timeout(500)
    x, y = tab.evaluate(locate, arg)
    tab.mouse.click(x, y)


def run_path_patching(tab, receiver: str, part: str, timeout: int) -> None:
    """Press the path patching button for a receiver's part ("L23.H3", "q") and wait (up to
    timeout ms) until its map is drawn and the run is over."""
    from tests.support.browser import settle

    tab.get_by_role("button", name=f"Run path patching into {receiver} ({part})").click()
    tab.wait_for_function("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                          f".some(p => (p.layout.title.text || '').includes('{receiver}.{part}'))",
                          timeout=timeout)
    settle(tab, 1)
