"""Clicking a cell of a head's map in chromium (the why panel's tests): where a cell of a
square map lies on the screen, read from the drawn figure, and what the why section shows."""

from __future__ import annotations

# the plot area of the first figure whose title starts with a prefix, scrolled into view, and
# its number of rows (the map's query positions)
AREA = """(prefix) => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot')).find(
        g => String((g.layout.title || {}).text || '').startsWith(prefix));
    if (!gd) return null;
    gd.scrollIntoView({block: 'center'});
    const r = gd.querySelector('.nsewdrag').getBoundingClientRect();
    const z = gd._fullData[0].z;
    return {x: r.left, y: r.top, width: r.width, height: r.height, n: z.length,
            m: z[0].length};
}"""
WHY_OPEN = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(
    g => String((g.layout.title || {}).text || '').includes('by source'))"""


def cell_point(tab, prefix: str, query: int, key: int) -> tuple[float, float]:
    """The middle of cell (query, key) of a map (rows: queries, columns: keys; a negative
    index counts from the end), scrolled into view."""
    tab.wait_for_function(f"() => ({AREA})({prefix!r}) !== null")
    tab.evaluate(AREA, prefix)
    tab.wait_for_timeout(400)
    area = tab.evaluate(AREA, prefix)
    n, m = area["n"], area["m"]
    return (area["x"] + area["width"] * (key % m + 0.5) / m,
            area["y"] + area["height"] * (query % n + 0.5) / n)


WHY_SECTION = '[data-testid="stExpander"]'
WHY_TITLE = "Why this head attends there"


def why_text(tab) -> str:
    """What the why section says (its sentences and captions)."""
    return tab.locator(WHY_SECTION).filter(has_text=WHY_TITLE).first.inner_text()


# the outlined cell of the first figure whose title starts with a prefix: [x0, y0] or null
MARKED = """(prefix) => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot')).find(
        g => String((g.layout.title || {}).text || '').startsWith(prefix));
    const shape = gd && (gd.layout.shapes || []).find(s => s.name === 'marked cell');
    return shape ? [shape.x0, shape.y0] : null;
}"""

# every figure of the why section whose toolbar box meets its title's box, by title
TOOLBAR_OVER_TITLE = """() => {
    const section = Array.from(document.querySelectorAll('[data-testid="stExpander"]')).find(
        e => e.innerText.includes('Why this head attends there'));
    const meets = (a, b) => a.width && b.width && a.left < b.right && b.left < a.right
        && a.top < b.bottom && b.top < a.bottom;
    return Array.from(section.querySelectorAll('.js-plotly-plot')).filter(gd => {
        const bar = gd.querySelector('.modebar');
        const title = gd.querySelector('.gtitle');
        return bar && title && meets(bar.getBoundingClientRect(),
                                     title.getBoundingClientRect());
    }).map(gd => String(gd.layout.title.text));
}"""

# every figure of the why section two of whose colour-bar tick labels overlap, by title
TICKS_OVERLAP = """() => {
    const section = Array.from(document.querySelectorAll('[data-testid="stExpander"]')).find(
        e => e.innerText.includes('Why this head attends there'));
    const meets = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom
        && b.top < a.bottom;
    return Array.from(section.querySelectorAll('.js-plotly-plot')).filter(gd => {
        const ticks = Array.from(gd.querySelectorAll('.colorbar .cbaxis text, .colorbar .ytick text, .colorbar .xtick text'))
            .map(t => t.getBoundingClientRect()).filter(r => r.width);
        return ticks.some((a, i) => ticks.slice(i + 1).some(b => meets(a, b)));
    }).map(gd => String(gd.layout.title.text));
}"""
