"""Laying a figure out for the screen it is shown on: a phone 400 px wide, a desktop, a
projector at 1280x720 in presentation mode.

The figure builders in ``plots`` do not know the screen; the app does (the browser reports
the width of the page's main column). ``fit_figure`` then:
- gives grid maps (attention maps, layer x head grids, distance matrices; builders mark them
  with ``layout.meta["cells"] = [rows, columns]``) square cells of a natural size, so the
  map is neither a sliver on a phone nor a wall on a desktop, and its colour bar, which
  Plotly draws as tall as the plot area, is as tall as the map;
- writes numbers in cells at 12 px at least (14 in presentation mode), widening the cells
  of a map where the screen has room for its longest number (measured from its format and
  its values: "0.00090" needs more than "0.12"), and drops them where they do not fit;
  thins tick labels that would print over each other (measured from the cell size and the
  font size);
- wraps titles to the figure's width (a map narrower than the screen wraps to its own), so
  they are not cut off at the right edge;
- in presentation mode enlarges every font (no figure text under 14 px) and keeps each
  figure within one screen;
- on a screen that asks it to fill (a lesson's step: ``Screen.fill``) gives the figure the
  height it has, sets its tick labels at the smallest legible size so each row of a map
  keeps its label, and its title a little smaller.
No Streamlit here: a notebook can call it with any width.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

GLYPH_WIDTH = 0.6  # average glyph width of the app's sans-serif font, as a fraction of its size
COLOUR_BAR_PX = 74  # a vertical colour bar with its tick labels and a sideways title
CELL_PX = 34  # largest cell of a grid map on a normal screen
PRESENT_CELL_PX = 56  # and in presentation mode
PRESENT_CELL_MAX_W = 160  # a presentation-mode cell may grow this wide to fill the width
PRESENT_MIN_TEXT_PX = 14  # the smallest figure text on a projector, numbers in cells too
MIN_CELL_TEXT_PX = 12  # the smallest number written in a cell on a desk or a phone
WORDS_MIN_PX = 8  # and the smallest word (a token in a strip of tokens)
FONT = 12
NARROW_PX = 560  # below this a colour bar goes under its map
BAR_BELOW_PX = 64  # a horizontal colour bar with its tick labels and title
SHORT_BAR_PX = 110  # a grid map lower than this takes its colour bar under it
SHORT_LABEL = 8  # characters of a tick label on a narrow screen (maps keep 250 px at 400)
PHONE_PLOT_PX = 250  # on a narrow screen a grid of few columns widens its cells to this
PRESENT_FONT = 18
LESSON_LINE = 1.15  # a lesson's tick labels: one every this many font sizes, none dropped
_MARKUP = r"<[^>]+>|&[a-z#0-9]+;"  # a tag or an escaped character: one glyph at most
_TAGS = re.compile(_MARKUP)
_GLYPHS = re.compile(_MARKUP + "|.")
_CELL_FIELD = re.compile(r"%\{(\w+)(?::([^}]*))?\}")  # what a texttemplate writes: %{z:.2g}
_SAMPLE = 512  # values of each end read to find a map's longest number
# a colour bar lying under its plot, across its width (its y is set per figure)
_BAR_UNDER = dict(orientation="h", len=1.0, x=0.0, xanchor="left", yanchor="top",
                  thickness=12, title_side="bottom")


@dataclass(frozen=True)
class Screen:
    """Where a figure is shown: ``width`` px available to it; the window's ``height`` (used in
    presentation mode to keep a figure within one screen); presentation mode on or off;
    ``fill``: the figure is the screen's subject (a lesson's step) and takes the height it
    is given, its labels as small as stays legible so that none is dropped."""

    width: int
    height: int | None = None
    present: bool = False
    fill: bool = False

    @property
    def font(self) -> int:
        return PRESENT_FONT if self.present else FONT

    @property
    def tick_font(self) -> int:
        """The size of a tick label: on a filled screen the smallest legible one."""
        if not self.fill:
            return self.font
        return PRESENT_MIN_TEXT_PX if self.present else MIN_CELL_TEXT_PX


def _text_length(text: object) -> int:
    return len(_TAGS.sub("x", str(text)))


def _longest(labels) -> int:
    return max((_text_length(t) for t in labels or ()), default=0)


def _shorten(label: str) -> str:
    """A tick label cut to SHORT_LABEL characters (the hover still shows it whole); markup
    (an escaped character) is never cut in half."""
    text = str(label)
    if _text_length(text) <= SHORT_LABEL:
        return text
    return "".join(_GLYPHS.findall(text)[:SHORT_LABEL - 1]) + "…"


def _wrap(text: str, max_chars: int) -> str:
    """Break a title line at spaces into lines of at most max_chars (markup counted as one)."""
    words, lines, line = text.split(" "), [], ""
    for word in words:
        if line and _text_length(line) + 1 + _text_length(word) > max_chars:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "<br>".join(lines)


def _wrap_title(layout, width: int, font: int) -> int:
    """Wrap the title to the width; returns the px the title needs above the plot."""
    text = layout.title.text if layout.title and layout.title.text else ""
    if not text:
        return 20
    size = layout.title.font.size or font + 4
    parts = text.split("<br>")
    wrapped = [_wrap(parts[0], max(12, int((width - 30) / (GLYPH_WIDTH * size))))]
    # the note under the title is set smaller (<sup>)
    wrapped += [_wrap(p, max(16, int((width - 30) / (GLYPH_WIDTH * size * 0.75)))) for p in parts[1:]]
    layout.title.text = "<br>".join(wrapped)
    n_lines = sum(w.count("<br>") + 1 for w in wrapped)
    return int(size * 1.3 * n_lines + 24)


def _rewrap_title(layout, title: str, width: int, font: int) -> int:
    """The title, as the builder wrote it, wrapped again to a narrower width; returns the
    px it needs above the plot."""
    layout.title.text = title
    return _wrap_title(layout, width, font)


def _thin(axis, px_per_category: float, n_categories: int, font: int,
          numbers=None, line: float = 1.35) -> None:
    """Keep every k-th tick label when neighbours would print over each other. numbers: the
    position each tick label stands at (a token axis, layout.meta["tick_numbers"]): a kept
    label then says its position ("12 ␣"), or a column of single characters could not be
    told apart. line: the spacing a label needs, in font sizes (a lesson's labels sit
    closer: every token keeps its own)."""
    values = list(axis.tickvals) if axis.tickvals is not None else []
    if len(values) < 2 or px_per_category <= 0:
        return
    spacing = px_per_category * n_categories / len(values)
    needed = font * line
    if spacing >= needed:
        return
    step = math.ceil(needed / spacing)
    axis.tickvals = values[::step]
    if axis.ticktext is not None:
        kept = list(axis.ticktext)[::step]
        if numbers is not None and len(numbers) == len(values):
            kept = [text if str(text).startswith(f"{k} ") else f"{k} {text}"
                    for k, text in zip(list(numbers)[::step], kept)]
        axis.ticktext = kept


def _formatted(value: float, spec: str) -> str:
    """A number as Plotly's d3 format `spec` writes it, near enough to count its glyphs:
    Python's format, with d3's trailing zeros of "g" kept ("#")."""
    if spec.endswith("g") and "#" not in spec:
        spec = re.sub(r"^([+\- ]?)", r"\1#", spec)
    try:
        return format(value, spec)
    except ValueError:
        return f"{value:.3g}"


def _cell_chars(trace) -> int:
    """The glyphs of the longest text the trace's texttemplate writes in a cell."""
    found = _CELL_FIELD.search(str(trace.texttemplate))
    if found is None:
        return 5
    field, spec = found.groups()
    values = getattr(trace, field, None) if field in ("z", "text", "customdata") else None
    if values is None:
        return 5
    if not spec:  # words (a token strip's): their builder sizes them, as it always has
        return 5
    flat = np.asarray(values, dtype=object).ravel()
    numbers = np.array([v for v in flat if isinstance(v, (int, float, np.number))], float)
    numbers = numbers[np.isfinite(numbers)]
    if numbers.size > 4 * _SAMPLE:  # the longest lie at the ends, in size and in value
        by_size, by_value = np.sort(np.abs(numbers)), np.sort(numbers)
        numbers = np.concatenate([by_size[:_SAMPLE], by_size[-_SAMPLE:], by_value[:_SAMPLE],
                                  by_value[-_SAMPLE:]])
    return max((len(_formatted(float(v), spec)) for v in numbers), default=0)


