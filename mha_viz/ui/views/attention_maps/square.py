"""The Attention maps page for a square set of maps (a model's self-attention, or one stack's
of an encoder-decoder): its context (``Maps``: the trace, the trace as shown, the head or
layer mean chosen and how it is drawn) and its sections: every head at a glance, one head
(a short text whole, beside its lines; a long one as an overview and a window at full
resolution), why it attends there, and, drawn when opened, the first token both ways, the
aggregates over heads and layers and the heads that link two tokens."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np
import streamlit as st

from .... import analysis, plots, ui
from ....maps.downsample import block_factor
from ....server import export
from ...words import attention_maps as words
from . import sizes


@dataclass(frozen=True)
class Maps:
    """What every section reads: the trace, the trace as shown (hidden tokens removed, rows
    renormalized), the head or the layer's mean chosen, and how a map is drawn."""
    selection: ui.Selection
    trace: object
    shown: object
    keep: np.ndarray | None
    layer: int
    head: int
    layer_mean: bool
    grey: bool  # the causal mask drawn grey
    outline: bool  # a sentence pair's blocks outlined

    @property
    def moves(self) -> bool:
        return self.trace.value_weighted

    @cached_property
    def kept(self) -> np.ndarray:
        return analysis.kept_positions(self.shown)

    @cached_property
    def labels(self) -> list[str]:
        return list(self.shown.display_tokens)

    @property
    def n_shown(self) -> int:
        return self.shown.n_tokens

    @property
    def factor(self) -> int:
        """> 1: a head shows as the block means of the whole text, and a window at full
        resolution."""
        return block_factor(self.n_shown, sizes.HEATMAP_MAX)

    @property
    def name(self) -> str:
        return words.shown_name(self.layer, self.head, self.layer_mean)

    @property
    def value_name(self) -> str:
        return words.value_name(self.moves)

    @property
    def pair_boundary(self) -> int | None:
        return sizes.pair_boundary(self.shown.segment_ids, self.outline)

    @property
    def stem(self) -> str:
        return self.selection.file_stem

    @cached_property
    def marked(self) -> tuple[int, int] | None:
        """The cell the why section below explains, outlined on the map (once it is open)."""
        return None if self.layer_mean else ui.marked_cell(
            self.trace.n_tokens, ui.opening(self.trace)[:2], positions=self.kept)

    def pick(self, chart: str):
        """A click on a cell of one head's map asks why it attends there (ui.why)."""
        return partial(ui.pick_cell, chart, query_name="wq", key_name="wk",
                       positions=[int(p) for p in self.kept])


def maps_of(selection: ui.Selection, weights: str) -> Maps:
    """The trace and the choices drawn above the sections: the head (or its layer's mean),
    the tokens hidden, the causal mask and a pair's blocks."""
    trace = ui.get_trace(selection, weights=weights)
    ui.trace_notes(trace)
    ui.long_input_note(trace)
    pick, options = st.columns([2, 3])
    with pick:
        # opens on the head that links the text's focus token ('it') most strongly
        layer, head = ui.head_picker(trace, default=ui.opening(trace)[2:])
        layer_mean = ui.synced(st.toggle, "lmean", "Mean of the layer's heads", False,
                               help=words.LAYER_MEAN_HELP)
    with options:
        hide_col, toggle_col = st.columns(2)
        keep = ui.hide_special_toggle(trace, hide_col)
        grey = outline = False
        with toggle_col:
            if trace.causal:
                grey = ui.synced(st.toggle, "grey", "Grey out the causal mask", True,
                                 help="A causal model cannot look at later tokens: those cells "
                                      "are drawn grey rather than as weight 0.")
            if trace.is_pair:
                outline = ui.synced(st.toggle, "blocks", "Outline sentence-pair blocks", True,
                                    help="A→A, A→B, B→A and B→B: attention within and across "
                                         "the two sentences.")
    # the trace as shown (hidden tokens removed, rows renormalized), read like any trace
    shown = ui.shown_trace(selection, trace, keep)
    ui.hidden_note(trace, keep)
    maps = Maps(selection, trace, shown, keep, layer, head, layer_mean, grey, outline)
    long_caption = sizes.long_input_caption(maps.n_shown, maps.factor)
    if long_caption:
        st.caption(long_caption)
    return maps


