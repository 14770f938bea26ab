"""What a person would see wrong in a page's figures, measured in the browser: text that
overprints other text (titles, tick labels, axis titles, cell values, annotations, legend and
colour-bar labels), plot areas too narrow to read, colour bars taller than their maps.

Used by the layout tests and by benchmarks/layout.py (screenshots plus this report)."""

from __future__ import annotations

PHONE_PX = 600
MIN_PLOT_WIDTH = 250  # px: below this a map's cells or a chart's bars cannot be told apart

FIGURE_LAYOUT = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => {
    const title = (gd.layout && gd.layout.title && gd.layout.title.text || '')
        .replace(/<[^>]+>/g, ' ').slice(0, 60);
    const texts = [];
    gd.querySelectorAll('svg.main-svg text').forEach(el => {
        if (el.closest('.hoverlayer') || el.closest('.modebar')) return;
        if (!el.textContent.trim()) return;
        const style = getComputedStyle(el);
        if (style.visibility === 'hidden' || style.display === 'none' ||
            parseFloat(style.opacity || '1') === 0) return;
        const r = el.getBoundingClientRect();
        if (r.width < 1 || r.height < 1) return;
        texts.push({text: el.textContent.slice(0, 30), r});
    });
    const overlaps = [];
    for (let i = 0; i < texts.length && overlaps.length < 5; i++) {
        for (let j = i + 1; j < texts.length && overlaps.length < 5; j++) {
            const a = texts[i].r, b = texts[j].r;
            const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
            const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
            if (w <= 0 || h <= 0) continue;
            const smaller = Math.min(a.width * a.height, b.width * b.height);
            // glyph boxes carry leading: a sliver of overlap is not overprinting
            if (w * h > 0.2 * smaller && h > 0.3 * Math.min(a.height, b.height))
                overlaps.push([texts[i].text, texts[j].text]);
        }
    }
    const areas = Array.from(gd.querySelectorAll('.nsewdrag')).map(d => d.getBoundingClientRect());
    // the main plot is the largest area (a distance matrix has thin strips beside it)
    const main = areas.sort((a, b) => b.width * b.height - a.width * a.height)[0];
    const plotWidth = main ? main.width : null;
    const plotHeight = main ? main.height : null;
    // vertical colour bars only: a horizontal one lies under its map
    const bars = Array.from(gd.querySelectorAll('.colorbar .cbbg'))
        .map(b => b.getBoundingClientRect()).filter(r => r.height > r.width).map(r => r.height);
    const box = gd.getBoundingClientRect();
    return {title, plotWidth, plotHeight, colorbar: bars.length ? Math.max(...bars) : null,
            overlaps, figureWidth: box.width, right: box.right};
})"""


def layout_problems(page, min_plot_width: int = MIN_PLOT_WIDTH) -> list[str]:
    """Every figure on the page checked; a list of what is wrong, in words (empty: fine)."""
    viewport = page.viewport_size["width"]
    problems = []
    for figure in page.evaluate(FIGURE_LAYOUT):
        name = figure["title"] or "untitled figure"
        if figure["overlaps"]:
            problems.append(f"{name}: text overprints {figure['overlaps']}")
        width = figure["plotWidth"]
        # on a phone a plot must keep a usable width; wider screens show thumbnails and,
        # in presentation mode, whole grids within one screen's height, by design
        # (250 px at a 400-px phone; a narrower phone keeps 5/8 of its width)
        if viewport <= PHONE_PX and width is not None and width < min(min_plot_width,
                                                                      0.625 * viewport):
            problems.append(f"{name}: plot area {width:.0f} px wide")
        if figure["right"] > viewport + 1:
            problems.append(f"{name}: runs {figure['right'] - viewport:.0f} px off the screen")
        bar, height = figure["colorbar"], figure["plotHeight"]
        if bar and height and bar > 1.15 * height + 10:
            problems.append(f"{name}: colour bar {bar:.0f} px tall beside a {height:.0f} px map")
    return problems