def _cell_text_px(trace, present: bool) -> tuple[int, float]:
    """(the smallest size a cell's text may have, the size the builder asked for, raised
    to it): numbers MIN_CELL_TEXT_PX, words WORDS_MIN_PX; on a projector
    PRESENT_MIN_TEXT_PX."""
    size = trace.textfont.size if trace.textfont and trace.textfont.size else 10
    numbers = bool((_CELL_FIELD.search(str(trace.texttemplate)) or [None] * 3)[2])
    least = (PRESENT_MIN_TEXT_PX if present else
             MIN_CELL_TEXT_PX if numbers else WORDS_MIN_PX)
    return least, max(size * 1.6 if present else size, least)


def _needed_cell_width(heatmaps, present: bool) -> float:
    """The width a cell needs to write the longest number of the maps at the smallest
    legible size (0 when they write none)."""
    widths = [_cell_text_px(t, present)[0] * (GLYPH_WIDTH * _cell_chars(t) + 0.3)
              for t in heatmaps if t.texttemplate]
    return max(widths, default=0.0)


def _cell_values(trace, cell_w: float, cell_h: float, present: bool) -> None:
    """Write numbers in cells only where they fit, never under MIN_CELL_TEXT_PX (on a
    projector PRESENT_MIN_TEXT_PX): smaller, nobody reads them (hovering still gives
    them)."""
    if not trace.texttemplate:
        return
    least, size = _cell_text_px(trace, present)
    fits = min(cell_w / (GLYPH_WIDTH * _cell_chars(trace) + 0.3), cell_h / 1.25)
    if fits < least - 1e-6:  # a cell widened to exactly its number's width fits it
        trace.texttemplate = None
        return
    trace.textfont.size = int(min(size, fits))


