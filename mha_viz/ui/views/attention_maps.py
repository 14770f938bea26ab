"""The Attention maps page's view: every head at a glance, one head as a heatmap with the
tokens on both axes and as lines between tokens (a long input: its overview and a window at
full resolution), and, drawn when opened, the head mean and attention rollout and the heads
that link two tokens; for an encoder-decoder's cross-attention, attention_maps_cross."""

from __future__ import annotations

from functools import partial

import streamlit as st

from ... import analysis, plots, ui
from ...maps.downsample import block_factor
from ...server import export
from . import attention_maps_cross as cross
from . import attention_maps_parts as parts

INTRO = ("Each head spreads every token's attention (a row, the *query*) over the tokens it can "
         "see (the columns, the *keys*). Pick a head in the grid or with the selectors, then "
         "read its map as a heatmap or as lines between tokens.")


def show() -> None:
    selection = ui.sidebar()
    with ui.guard():
        # the weights, or what heads move (Kobayashi et al. 2020): every figure below reads it
        weights = ui.weights_switch(selection.model)
        trace = ui.get_trace(selection, cross_view=partial(cross.cross_attention_view,
                                                           stem=selection.file_stem),
                             weights=weights)
        moves = trace.value_weighted
        ui.trace_notes(trace)
        ui.long_input_note(trace)

        pick, options = st.columns([2, 3])
        with pick:
            # opens on the head that links the text's focus token ('it') most strongly
            layer, head = ui.head_picker(trace, default=ui.opening(trace)[2:])
            layer_mean = ui.synced(st.toggle, "lmean", "Mean of the layer's heads", False,
                                   help="Show the average of every head in the layer (what the "
                                        "layer as a whole reads from) instead of one head.")
        with options:
            hide_col, toggle_col = st.columns(2)
            keep = ui.hide_special_toggle(trace, hide_col)
            grey = outline = False
            with toggle_col:
                if trace.causal:
                    grey = ui.synced(st.toggle, "grey", "Grey out the causal mask", True,
                                     help="A causal model cannot look at later tokens: those cells are "
                                          "drawn grey rather than as weight 0.")
                if trace.is_pair:
                    outline = ui.synced(st.toggle, "blocks", "Outline sentence-pair blocks", True,
                                        help="A→A, A→B, B→A and B→B: attention within and "
                                             "across the two sentences.")
        # the trace as shown (hidden tokens removed, rows renormalized), read like any trace
        shown = ui.shown_trace(selection, trace, keep)
        kept = analysis.kept_positions(shown)
        labels = list(shown.display_tokens)
        ui.hidden_note(trace, keep)
        n_shown = shown.n_tokens
        pair_boundary = parts.pair_boundary(shown.segment_ids, outline)
        # > 1: a head shows as the block means of the whole text, and a window at full resolution
        factor = block_factor(n_shown, parts.HEATMAP_MAX)
        long_caption = parts.long_input_caption(n_shown, factor)
        if long_caption:
            st.caption(long_caption)
        name = parts.shown_name(layer, head, layer_mean)
        shown_head = None if layer_mean else head  # None: the layer's head mean
        value_name = parts.value_name(moves)
        # a click on a cell of one head's map asks why it attends there (ui.why)
        pick = partial(ui.pick_cell, query_name="wq", key_name="wk",
                       positions=[int(p) for p in kept])
        stem = selection.file_stem
        heat_size = parts.heatmap_size(n_shown)
        # the cell the why section below explains, outlined on the map (once it is open)
        marked = None if layer_mean else ui.marked_cell(trace.n_tokens, ui.opening(trace)[:2],
                                                        positions=kept)

        # ---------------------------------------------------------------- all heads
        st.subheader("All heads at a glance (the model view)")
        st.caption("One thumbnail per head: rows are layers (L0 at the top), columns are heads. "
                   "Click a thumbnail to open that head below. Each thumbnail has its own colour "
                   "scale, so a sharp head and a broad head are both visible.")
        sharing = ui.kv_sharing_note(trace)
        if sharing:
            st.caption(sharing)
        first, stop = ui.layer_window(trace.n_layer, layer)
        screen = ui.figure_screen()
        # a projector shows a few layers at a time, with large thumbnails
        cell_px = parts.grid_cell_px(trace.n_head, screen and screen.width,
                                     windowed=(first, stop) != (0, trace.n_layer))
        # every head's map block-averaged once per input, in one pass over the rows (a long
        # input's maps are computed for it, so that waits for a click)
        thumb_texts = parts.thumbnail_texts(trace.n_layer, trace.n_head, n_shown)
        thumbs = ui.run_or_wait(analysis.thumbnails, shown,
                                label=thumb_texts["label"], auto=ui.one_pass_is_quick(shown),
                                button=thumb_texts["button"], max_size=parts.GRID_THUMB)
        if thumbs is None:
            st.caption(thumb_texts["waiting"])
        else:
            grid = plots.model_view_grid(thumbs[0][first:stop], thumb_size=parts.GRID_THUMB,
                                         selected=(layer, head), cell_px=cell_px, title="All heads",
                                         first_layer=first, from_tokens=n_shown)
            ui.show_figure(grid, key="grid",
                           on_select=lambda: parts.pick_from_grid(trace.n_head, first),
                           alt="Grid of every head's attention map")

        # ---------------------------------------------------------------- one head
        with ui.scroll_anchor(parts.ONE_HEAD):  # a thumbnail picked: its map comes in view
            st.subheader(parts.head_subheader(layer, head, trace.n_head, layer_mean,
                                              factor > 1))
        sharing = None if layer_mean else ui.kv_sharing_note(trace, head)
        if sharing:
            st.caption(sharing)
        if factor == 1 and not layer_mean:
            the_map = shown.head_map(layer, head)
        else:  # block means of the whole text (factor 1: the layer's head mean itself)
            with st.spinner(f"Computing the map of {name}…"):
                the_map = ui.memo(shown.block_mean, layer=layer, head=shown_head, factor=factor)
        if factor > 1:
            start, stop = parts.window_controls(n_shown)
            heat = plots.head_heatmap(the_map, labels, title=f"{name}: overview",
                                      causal=shown.causal, grey_causal_mask=grey,
                                      block_factor=factor, highlight=(start, stop), max_ticks=24,
                                      height=760, value_name=value_name)
            ui.show_figure(heat, key="head", alt=f"Overview of {name}", share=1.0)
            st.caption(f"Each cell is the mean weight of a {factor}×{factor} block of query and "
                       f"key tokens; the red square is the window below.")

            st.subheader(f"{name}: tokens {start}–{stop - 1} at full resolution")
            rows = (analysis.head_mean(shown, layer=layer, start=start, stop=stop) if layer_mean
                    else shown.rows(layer, start, stop, [head])[0])  # [size, T]: every key
            window = rows[:, start:stop]
            fig = plots.head_heatmap(window, labels[start:stop],
                                     title=parts.map_title(name, moves), causal=shown.causal,
                                     grey_causal_mask=grey, offset=start, max_ticks=32,
                                     height=None if stop - start <= 64 else 720,
                                     value_name=value_name, pickable=not layer_mean,
                                     marked=marked)
            ui.show_figure(fig, key="window", alt=f"Window of {name}", share=1.0,
                           on_select=None if layer_mean else partial(pick, "window"))
            st.caption(parts.window_caption(start, stop,
                                                *analysis.window_mass(rows, start, stop)))
            positions = export.position_labels(labels[start:stop], kept[start:stop])
            ui.download_csv(partial(export.matrix_csv, window, positions, positions),
                            export.safe_filename(stem, name, f"{start}-{stop - 1}", suffix=".csv"),
                            "This window as CSV", key="dl_window")

            st.subheader("The window as lines between tokens")
            which = parts.lines_for(name, layer, layer_mean)
            line_stop = min(stop, start + parts.LINE_WINDOW)
            lines = plots.line_view(shown.rows(layer, start, line_stop)[:, :, start:line_stop],
                                    labels[start:line_stop], heads=None if which == "all" else [head],
                                    layer=layer, offset=start, title=f"Layer {layer}: query → key",
                                    value_name=value_name)
            ui.show_figure(lines, key="lines", alt=f"Line view of layer {layer}", share=1.0)
            st.caption(parts.window_lines_caption(line_stop - start, layer, layer_mean))
        else:
            heat_col, line_col = parts.side_by_side(n_shown)
            with heat_col:
                st.caption(parts.map_caption(moves, layer_mean, n_shown))
                heat = plots.head_heatmap(
                    the_map, labels, title=parts.map_title(name, moves), causal=shown.causal,
                    grey_causal_mask=grey, pair_boundary=pair_boundary, value_name=value_name,
                    pickable=not layer_mean, marked=marked, **heat_size)
                ui.show_figure(heat, key="head", alt=f"Attention map of {name}",
                               share=ui.column_share(0.6),
                               on_select=None if layer_mean else partial(pick, "head"))
                ui.download_csv(
                    partial(export.matrix_csv, the_map, export.position_labels(labels, kept),
                            export.position_labels(labels, kept)),
                    export.safe_filename(stem, name, suffix=".csv"), f"{name} as CSV",
                    key="dl_head", help="Every weight of this map (row = query, column = key).")
            with line_col:
                st.caption(parts.lines_caption(moves))
                which = parts.lines_for(name, layer, layer_mean)
                start = parts.line_view_start(n_shown)
                stop = min(n_shown, start + parts.LINE_WINDOW)
                lines = plots.line_view(
                    shown.rows(layer, start, stop)[:, :, start:stop], labels[start:stop],
                    heads=None if which == "all" else [head], layer=layer, offset=start,
                    title=f"Layer {layer}: query → key", value_name=value_name)
                # laid out for its column like every figure (a fixed 600 px overflowed a phone,
                # and a 40 % column of a laptop's screen)
                ui.show_figure(lines, key="lines", alt=f"Line view of layer {layer}",
                               share=ui.column_share(0.4))

        # ------------------------------------------------- why: a clicked cell, by source
        if not layer_mean:
            ui.why_section(selection, trace, layer, head, default=ui.opening(trace)[:2])

        # ------------------------------------------- below the first screen: drawn when opened
        def aggregates() -> None:
            kind = ui.synced(st.radio, "agg", "Show", "mean", options=["mean", "rollout"],
                             format_func=parts.aggregate_labels(layer).get, horizontal=True)
            # computed on every token, then the hidden ones removed: [T, T] floats per layer
            refused = ui.too_long_for(parts.aggregate_what(kind, trace.n_layer),
                                      trace.n_tokens,
                                      analysis.aggregate_bytes_per_token(kind, trace.n_layer))
            if refused:
                st.info(refused)
                return
            agg_col, text_col = parts.side_by_side(n_shown)
            if kind == "mean":
                full = ui.memo(analysis.head_mean, trace, large=True, layer=layer)
            else:
                full = ui.memo(analysis.rollout, trace, large=True, return_all=True)[layer]
            agg_name, explanation = parts.aggregate_text(kind, layer, trace.n_layer,
                                                             hidden=keep is not None)
            if keep is not None:
                full = ui.memo(analysis.drop_positions, full, keep_mask=keep)[0]
            with agg_col:
                agg = plots.head_heatmap(full, labels, title=agg_name, causal=trace.causal,
                                         grey_causal_mask=grey, pair_boundary=pair_boundary,
                                         **heat_size)
                ui.show_figure(agg, key="aggregate", alt=agg_name, share=ui.column_share(0.6))
            with text_col:
                st.markdown(explanation)
                ui.download_csv(
                    partial(export.matrix_csv, full, export.position_labels(labels, kept),
                            export.position_labels(labels, kept)),
                    export.safe_filename(stem, agg_name, suffix=".csv"), f"{agg_name} as CSV",
                    key="dl_agg")

        def token_pair() -> None:
            st.caption("Pick a query token (the one that reads) and a key token (the one read from): "
                       "each cell is the weight that head gives from the query to the key, "
                       "A[query, key], for every layer and head at once. The coreference example "
                       "asks this of 'it' and 'animal'.")
            # 'it' and the token it reads most (or the last token and its): analysis.opening_view
            query, key_pos = parts.pick_token_pair(
                labels, analysis.opening_view(shown, labels, shown.special_mask)[:2])
            parts.show_link(shown.weights_between(query, key_pos), labels, query, key_pos,
                                trace.causal, " (rows renormalized over the shown tokens)"
                                if keep is not None else "", stem)

        def sink() -> None:  # the first token both ways, side by side (Kobayashi et al. 2020)
            shares = ui.memo(analysis.sink_shares, ui.get_trace(selection),
                             ui.get_trace(selection, weights="value"))
            st.markdown(parts.sink_text(trace.display_tokens[0], shares))
            for share, place, title, key in zip(
                    (shares.of_weights, shares.of_moved), ui.figure_columns(2),
                    parts.SINK_TITLES, ("sink_weights", "sink_moved")):
                with place:
                    ui.show_figure(plots.layer_head_heatmap(
                        share, title, "share", colorscale="Blues", zmin=0.0, zmax=1.0),
                        key=key, alt=title, share=ui.column_share(0.5))

        if parts.moves_can_be_shown(selection):
            ui.drawn_when_opened(parts.SINK_SECTION, "sink", sink, expanded=moves)
        ui.drawn_when_opened("Aggregates over heads and layers", "aggregates", aggregates)
        ui.drawn_when_opened("Which heads link two tokens", "token_pair", token_pair)

        st.divider()
        ui.download_trace(selection, trace)
        ui.caveat()