def grid_section(m: Maps) -> None:
    """Every head at a glance: one thumbnail per head (a projector's few layers at a time)."""
    trace = m.trace
    st.subheader("All heads at a glance (the model view)")
    st.caption(words.GRID)
    sharing = ui.kv_sharing_note(trace)
    if sharing:
        st.caption(sharing)
    first, stop = ui.layer_window(trace.n_layer, m.layer)
    screen = ui.figure_screen()
    # a projector shows a few layers at a time, with large thumbnails
    cell_px = sizes.grid_cell_px(trace.n_head, screen and screen.width,
                                 windowed=(first, stop) != (0, trace.n_layer))
    # every head's map block-averaged once per input, in one pass over the rows (a long
    # input's maps are computed for it, so that waits for a click)
    texts = sizes.thumbnail_texts(trace.n_layer, trace.n_head, m.n_shown)
    thumbs = ui.run_or_wait(analysis.thumbnails, m.shown, label=texts["label"],
                            auto=ui.one_pass_is_quick(m.shown), button=texts["button"],
                            max_size=sizes.GRID_THUMB)
    if thumbs is None:
        st.caption(texts["waiting"])
        return
    ui.show_built(plots.model_view_grid, thumbs[0][first:stop], thumb_size=sizes.GRID_THUMB,
                  selected=(m.layer, m.head), cell_px=cell_px, title="All heads",
                  first_layer=first, from_tokens=m.n_shown, key="grid",
                  on_select=partial(sizes.pick_from_grid, trace.n_head, first),
                  alt="Grid of every head's attention map")


def one_head_section(m: Maps) -> None:
    """One head (or its layer's mean): a short text whole, beside its lines; a long one as
    the block means of the whole text and a window at full resolution."""
    with ui.scroll_anchor(sizes.ONE_HEAD):  # a thumbnail picked: its map comes in view
        st.subheader(words.head_subheader(m.layer, m.head, m.trace.n_head, m.layer_mean,
                                          m.factor > 1))
    sharing = None if m.layer_mean else ui.kv_sharing_note(m.trace, m.head)
    if sharing:
        st.caption(sharing)
    if m.factor == 1 and not m.layer_mean:
        the_map = m.shown.head_map(m.layer, m.head)
    else:  # block means of the whole text (factor 1: the layer's head mean itself)
        with st.spinner(f"Computing the map of {m.name}…"):
            the_map = ui.memo(m.shown.block_mean, layer=m.layer,
                              head=None if m.layer_mean else m.head, factor=m.factor)
    if m.factor > 1:
        overview_and_window(m, the_map)
    else:
        map_and_lines(m, the_map)


def line_view(m: Maps, which: str, start: int, stop: int, **show) -> None:
    """The layer's rows from start to stop as lines between tokens (which: "one" head's or
    "all" of the layer's), shown (show: show_figure's key, alt, share)."""
    ui.show_built(plots.line_view, m.shown.rows(m.layer, start, stop)[:, :, start:stop],
                  m.labels[start:stop], heads=None if which == "all" else [m.head],
                  layer=m.layer, offset=start, title=f"Layer {m.layer}: query → key",
                  value_name=m.value_name, **show)