def _grow_top(layout, title_px: int) -> None:
    """Room for a title that wrapped onto more lines: the figure grows, the plot keeps its size."""
    grow = title_px - (layout.margin.t or 0)
    if grow > 0:
        layout.margin.t = title_px
        layout.height = (layout.height or 450) + grow


def _narrow_extras(fig: go.Figure, width: int, font: int, thin_x: bool,
                   fill: bool = False) -> None:
    """Charts that are not grid maps, on a narrow screen: the legend and a shared colour bar
    go under the plot (beside it they take half the width), and crowded tick labels thin."""
    layout = fig.layout
    height = layout.height or 450
    # what lies under the plot already: tick labels (upright at worst) and the axis title
    labels_px = GLYPH_WIDTH * font * min(_longest(layout.xaxis.ticktext or ()), 16) + font * 4
    plot_h = max(height - (layout.margin.t or 60) - (layout.margin.b or 60), 100)
    if width < NARROW_PX:
        entries = [t for t in fig.data if t.showlegend is not False and t.name]
        if len(entries) > 1 and layout.showlegend is not False:
            rows = -(-len(entries) // 2)
            layout.legend.update(orientation="h", x=0.0, xanchor="left",
                                 y=-labels_px / plot_h, yanchor="top")
            layout.height = height = height + 22 * rows + int(labels_px)
            layout.margin.b = (layout.margin.b or 60) + 22 * rows + int(labels_px)
    # A colour bar shared by a row of maps (a coloraxis) lies under them, as wide as the
    # row: beside them it would be as tall as the figure, not as the maps.
    if layout.coloraxis.colorscale is not None and not fill:  # filled: beside, not lower
        layout.coloraxis.colorbar.update(_BAR_UNDER, y=-labels_px / plot_h)
        layout.height = height = height + BAR_BELOW_PX
        layout.margin.b = (layout.margin.b or 60) + BAR_BELOW_PX
    axis = layout.xaxis
    if thin_x and axis.tickvals is not None and len(axis.tickvals) > 1:
        plot_w = width - (layout.margin.l or 70) - (layout.margin.r or 30)
        _thin(axis, plot_w / len(axis.tickvals), len(axis.tickvals), font)


def fit_figure(fig: go.Figure, screen: Screen) -> go.Figure:
    """Lay ``fig`` out for ``screen`` (in place; returned for chaining). A figure narrower
    than the screen gets ``layout.width``; otherwise it is left to stretch to the width."""
    layout = fig.layout
    font = screen.font
    width = max(200, int(screen.width))
    if screen.present:
        layout.font.size = PRESENT_FONT
        layout.title.font.size = PRESENT_FONT + 8
        layout.hoverlabel.font.size = PRESENT_FONT
        for axis in (layout.xaxis, layout.yaxis):
            if axis.tickfont.size:
                axis.tickfont.size = max(axis.tickfont.size, PRESENT_FONT - 4)
        # every other text a builder sized itself: labels of a line view, notes, the legend
        for trace in fig.data:
            text_font = getattr(trace, "textfont", None)
            if trace.type != "heatmap" and text_font is not None and text_font.size:
                text_font.size = max(text_font.size, PRESENT_MIN_TEXT_PX)
        for note in layout.annotations or ():
            if note.font.size:
                note.font.size = max(note.font.size, PRESENT_MIN_TEXT_PX)
        if layout.legend.font.size:
            layout.legend.font.size = max(layout.legend.font.size, PRESENT_MIN_TEXT_PX)
    tick = screen.tick_font
    if screen.fill:  # the map is the subject: every label, the title one size down
        layout.xaxis.tickfont.size = layout.yaxis.tickfont.size = tick
        layout.title.font.size = font + 2
    title = layout.title.text if layout.title and layout.title.text else ""
    title_px = _wrap_title(layout, width, font)
    heatmaps = [t for t in fig.data if t.type == "heatmap" and t.z is not None
                and (t.xaxis or "x") == "x" and (t.yaxis or "y") == "y"]
    meta = layout.meta if isinstance(layout.meta, dict) else {}
    cells = meta.get("cells")
    margin = layout.margin
    if heatmaps:
        rows = len(heatmaps[0].z)
        cols = len(heatmaps[0].z[0]) if rows else 0
        if cells:  # the grid's rows and columns (a builder may draw totals beside a map)
            rows, cols = (int(c) for c in cells)
        if width < NARROW_PX:  # long token labels would eat a phone's width
            for axis in (layout.xaxis, layout.yaxis):
                if axis.ticktext is not None and _longest(axis.ticktext) > SHORT_LABEL:
                    axis.ticktext = [_shorten(t) for t in axis.ticktext]
        x_ticks = layout.xaxis.ticktext if layout.xaxis.ticktext is not None else ()
        y_ticks = layout.yaxis.ticktext if layout.yaxis.ticktext is not None else ()
        x_labels_px = GLYPH_WIDTH * tick * min(_longest(x_ticks), 16) + tick * 1.5 + font
        left = int(max(margin.l or 0, 0.55 * tick * min(_longest(y_ticks), 16)
                       + tick * 1.2 + font))
        shows_bar = any(t.showscale is not False and not t.coloraxis for t in heatmaps)
        right = int(max(margin.r or 0, 10) + (COLOUR_BAR_PX + font if shows_bar else 0))
        labels_on_top = layout.xaxis.side == "top"
        if layout.xaxis.title and layout.xaxis.title.text:
            x_labels_px += font * 1.8
        top = int(title_px + (x_labels_px if labels_on_top else 0))
        # a filled screen's figure keeps no margin of the builder's beyond its labels
        bottom = int((8 if screen.fill else max(margin.b or 0, 20))
                     + (0 if labels_on_top else x_labels_px))
        # On a narrow screen a colour bar beside the map would leave the map too little
        # width: it goes under the map, across it; so does the bar of a grid of a row or
        # three, which beside it would be as short as the grid and its labels overprint
        short = bool(cells) and int(cells[0]) * (PRESENT_CELL_PX if screen.present
                                                 else CELL_PX) < SHORT_BAR_PX
        bar_below = shows_bar and (width < NARROW_PX or short)
        if bar_below:
            right = 12
            for trace in heatmaps:
                if trace.showscale is not False and not trace.coloraxis:
                    trace.colorbar.update(_BAR_UNDER, lenmode="fraction")
            bottom += BAR_BELOW_PX
            if screen.fill:  # its tick labels at the labels' size, under them
                for trace in heatmaps:
                    trace.colorbar.tickfont.size = tick
        if cells and rows and cols:
            n_rows, n_cols = cells
            across = (width - left - right) / n_cols
            cell = min(PRESENT_CELL_PX if screen.present else CELL_PX, across)
            if screen.present and screen.height:
                cell = min(cell, (screen.height - top - bottom - (0 if screen.fill else 40))
                           / n_rows)
            cell = max(cell, 0.5)
            cell_h = cell  # a filled screen's rows: tall enough for their labels, or all
            if screen.fill:  # the height the screen has
                cell_h = max(cell, tick * LESSON_LINE)
                if screen.height:
                    cell_h = (screen.height - top - bottom) / n_rows
            # On a projector a map takes the width (its height is held to one screen): cells
            # wider than tall, so a layer x head map is not a strip and numbers are legible.
            # On a phone a grid of few columns (2 layers x 4 heads: 136 px) widens to
            # PHONE_PLOT_PX, as every plot there.
            if screen.present:
                cell_w = max(cell, min(across, PRESENT_CELL_MAX_W))
            elif width < NARROW_PX:
                cell_w = max(cell, min(across, PHONE_PLOT_PX / n_cols))
            else:
                cell_w = cell
            # wide enough for the longest number where the screen has the room
            cell_w = max(cell_w, min(across, _needed_cell_width(heatmaps, screen.present)))
            if meta.get("labels_across"):  # and for its column labels, read across
                label_w = GLYPH_WIDTH * font * _longest(x_ticks) + font
                cell_w = max(cell_w, min(across, label_w))
                if cell_w >= label_w and not labels_on_top:  # one line of labels, not upright
                    bottom -= int(x_labels_px - font * 2.5
                                  - (font * 1.8 if layout.xaxis.title.text else 0))
                    x_labels_px = font * 2.5 + (font * 1.8 if layout.xaxis.title.text else 0)
            if cell_w > cell or cell_h != cell:  # a builder's square cells would undo it
                layout.xaxis.scaleanchor = layout.yaxis.scaleanchor = None
            layout.height = int(cell_h * n_rows + top + bottom)
            layout.margin = dict(l=left, r=right, t=top, b=bottom)
            natural = int(cell_w * n_cols + left + right)
            if natural < width - 4:
                layout.width = natural
                # the title wraps to the map's width, not the screen's
                grow = _rewrap_title(layout, title, natural, font) - title_px
                if grow > 0:
                    top += grow
                    layout.height += grow
                    layout.margin.t = top
            plot_w, plot_h = cell_w * n_cols, cell_h * n_rows
        else:
            _grow_top(layout, title_px)
            if screen.fill and screen.height:  # all the height the screen has, no more
                layout.height = screen.height - (BAR_BELOW_PX if bar_below else 0)
                layout.margin.update(l=left, b=bottom - (BAR_BELOW_PX if bar_below else 0),
                                     t=title_px + (20 if layout.annotations else 0))
                if bar_below:
                    layout.margin.r = right
                for name in layout:  # maps side by side: cells as tall as the room
                    if name.startswith("yaxis") and layout[name].scaleanchor:
                        layout[name].scaleanchor = None
            plot_w = width - left - right
            plot_h = (layout.height or 450) - (layout.margin.t or 0) - (margin.b or 0)
            if bar_below:
                layout.height = (layout.height or 450) + BAR_BELOW_PX
                layout.margin.update(l=left, r=right, b=bottom)
        if bar_below:  # in plot-height units, below the tick labels
            below = (0 if labels_on_top else x_labels_px) + 8
            for trace in heatmaps:
                if trace.colorbar.orientation == "h":
                    trace.colorbar.y = -below / max(plot_h, 1)
        if rows and cols:
            for trace in heatmaps:
                _cell_values(trace, plot_w / cols, plot_h / rows, screen.present)
            numbers = meta.get("tick_numbers")
            line = LESSON_LINE if screen.fill else 1.35
            # upright labels stand side by side with no leading
            _thin(layout.xaxis, plot_w / cols, cols, tick, numbers, 1.0 if screen.fill else line)
            _thin(layout.yaxis, plot_h / rows, rows, tick, numbers, line)
            # token labels wider than their column stand upright rather than slanted
            # (slanted ones still overlap their neighbours' boxes)
            if GLYPH_WIDTH * tick * _longest(layout.xaxis.ticktext or ()) > plot_w / cols:
                layout.xaxis.tickangle = -90
    else:
        _grow_top(layout, title_px)
        if screen.fill and screen.height:  # a lesson's chart: the height its screen has
            layout.height = screen.height
        if screen.fill and any(t.type == "bar" and t.orientation == "h" for t in fig.data):
            layout.yaxis.update(tickmode="linear", dtick=1)  # every bar keeps its name
    _narrow_extras(fig, width, font, thin_x=not heatmaps, fill=screen.fill)
    if screen.present and screen.height and layout.height and not cells and not screen.fill:
        layout.height = int(min(layout.height * 1.2, screen.height - 40))
    # The wrapped title hangs from the top of the figure into the margin made for it.
    # Plotly anchors a title of several lines by its first line alone, whose glyphs then
    # reach about a third of the font size above the anchor.
    height = layout.height or 450
    size = layout.title.font.size or font + 4
    layout.title.update(yref="container", yanchor="top", y=1 - (8 + 0.4 * size) / height)
    return fig
