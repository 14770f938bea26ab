"""The Attention maps page's sizes: how large a map, the grid's thumbnails and a long input's
window are drawn, and the captions that state those sizes; its widgets that pick a window,
the line view's start and lines, a pair of tokens, and the grid's click."""

from __future__ import annotations

from functools import partial

import numpy as np
import streamlit as st

from .... import plots, ui
from ....server import export
from ...words import attention_maps as words

HEATMAP_MAX = 256  # larger maps are block-averaged for display (the CSV keeps every cell)
GRID_THUMB = 32  # thumbnail size of each head in the grid
LINE_WINDOW = 40  # the line view draws at most this many consecutive tokens
WINDOW_SIZES = [64, 128, 256]  # full-resolution rows and columns of a long input's window
LONG_INPUT = 40  # more tokens: fewer axis labels and a height that fits the square plot
ONE_HEAD = "one_head"  # where the page scrolls after a thumbnail is picked
GRID_MARGIN_PX = 70  # the grid's side margins: its layer labels and the right edge


@ui.callback
def pick_from_grid(n_head: int, first_layer: int = 0) -> None:
    """Grid click -> the shared layer/head choice, and the head's map brought into view."""
    state = st.session_state.get("grid") or {}
    points = (state.get("selection") or {}).get("points") or []
    for point in points:
        picked = plots.grid_point_to_head(point, n_head, first_layer)
        if picked is not None:
            ui.set_value("layer", picked[0])
            ui.set_value("head", picked[1])
            ui.ask_scroll(ONE_HEAD)
            return


