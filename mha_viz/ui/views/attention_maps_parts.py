"""The Attention maps page's parts (views/attention_maps.py reads them): its size policies for
long inputs, the captions and titles it writes from numbers, the grid's click, and the
token-pair and window pickers."""

from __future__ import annotations

from functools import partial

import numpy as np
import streamlit as st

from ... import analysis, plots
from ...server import export
from ..gestures import ask_scroll
from ..messages import callback
from ..settings import md_escape
from ..output import GRID_CELL_PX_PRESENTING, download_csv, figure_columns, show_figure
from ..state import set_value, synced

HEATMAP_MAX = 256  # larger maps are block-averaged for display (the CSV keeps every cell)
GRID_THUMB = 32  # thumbnail size of each head in the grid
LINE_WINDOW = 40  # the line view draws at most this many consecutive tokens
WINDOW_SIZES = [64, 128, 256]  # full-resolution rows and columns of a long input's window
LONG_INPUT = 40  # more tokens: fewer axis labels and a height that fits the square plot


@callback
def pick_from_grid(n_head: int, first_layer: int = 0) -> None:
    """Grid click -> the shared layer/head choice, and the head's map brought into view."""
    state = st.session_state.get("grid") or {}
    points = (state.get("selection") or {}).get("points") or []
    for point in points:
        picked = plots.grid_point_to_head(point, n_head, first_layer)
        if picked is not None:
            set_value("layer", picked[0])
            set_value("head", picked[1])
            ask_scroll(ONE_HEAD)
            return


ONE_HEAD = "one_head"  # where the page scrolls after a thumbnail is picked
GRID_MARGIN_PX = 70  # the grid's side margins: its layer labels and the right edge