def map_and_lines(m: Maps, the_map) -> None:
    """A short text: the map whole, its CSV, and beside it the same map as lines."""
    heat_col, line_col = sizes.side_by_side(m.n_shown)
    with heat_col:
        st.caption(words.map_caption(m.moves, m.layer_mean, m.n_shown))
        ui.show_built(
            plots.head_heatmap, the_map, m.labels, title=words.map_title(m.name, m.moves),
            causal=m.shown.causal, grey_causal_mask=m.grey, pair_boundary=m.pair_boundary,
            value_name=m.value_name, pickable=not m.layer_mean, marked=m.marked,
            **sizes.heatmap_size(m.n_shown), key="head", alt=f"Attention map of {m.name}",
            share=ui.column_share(0.6), on_select=None if m.layer_mean else m.pick("head"))
        positions = export.position_labels(m.labels, m.kept)
        ui.download_csv(partial(export.matrix_csv, the_map, positions, positions),
                        export.safe_filename(m.stem, m.name, suffix=".csv"),
                        f"{m.name} as CSV", key="dl_head",
                        help="Every weight of this map (row = query, column = key).")
    with line_col:
        st.caption(words.lines_caption(m.moves))
        which = sizes.lines_for(m.name, m.layer, m.layer_mean)
        start = sizes.line_view_start(m.n_shown)
        # laid out for its column like every figure (a fixed 600 px overflowed a phone,
        # and a 40 % column of a laptop's screen)
        line_view(m, which, start, min(m.n_shown, start + sizes.LINE_WINDOW), key="lines",
                  alt=f"Line view of layer {m.layer}", share=ui.column_share(0.4))


def overview_and_window(m: Maps, the_map) -> None:
    """A long text: the block means of the whole text with the window outlined, the window
    at full resolution and its CSV, then the window as lines."""
    start, stop = sizes.window_controls(m.n_shown)
    heat = plots.head_heatmap(the_map, m.labels, title=f"{m.name}: overview",
                              causal=m.shown.causal, grey_causal_mask=m.grey,
                              block_factor=m.factor, highlight=(start, stop), max_ticks=24,
                              height=760, value_name=m.value_name)
    ui.show_figure(heat, key="head", alt=f"Overview of {m.name}", share=1.0)
    st.caption(f"Each cell is the mean weight of a {m.factor}×{m.factor} block of query and "
               f"key tokens; the red square is the window below.")
    st.subheader(f"{m.name}: tokens {start}–{stop - 1} at full resolution")
    rows = (analysis.head_mean(m.shown, layer=m.layer, start=start, stop=stop) if m.layer_mean
            else m.shown.rows(m.layer, start, stop, [m.head])[0])  # [size, T]: every key
    window = rows[:, start:stop]
    fig = plots.head_heatmap(window, m.labels[start:stop],
                             title=words.map_title(m.name, m.moves), causal=m.shown.causal,
                             grey_causal_mask=m.grey, offset=start, max_ticks=32,
                             height=None if stop - start <= 64 else 720,
                             value_name=m.value_name, pickable=not m.layer_mean,
                             marked=m.marked)
    ui.show_figure(fig, key="window", alt=f"Window of {m.name}", share=1.0,
                   on_select=None if m.layer_mean else m.pick("window"))
    st.caption(sizes.window_caption(start, stop, *analysis.window_mass(rows, start, stop)))
    positions = export.position_labels(m.labels[start:stop], m.kept[start:stop])
    ui.download_csv(partial(export.matrix_csv, window, positions, positions),
                    export.safe_filename(m.stem, m.name, f"{start}-{stop - 1}", suffix=".csv"),
                    "This window as CSV", key="dl_window")
    st.subheader("The window as lines between tokens")
    which = sizes.lines_for(m.name, m.layer, m.layer_mean)
    line_stop = min(stop, start + sizes.LINE_WINDOW)
    line_view(m, which, start, line_stop, key="lines", alt=f"Line view of layer {m.layer}",
              share=1.0)
    st.caption(sizes.window_lines_caption(line_stop - start, m.layer, m.layer_mean))