def grid_cell_px(n_head: int, width: int | None = None, windowed: bool = False) -> int:
    """A grid thumbnail's size on screen: few heads, bigger thumbnails (40 to 110 px; a
    projector's window of a few layers, GRID_CELL_PX_PRESENTING), and never wider than the
    screen gives each head (the figure's height follows its thumbnails: a phone's 30 x 9
    grid was 2,540 px tall for 1,000 px of thumbnails)."""
    cell = ui.GRID_CELL_PX_PRESENTING if windowed else min(110, max(40, 720 // n_head))
    if width:
        cell = min(cell, (width - GRID_MARGIN_PX) / n_head)
    return int(max(cell, 8))


def pair_boundary(segment_ids: np.ndarray, outline: bool) -> int | None:
    """The first shown token of sentence B, where the pair's blocks are outlined; None when
    they are not (no outline asked for, or one sentence only)."""
    if outline and segment_ids.any() and not segment_ids.all():
        return int(segment_ids.argmax())
    return None


def is_long(n_tokens: int) -> bool:
    return n_tokens > LONG_INPUT


def long_input_caption(n_tokens: int, factor: int) -> str | None:
    """What a long input's views draw differently (None: a short input, drawn whole)."""
    if factor > 1:
        return (f"Long input ({n_tokens:,} tokens): heatmaps are block-averaged to at most "
                f"{HEATMAP_MAX}×{HEATMAP_MAX} cells and axis labels thinned; a window you "
                f"move along the text shows {WINDOW_SIZES[0]}-{WINDOW_SIZES[-1]} tokens at "
                f"full resolution, and the line view shows {LINE_WINDOW} tokens at a time; "
                f"the grid uses {GRID_THUMB}×{GRID_THUMB} thumbnails.")
    if is_long(n_tokens):
        return (f"Long input ({n_tokens} tokens): only some axis labels are shown; click a "
                f"cell for its tokens. The CSV downloads keep every cell.")
    return None


def heatmap_size(n_tokens: int) -> dict:
    """head_heatmap's size options for a map of n_tokens: fewer ticks and a fixed height when
    long, its own height when short."""
    long_input = is_long(n_tokens)
    return {"max_size": HEATMAP_MAX, "max_ticks": 24 if long_input else 40,
            "height": 760 if long_input else (None if n_tokens <= 24 else 720)}


def side_by_side(n_tokens: int):
    """Figure beside its controls; a long input's map gets the whole width instead."""
    if is_long(n_tokens):
        return st.container(), st.container()
    return ui.figure_columns([3, 2], gap="medium")


def thumbnail_texts(n_layer: int, n_head: int, n_tokens: int) -> dict[str, str]:
    """The grid's texts while its thumbnails are computed, on the button that asks for them
    and while it waits for that button."""
    n_maps = n_layer * n_head
    return {"label": f"Drawing the {n_maps} heads' thumbnails over {n_tokens:,} tokens…",
            "button": f"Draw every head's thumbnail ({n_maps} maps of {n_tokens:,} tokens)",
            "waiting": f"The grid reads every head's whole map: over {n_tokens:,} tokens that "
                       f"is a pass of its own, so it waits for the button above."}


def window_caption(start: int, stop: int, inside: float, first_token: float) -> str:
    """How much of a window's attention stays inside it (and goes to the first token), and
    what a click on one of its cells does at its size (a map is drawn cell by cell, and so
    can be clicked, up to plots.can_pick's size)."""
    size = stop - start
    said = (f"These {size} queries give {inside:.0%} of their attention to keys inside the "
            f"window" + (f" and {first_token:.0%} to the first token shown" if start > 0
                         else "") + ". Rows are queries, columns keys; ")
    if plots.can_pick(size, size):
        return said + ("point at (or tap) a cell for its weight, click it for why the head "
                       "attends there (the section below opens on it).")
    return said + (f"point at (or tap) a cell for its weight. A click asks why the head "
                   f"attends there in a window of {WINDOW_SIZES[0]} tokens only (drawn cell "
                   f"by cell, so a cell can be picked; {size} tokens are too many): choose "
                   f"{WINDOW_SIZES[0]} tokens above, or pick a query and a key in the "
                   f"section on why below.")


def window_lines_caption(n_drawn: int, layer: int, layer_mean: bool) -> str:
    return (f"The first {n_drawn} tokens of the window (the line view shows {LINE_WINDOW} "
            f"tokens at a time)" + (f", every head of layer {layer}" if layer_mean else "")
            + "; lines to keys outside it are not drawn.")


# ------------------------------------------------------------------ widgets


def window_controls(n: int) -> tuple[int, int]:
    """A long input's window (kept in the URL): its size and where it starts -> (start, stop)."""
    size = ui.synced(st.radio, "wsize", "Window", 128, options=WINDOW_SIZES,
                     format_func=lambda s: f"{s} tokens", horizontal=True,
                     valid=lambda s: int(s) in WINDOW_SIZES)
    size = min(int(size), n)
    start = ui.synced(st.slider, "window", "Window starts at token", max(0, n - size),
                      min_value=0, max_value=n - size, step=1,
                      valid=lambda v: 0 <= int(v) <= n - size,
                      help="Drag to move the window along the text; the map above outlines it.")
    return start, start + size


def lines_for(name: str, layer: int, layer_mean: bool) -> str:
    """Lines of one head or of every head in its layer (the mean is not a head: all)."""
    if layer_mean:
        return "all"
    return ui.synced(st.radio, "lines", "Lines for", "one", options=["one", "all"],
                     format_func={"one": f"head {name} only",
                                  "all": f"all heads of layer {layer}"}.get, horizontal=True)


def line_view_start(n_tokens: int) -> int:
    """The first token of a short input's line view: a slider when it has more tokens than
    the view draws, with what the view leaves out."""
    if n_tokens <= LINE_WINDOW:
        return 0
    start = ui.synced(st.slider, "from", "First token in the line view", 0,
                      min_value=0, max_value=n_tokens - LINE_WINDOW,
                      valid=lambda v: 0 <= v <= n_tokens - LINE_WINDOW)
    st.caption(f"Long input: the line view shows {LINE_WINDOW} tokens at a time "
               f"(positions {start}–{start + LINE_WINDOW - 1}); lines to keys "
               f"outside the window are not drawn.")
    return start


def pick_token_pair(labels: list[str], default: tuple[int, int]) -> tuple[int, int]:
    """Query and key selectors (kept in the URL as q and k)."""
    n = len(labels)
    positions = list(range(n))
    q_col, k_col = st.columns(2)
    with q_col:
        query = ui.synced(st.selectbox, "q", "Query token (reads)", int(default[0]),
                          options=positions, valid=lambda i: 0 <= int(i) < n,
                          format_func=lambda i: f"{i}: {labels[i]}")
    with k_col:
        key_pos = ui.synced(st.selectbox, "k", "Key token (is read)", int(default[1]),
                            options=positions, valid=lambda i: 0 <= int(i) < n,
                            format_func=lambda i: f"{i}: {labels[i]}")
    return query, key_pos


def show_link(link: np.ndarray, labels: list[str], query: int, key_pos: int, causal: bool,
              note: str, stem: str) -> None:
    """The weight from query to key in every head [L, H], its strongest heads and a CSV."""
    if causal and key_pos > query:
        st.info(words.CAUSAL_LINK)
    fig = plots.layer_head_heatmap(
        link, f"Weight from '{labels[query]}' to '{labels[key_pos]}' in every head", "weight",
        fmt=".2f", colorscale="Blues", zmin=0.0, zmax=1.0)
    plots.columns_at_bottom(fig)
    ui.show_figure(fig, key="link", alt="Weight between two tokens in every head")
    st.caption(words.strongest_caption(link, note))
    ui.download_csv(partial(export.layer_head_csv, link, "weight"),
                    export.safe_filename(stem, "link", suffix=".csv"),
                    "These weights as CSV", key="dl_link")