def grid_cell_px(n_head: int, width: int | None = None, windowed: bool = False) -> int:
    """A grid thumbnail's size on screen: few heads, bigger thumbnails (40 to 110 px; a
    projector's window of a few layers, GRID_CELL_PX_PRESENTING), and never wider than the
    screen gives each head (the figure's height follows its thumbnails: a phone's 30 x 9
    grid was 2,540 px tall for 1,000 px of thumbnails)."""
    cell = GRID_CELL_PX_PRESENTING if windowed else min(110, max(40, 720 // n_head))
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
    return figure_columns([3, 2], gap="medium")


def thumbnail_texts(n_layer: int, n_head: int, n_tokens: int) -> dict[str, str]:
    """The grid's texts while its thumbnails are computed, on the button that asks for them
    and while it waits for that button."""
    n_maps = n_layer * n_head
    return {"label": f"Drawing the {n_maps} heads' thumbnails over {n_tokens:,} tokens…",
            "button": f"Draw every head's thumbnail ({n_maps} maps of {n_tokens:,} tokens)",
            "waiting": f"The grid reads every head's whole map: over {n_tokens:,} tokens that "
                       f"is a pass of its own, so it waits for the button above."}


# ------------------------------------------------------------------ weights or what moves

SINK_SECTION = "The first token both ways: much weight, little moved"
SINK_TITLES = ("First token's share of the weights", "First token's share of what moves")


def value_name(moves: bool) -> str:
    """What a cell of a map holds: a weight, or a share of what the head moves."""
    return "share moved" if moves else "weight"


def map_title(name: str, moves: bool) -> str:
    return f"{name}: what moves from each key" if moves else f"{name}: who attends to whom"


def map_caption(moves: bool, layer_mean: bool, n_tokens: int) -> str:
    """How to read one head's map, for a desk and a touch screen alike (no hovering), and
    what a click on a cell does (a map drawn cell by cell up to plots.can_pick's size)."""
    reading = ("Row = query (the token that receives), column = key (the token sending): "
               "each row is what the head moves into the query from each key, the weight "
               "times the size of the key's vector, as shares that sum to 1."
               if moves else
               "Row = query (the token that reads), column = key (the token read from).")
    if layer_mean:
        return reading + " Click a cell for its value."
    if plots.can_pick(n_tokens, n_tokens):
        return reading + " Click a cell for its value and why the head attends there."
    return reading + (" Click a cell for its value; pick a query and a key in the section "
                      "on why below to see why the head attends there.")


def lines_caption(moves: bool) -> str:
    return ("The same shares as lines from each query (left) to each key (right); thicker "
            "and darker = more moved." if moves else
            "The same weights as lines from each query (left) to each key (right); thicker "
            "and darker = more attention.")


def moves_can_be_shown(selection) -> bool:
    """Whether the page can trace what heads move: a model of its own (not a saved trace),
    not an encoder-decoder."""
    model = selection.model
    return (selection.uploaded is None and model is not None
            and not model.info.encoder_decoder)


def sink_text(first_token: str, shares) -> str:
    """The first token's share of the weights and of what moves (analysis.sink_shares), and
    what the difference means on this model and text."""
    took, sent = shares.weights_mean, shares.moved_mean
    said = (f"Over every head and query, the first token ('{md_escape(first_token)}') takes "
            f"**{took:.2f}** of the attention weights and **{sent:.2f}** of what the heads "
            f"move. ")
    if sent < 0.8 * took:
        return said + ("A large weight is not a large message: heads park their attention on "
                       "the first token when nothing else fits, and it sends them back small "
                       "vectors, so little of it reaches the queries (Kobayashi et al. 2020, "
                       "*Attention is Not Only a Weight*). Read a map of weights as where a "
                       "head looks, the shares of what moves as what it carries.")
    if sent > 1.25 * took:
        return said + ("Here the first token sends larger vectors than the others: it "
                       "carries more than its weights say.")
    return said + ("Here the two agree: on this model and text the first token is no sink "
                   "that takes weight and sends little (Kobayashi et al. 2020 found such "
                   "sinks in BERT and GPT-2).")


def shown_name(layer: int, head: int, layer_mean: bool) -> str:
    """The name of what the page shows: a head ('L3.H7') or its layer's head mean."""
    return f"L{layer} head mean" if layer_mean else analysis.head_name(layer, head)


def head_subheader(layer: int, head: int, n_head: int, layer_mean: bool,
                   whole_text: bool) -> str:
    name = shown_name(layer, head, layer_mean)
    return ((f"The mean of layer {layer}'s {n_head} heads" if layer_mean
             else f"One head: {name} (layer {layer}, head {head})")
            + (": the whole text" if whole_text else ""))


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


def aggregate_labels(layer: int) -> dict[str, str]:
    """The two aggregates' names in the choice between them."""
    through = f"layer {layer}" if layer == 0 else f"layers 0–{layer}"
    return {"mean": f"Head mean of layer {layer}",
            "rollout": f"Attention rollout through {through}"}


def aggregate_what(kind: str, n_layer: int) -> str:
    """What an aggregate holds, for the message that refuses a too long input."""
    if kind == "mean":
        return "The head mean of a layer"
    return (f"Attention rollout (every layer's head mean and their products, {n_layer} "
            f"whole maps each)")


def aggregate_text(kind: str, layer: int, n_layer: int, hidden: bool) -> tuple[str, str]:
    """(the aggregate's name, what it is) for the head mean or the rollout to layer."""
    if kind == "mean":
        name = f"L{layer} head mean"
        explanation = ("The average of the layer's heads: what the layer as a whole reads "
                       "from. Rows still sum to 1.")
    else:
        name = f"rollout to L{layer}"
        explanation = ("Attention rollout (Abnar & Zuidema 2020): per layer, take the head "
                       "mean plus the residual connection (0.5·A + 0.5·I, rows renormalized) "
                       "and multiply the layers together. Row i estimates how much of token "
                       "i at "
                       f"the output of layer {layer} comes from each input token. Pick the "
                       f"last layer (L{n_layer - 1}) for the full rollout.")
    if hidden:
        explanation += (" Computed on every token; then the hidden tokens were removed and "
                        "rows renormalized.")
    return name, explanation


def strongest_caption(link: np.ndarray, note: str, top: int = 3) -> str:
    """The heads that weigh a query-key link most, with their weights."""
    return "Strongest: " + ", ".join(
        f"{analysis.head_name(layer, head)} {link[layer, head]:.0%}"
        for layer, head in analysis.rank_heads(link)[:top]) + note + "."


# ------------------------------------------------------------------ widgets


def pick_token_pair(labels: list[str], default: tuple[int, int]) -> tuple[int, int]:
    """Query and key selectors (kept in the URL as q and k)."""
    n = len(labels)
    positions = list(range(n))
    q_col, k_col = st.columns(2)
    with q_col:
        query = synced(st.selectbox, "q", "Query token (reads)", int(default[0]),
                       options=positions, valid=lambda i: 0 <= int(i) < n,
                       format_func=lambda i: f"{i}: {labels[i]}")
    with k_col:
        key_pos = synced(st.selectbox, "k", "Key token (is read)", int(default[1]),
                         options=positions, valid=lambda i: 0 <= int(i) < n,
                         format_func=lambda i: f"{i}: {labels[i]}")
    return query, key_pos


def show_link(link: np.ndarray, labels: list[str], query: int, key_pos: int, causal: bool,
              note: str, stem: str) -> None:
    """The weight from query to key in every head [L, H], its strongest heads and a CSV."""
    if causal and key_pos > query:
        st.info("In a causal model a token cannot read a later one: every weight is 0. Pick a "
                "key at or before the query.")
    fig = plots.layer_head_heatmap(
        link, f"Weight from '{labels[query]}' to '{labels[key_pos]}' in every head", "weight",
        fmt=".2f", colorscale="Blues", zmin=0.0, zmax=1.0)
    plots.columns_at_bottom(fig)
    show_figure(fig, key="link", alt="Weight between two tokens in every head")
    st.caption(strongest_caption(link, note))
    download_csv(partial(export.layer_head_csv, link, "weight"),
                 export.safe_filename(stem, "link", suffix=".csv"),
                 "These weights as CSV", key="dl_link")


def window_controls(n: int) -> tuple[int, int]:
    """A long input's window (kept in the URL): its size and where it starts -> (start, stop)."""
    size = synced(st.radio, "wsize", "Window", 128, options=WINDOW_SIZES,
                  format_func=lambda s: f"{s} tokens", horizontal=True,
                  valid=lambda s: int(s) in WINDOW_SIZES)
    size = min(int(size), n)
    start = synced(st.slider, "window", "Window starts at token", max(0, n - size),
                   min_value=0, max_value=n - size, step=1,
                   valid=lambda v: 0 <= int(v) <= n - size,
                   help="Drag to move the window along the text; the map above outlines it.")
    return start, start + size


def lines_for(name: str, layer: int, layer_mean: bool) -> str:
    """Lines of one head or of every head in its layer (the mean is not a head: all)."""
    if layer_mean:
        return "all"
    return synced(st.radio, "lines", "Lines for", "one", options=["one", "all"],
                  format_func={"one": f"head {name} only",
                               "all": f"all heads of layer {layer}"}.get, horizontal=True)


def line_view_start(n_tokens: int) -> int:
    """The first token of a short input's line view: a slider when it has more tokens than
    the view draws, with what the view leaves out."""
    if n_tokens <= LINE_WINDOW:
        return 0
    start = synced(st.slider, "from", "First token in the line view", 0,
                   min_value=0, max_value=n_tokens - LINE_WINDOW,
                   valid=lambda v: 0 <= v <= n_tokens - LINE_WINDOW)
    st.caption(f"Long input: the line view shows {LINE_WINDOW} tokens at a time "
               f"(positions {start}–{start + LINE_WINDOW - 1}); lines to keys "
               f"outside the window are not drawn.")
    return start