def why_section(m: Maps) -> None:
    """Why the head attends where it does: a clicked cell, by source (ui.why)."""
    if not m.layer_mean:
        ui.why_section(m.selection, m.trace, m.layer, m.head,
                       default=ui.opening(m.trace)[:2])


def sink(m: Maps) -> None:
    """The first token both ways, side by side (Kobayashi et al. 2020)."""
    shares = ui.memo(analysis.sink_shares, ui.get_trace(m.selection),
                     ui.get_trace(m.selection, weights="value"))
    st.markdown(words.sink_text(m.trace.display_tokens[0], shares))
    for share, place, title, key in zip(
            (shares.of_weights, shares.of_moved), ui.figure_columns(2), words.SINK_TITLES,
            ("sink_weights", "sink_moved")):
        with place:
            ui.show_figure(plots.layer_head_heatmap(
                share, title, "share", colorscale="Blues", zmin=0.0, zmax=1.0),
                key=key, alt=title, share=ui.column_share(0.5))


def sink_section(m: Maps) -> None:
    """Where the page can trace what heads move (a model of its own whose maps can be
    value-weighted): the first token both ways, open when the maps show what moves."""
    model = m.selection.model
    if m.selection.uploaded is None and model is not None and "value" in model.map_weights:
        ui.drawn_when_opened(words.SINK_SECTION, "sink", partial(sink, m), expanded=m.moves)


def aggregates(m: Maps) -> None:
    """The layer's head mean or the attention rollout to it, computed on every token."""
    trace, keep = m.trace, m.keep
    kind = ui.synced(st.radio, "agg", "Show", "mean", options=["mean", "rollout"],
                     format_func=words.aggregate_labels(m.layer).get, horizontal=True)
    # computed on every token, then the hidden ones removed: [T, T] floats per layer
    refused = ui.too_long_for(words.aggregate_what(kind, trace.n_layer), trace.n_tokens,
                              analysis.aggregate_bytes_per_token(kind, trace.n_layer))
    if refused:
        st.info(refused)
        return
    agg_col, text_col = sizes.side_by_side(m.n_shown)
    if kind == "mean":
        full = ui.memo(analysis.head_mean, trace, large=True, layer=m.layer)
    else:
        full = ui.memo(analysis.rollout, trace, large=True, return_all=True)[m.layer]
    agg_name, explanation = words.aggregate_text(kind, m.layer, trace.n_layer,
                                                 hidden=keep is not None)
    if keep is not None:
        full = ui.memo(analysis.drop_positions, full, keep_mask=keep)[0]
    with agg_col:
        agg = plots.head_heatmap(full, m.labels, title=agg_name, causal=trace.causal,
                                 grey_causal_mask=m.grey, pair_boundary=m.pair_boundary,
                                 **sizes.heatmap_size(m.n_shown))
        ui.show_figure(agg, key="aggregate", alt=agg_name, share=ui.column_share(0.6))
    with text_col:
        st.markdown(explanation)
        positions = export.position_labels(m.labels, m.kept)
        ui.download_csv(partial(export.matrix_csv, full, positions, positions),
                        export.safe_filename(m.stem, agg_name, suffix=".csv"),
                        f"{agg_name} as CSV", key="dl_agg")


def token_pair(m: Maps) -> None:
    """The weight from one token to another in every head."""
    st.caption(words.TOKEN_PAIR)
    # 'it' and the token it reads most (or the last token and its): ui.opening of the trace
    # as shown, the very result the head picker read when nothing is hidden
    query, key_pos = sizes.pick_token_pair(m.labels, ui.opening(m.shown)[:2])
    sizes.show_link(ui.memo(m.shown.weights_between, query, key_pos), m.labels, query, key_pos,
                    m.trace.causal, " (rows renormalized over the shown tokens)"
                    if m.keep is not None else "", m.stem)


def downloads_section(m: Maps) -> None:
    st.divider()
    ui.download_trace(m.selection, m.trace)
    ui.caveat()
