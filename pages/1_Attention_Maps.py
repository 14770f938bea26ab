"""Attention maps: every head at a glance, one head as a heatmap with the tokens on both
axes and as lines between tokens, and the head mean and attention rollout."""

from functools import partial

import numpy as np
import streamlit as st

from mha_viz import analysis as A
from mha_viz import plots, ui
from mha_viz.maps.downsample import block_factor
from mha_viz.server import export

HEATMAP_MAX = 256  # larger maps are block-averaged for display (the CSV keeps every cell)
GRID_THUMB = 32  # thumbnail size of each head in the grid
LINE_WINDOW = 40  # the line view draws at most this many consecutive tokens

ui.page_setup(
    "Attention maps",
    "Each head spreads every token's attention (a row, the *query*) over the tokens it can "
    "see (the columns, the *keys*). Pick a head in the grid or with the selectors, then read "
    "its map as a heatmap or as lines between tokens.",
)
selection = ui.sidebar()


@ui.callback
def pick_from_grid(n_head: int, first_layer: int = 0) -> None:
    """Grid click -> the shared layer/head choice."""
    state = st.session_state.get("grid") or {}
    points = (state.get("selection") or {}).get("points") or []
    for point in points:
        picked = plots.grid_point_to_head(point, n_head, first_layer)
        if picked is not None:
            ui.set_value("layer", picked[0])
            ui.set_value("head", picked[1])
            return


WINDOW_SIZES = [64, 128, 256]  # full-resolution rows and columns of a long input's window


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
              note: str) -> None:
    """The weight from query to key in every head [L, H], its strongest heads and a CSV."""
    if causal and key_pos > query:
        st.info("In a causal model a token cannot read a later one: every weight is 0. Pick a "
                "key at or before the query.")
    fig = plots.layer_head_heatmap(
        link, f"Weight from '{labels[query]}' to '{labels[key_pos]}' in every head", "weight",
        fmt=".2f", colorscale="Blues", zmin=0.0, zmax=1.0)
    plots.columns_at_bottom(fig)
    ui.show_figure(fig, key="link", alt="Weight between two tokens in every head")
    st.caption("Strongest: " + ", ".join(
        f"{plots.head_name(layer, head)} {link[layer, head]:.0%}"
        for layer, head in A.rank_heads(link)[:3]) + note + ".")
    ui.download_csv(partial(export.layer_head_csv, link, "weight"),
                    export.safe_filename(selection.file_stem, "link", suffix=".csv"),
                    "These weights as CSV", key="dl_link")


def cross_attention_view(seq) -> None:
    """An encoder-decoder's cross-attention: each target position (a row) reads the source
    (the columns); every head, one head, and the mean of the last layers as an alignment."""
    maps = seq.cross_attentions  # [L, H, T, S]
    n_layer, n_head = maps.shape[:2]
    if seq.source_truncated:
        st.warning(f"The source is longer than the encoder's context: only its first "
                   f"{len(seq.source_ids)} tokens are read.")
    if seq.generated:
        st.info(f"No target given: the decoder reads the model's own output, greedy, "
                f"{len(seq.labels)} tokens (at most {seq.max_new_tokens}): "
                f"*{ui.md_escape(seq.target_shown)}*")
    st.caption("Cross-attention: the decoder's queries read keys and values made from the "
               "encoder's output, so each row is a target position and each column a source "
               "token; every row sums to 1. No causal mask: a target position may read the "
               "whole source.")
    by = ui.synced(st.radio, "rows", "Label the rows by", "writes",
                   options=["writes", "reads"], horizontal=True,
                   format_func={"writes": "the target token each position writes",
                                "reads": "the decoder's input at that position"}.get,
                   help="Position i reads target token i - 1 (the start token first) and "
                        "writes target token i (teacher forcing).")
    rows = list(seq.label_tokens if by == "writes" else seq.target_tokens)
    source = list(seq.source_tokens)
    if seq.image is not None:  # cross-modal: the encoder read an image
        st.subheader("Where each written character looks in the image")
        screen = ui.figure_screen()
        fig = plots.cross_attention_over_image(
            seq.image, A.mean_cross_attention(maps, [n_layer - 1]), seq.patch_width, rows,
            title=f"Last layer (L{n_layer - 1}), mean of its heads",
            plot_px=700 if screen is None else max(150, min(900, screen.width - 200)))
        ui.show_figure(fig, key="image", alt="Cross-attention over the image", share=1.0)
        st.caption(f"The encoder read the image in vertical strips {seq.patch_width} pixels "
                   f"wide (a linear patch embedding, as ViT does): its positions are the "
                   f"strips, left to right. As the decoder writes each character, its "
                   f"cross-attention should fall on the strips where that character is "
                   f"drawn. The source columns below are the strips, labelled by the "
                   f"character drawn on most of each (· = background).")
    layer, head = ui.head_picker(seq.as_trace("decoder"), default=(n_layer - 1, 0))
    name = plots.head_name(layer, head)
    stem = selection.file_stem

    st.subheader("All cross-attention heads")
    st.caption("One thumbnail per decoder layer (rows) and head (columns); click one to open "
               "it below. Each thumbnail has its own colour scale.")
    cell_px = int(min(110, max(40, 720 // n_head)))
    grid = plots.model_view_grid(maps, thumb_size=GRID_THUMB, selected=(layer, head),
                                 cell_px=cell_px, title="All cross-attention heads")
    ui.show_figure(grid, key="grid", on_select=lambda: pick_from_grid(n_head),
                   alt="Grid of every cross-attention head")

    st.subheader(f"One head: {name} (decoder layer {layer}, head {head})")
    heat = plots.cross_attention_heatmap(maps[layer, head], rows, source,
                                         title=f"{name}: which source tokens each target "
                                               f"position reads")
    ui.show_figure(heat, key="head", alt=f"Cross-attention of head {name}", share=1.0)
    ui.download_csv(partial(export.matrix_csv, maps[layer, head],
                            export.position_labels(rows), export.position_labels(source),
                            corner="target \\ source"),
                    export.safe_filename(stem, "cross", name, suffix=".csv"), f"{name} as CSV",
                    key="dl_head")

    st.subheader("Alignment: the mean of the last layers' heads")
    first = ui.synced(st.select_slider, "alayers", "Average decoder layers from", n_layer - 1,
                      options=list(range(n_layer)), format_func=lambda l: f"L{l}",
                      valid=lambda l: 0 <= int(l) < n_layer,
                      help="The mean over every head of these layers, up to the last.")
    layers = list(range(int(first), n_layer))
    mean = A.mean_cross_attention(maps, layers)
    through = f"L{layers[0]}" + (f"–L{layers[-1]}" if len(layers) > 1 else "")
    fig = plots.cross_attention_heatmap(mean, rows, source,
                                        title=f"Mean cross-attention of {through}")
    ui.show_figure(fig, key="alignment", alt="Mean cross-attention as an alignment",
                   share=1.0)
    st.caption("In a trained translation model the last layers' mean tends to put each target "
               "word's weight on the source word it translates (Bahdanau et al. 2015): the ○ "
               "trace the word alignment, crossing where the two languages order words "
               "differently.")
    ui.download_csv(partial(export.matrix_csv, mean, export.position_labels(rows),
                            export.position_labels(source), corner="target \\ source"),
                    export.safe_filename(stem, "cross", "mean", through, suffix=".csv"),
                    "This mean as CSV", key="dl_alignment")
    ui.caveat()


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


with ui.guard():
    trace = ui.get_trace(selection, cross_view=cross_attention_view)
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
    # the trace as shown (hidden tokens removed, rows renormalised), read like any trace
    shown = ui.shown_trace(selection, trace, keep)
    shown_key = ui.shown_key(selection, keep)
    kept = A.kept_positions(shown)
    labels = list(shown.display_tokens)
    ui.hidden_note(trace, keep)
    n_shown = shown.n_tokens
    pair_boundary = None
    if outline and shown.segment_ids.any() and not shown.segment_ids.all():
        pair_boundary = int(shown.segment_ids.argmax())  # first shown token of sentence B
    # Long inputs: fewer axis labels and a height that fits the square plot in its column.
    long_input = n_shown > 40
    # > 1: a head shows as the block means of the whole text, and a window at full resolution
    factor = block_factor(n_shown, HEATMAP_MAX)
    if factor > 1:
        st.caption(f"Long input ({n_shown:,} tokens): heatmaps are block-averaged to at most "
                   f"{HEATMAP_MAX}×{HEATMAP_MAX} cells and axis labels thinned; a window you "
                   f"move along the text shows {WINDOW_SIZES[0]}-{WINDOW_SIZES[-1]} tokens at "
                   f"full resolution, and the line view shows {LINE_WINDOW} tokens at a time; "
                   f"the grid uses {GRID_THUMB}×{GRID_THUMB} thumbnails.")
    elif long_input:
        st.caption(f"Long input ({n_shown} tokens): only some axis labels are shown; hover a "
                   f"cell for its tokens. The CSV downloads keep every cell.")
    name = f"L{layer} head mean" if layer_mean else plots.head_name(layer, head)
    shown_head = None if layer_mean else head  # None: the layer's head mean
    stem = selection.file_stem
    heat_size = dict(max_size=HEATMAP_MAX, max_ticks=24 if long_input else 40,
                     height=760 if long_input else (None if n_shown <= 24 else 720))

    def side_by_side():
        """Figure beside its controls; a long input's map gets the whole width instead."""
        if long_input:
            return st.container(), st.container()
        return ui.figure_columns([3, 2], gap="medium")

    # ---------------------------------------------------------------- all heads
    st.subheader("All heads at a glance (the model view)")
    st.caption("One thumbnail per head: rows are layers (L0 at the top), columns are heads. "
               "Click a thumbnail to open that head below. Each thumbnail has its own colour "
               "scale, so a sharp head and a broad head are both visible.")
    sharing = ui.kv_sharing_note(trace)
    if sharing:
        st.caption(sharing)
    cell_px = int(min(110, max(40, 720 // trace.n_head)))  # few heads: bigger thumbnails
    first, stop = ui.layer_window(trace.n_layer, layer)
    if (first, stop) != (0, trace.n_layer):  # a projector: a few layers, large thumbnails
        cell_px = ui.GRID_CELL_PX_PRESENTING
    # every head's map block-averaged once per input, in one pass over the rows (a long
    # input's maps are computed for it, so that waits for a click)
    n_maps = trace.n_layer * trace.n_head
    thumbs = ui.run_or_wait(("thumbnails", shown_key), A.thumbnails, shown,
                            label=f"Drawing the {n_maps} heads' thumbnails over {n_shown:,} "
                                  f"tokens…", auto=ui.one_pass_is_quick(shown),
                            button=f"Draw every head's thumbnail ({n_maps} maps of "
                                   f"{n_shown:,} tokens)", max_size=GRID_THUMB)
    if thumbs is None:
        st.caption(f"The grid reads every head's whole map: over {n_shown:,} tokens that is a "
                   f"pass of its own, so it waits for the button above.")
    else:
        grid = plots.model_view_grid(thumbs[0][first:stop], thumb_size=GRID_THUMB,
                                     selected=(layer, head), cell_px=cell_px, title="All heads",
                                     first_layer=first, from_tokens=n_shown)
        ui.show_figure(grid, key="grid", on_select=lambda: pick_from_grid(trace.n_head, first),
                       alt="Grid of every head's attention map")

    # ---------------------------------------------------------------- one head
    st.subheader((f"The mean of layer {layer}'s {trace.n_head} heads" if layer_mean
                  else f"One head: {name} (layer {layer}, head {head})")
                 + (": the whole text" if factor > 1 else ""))
    sharing = None if layer_mean else ui.kv_sharing_note(trace, head)
    if sharing:
        st.caption(sharing)
    if factor == 1 and not layer_mean:
        the_map = shown.head_map(layer, head)
    else:  # block means of the whole text (factor 1: the layer's head mean itself)
        with st.spinner(f"Computing the map of {name}…"):
            the_map = ui.memo(shown.block_mean, key=(shown_key, "overview", layer, shown_head,
                                                     factor),
                              layer=layer, head=shown_head, factor=factor)
    if factor > 1:
        start, stop = window_controls(n_shown)
        heat = plots.head_heatmap(the_map, labels, title=f"{name}: overview",
                                  causal=shown.causal, grey_causal_mask=grey,
                                  block_factor=factor, highlight=(start, stop), max_ticks=24,
                                  height=760)
        ui.show_figure(heat, key="head", alt=f"Overview of {name}", share=1.0)
        st.caption(f"Each cell is the mean weight of a {factor}×{factor} block of query and "
                   f"key tokens; the red square is the window below.")

        st.subheader(f"{name}: tokens {start}–{stop - 1} at full resolution")
        rows = (A.head_mean(shown, layer=layer, start=start, stop=stop) if layer_mean
                else shown.rows(layer, start, stop, [head])[0])  # [size, T]: every key
        window = rows[:, start:stop]
        inside, first_token = A.window_mass(rows, start, stop)
        fig = plots.head_heatmap(window, labels[start:stop],
                                 title=f"{name}: who attends to whom", causal=shown.causal,
                                 grey_causal_mask=grey, offset=start, max_ticks=32,
                                 height=None if stop - start <= 64 else 720)
        ui.show_figure(fig, key="window", alt=f"Window of {name}", share=1.0)
        st.caption(f"These {stop - start} queries give {inside:.0%} of their attention to keys "
                   f"inside the window" + (f" and {first_token:.0%} to the first token shown"
                                           if start > 0 else "")
                   + ". Rows are queries, columns keys; hover a cell for *query → key: "
                     "weight*.")
        positions = export.position_labels(labels[start:stop], kept[start:stop])
        ui.download_csv(partial(export.matrix_csv, window, positions, positions),
                        export.safe_filename(stem, name, f"{start}-{stop - 1}", suffix=".csv"),
                        "This window as CSV", key="dl_window")

        st.subheader("The window as lines between tokens")
        which = lines_for(name, layer, layer_mean)
        line_stop = min(stop, start + LINE_WINDOW)
        lines = plots.line_view(shown.rows(layer, start, line_stop)[:, :, start:line_stop],
                                labels[start:line_stop], heads=None if which == "all" else [head],
                                layer=layer, offset=start, title=f"Layer {layer}: query → key")
        ui.show_figure(lines, key="lines", alt=f"Line view of layer {layer}", share=1.0)
        st.caption(f"The first {line_stop - start} tokens of the window (the line view shows "
                   f"{LINE_WINDOW} tokens at a time)"
                   + (f", every head of layer {layer}" if layer_mean else "")
                   + "; lines to keys outside it are not drawn.")
    else:
        heat_col, line_col = side_by_side()
        with heat_col:
            st.caption("Row = query (the token that reads), column = key (the token read "
                       "from). Hover a cell for *query → key: weight*.")
            heat = plots.head_heatmap(
                the_map, labels, title=f"{name}: who attends to whom", causal=shown.causal,
                grey_causal_mask=grey, pair_boundary=pair_boundary, **heat_size)
            ui.show_figure(heat, key="head", alt=f"Attention map of {name}",
                           share=ui.column_share(0.6))
            ui.download_csv(
                partial(export.matrix_csv, the_map, export.position_labels(labels, kept),
                        export.position_labels(labels, kept)),
                export.safe_filename(stem, name, suffix=".csv"), f"{name} as CSV",
                key="dl_head", help="Every weight of this map (row = query, column = key).")
        with line_col:
            st.caption("The same weights as lines from each query (left) to each key (right); "
                       "thicker and darker = more attention.")
            which = lines_for(name, layer, layer_mean)
            start = 0
            if n_shown > LINE_WINDOW:
                start = ui.synced(st.slider, "from", "First token in the line view", 0,
                                  min_value=0, max_value=n_shown - LINE_WINDOW,
                                  valid=lambda v: 0 <= v <= n_shown - LINE_WINDOW)
                st.caption(f"Long input: the line view shows {LINE_WINDOW} tokens at a time "
                           f"(positions {start}–{start + LINE_WINDOW - 1}); lines to keys "
                           f"outside the window are not drawn.")
            stop = min(n_shown, start + LINE_WINDOW)
            lines = plots.line_view(
                shown.rows(layer, start, stop)[:, :, start:stop], labels[start:stop],
                heads=None if which == "all" else [head], layer=layer, offset=start,
                title=f"Layer {layer}: query → key")
            # laid out for its column like every figure (a fixed 600 px overflowed a phone,
            # and a 40 % column of a laptop's screen)
            ui.show_figure(lines, key="lines", alt=f"Line view of layer {layer}",
                           share=ui.column_share(0.4))

    # ------------------------------------------- below the first screen: drawn when opened
    def aggregates() -> None:
        through = f"layer {layer}" if layer == 0 else f"layers 0–{layer}"
        kind = ui.synced(st.radio, "agg", "Show", "mean", options=["mean", "rollout"],
                         format_func={"mean": f"Head mean of layer {layer}",
                                      "rollout": f"Attention rollout through {through}"}.get,
                         horizontal=True)
        # computed on every token, then the hidden ones removed: [T, T] floats per layer
        refused = ui.too_long_for(
            "The head mean of a layer" if kind == "mean" else
            f"Attention rollout (every layer's head mean and their products, {trace.n_layer} "
            f"whole maps each)", trace.n_tokens,
            A.aggregate_bytes_per_token(kind, trace.n_layer))
        if refused:
            st.info(refused)
            return
        agg_col, text_col = side_by_side()
        if kind == "mean":
            full = ui.memo(A.head_mean, trace, key=(selection.key, "mean"), large=True,
                           layer=layer)
            explanation = ("The average of the layer's heads: what the layer as a whole reads "
                           "from. Rows still sum to 1.")
            agg_name = f"L{layer} head mean"
        else:
            full = ui.memo(A.rollout, trace, key=selection.key, large=True,
                           return_all=True)[layer]
            explanation = ("Attention rollout (Abnar & Zuidema 2020): per layer, take the head "
                           "mean plus the residual connection (0.5·A + 0.5·I, rows renormalised) "
                           "and multiply the layers together. Row i estimates how much of token "
                           "i at "
                           f"the output of layer {layer} comes from each input token. Pick the "
                           f"last layer (L{trace.n_layer - 1}) for the full rollout.")
            agg_name = f"rollout to L{layer}"
        if keep is not None:
            full = ui.memo(A.drop_positions, full, key=(selection.key, kind, layer),
                           keep_mask=keep)[0]
            explanation += (" Computed on every token; then the hidden tokens were removed and "
                            "rows renormalised.")
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
        query, key_pos = pick_token_pair(
            labels, A.opening_view(shown, labels, shown.special_mask)[:2])
        show_link(shown.weights_between(query, key_pos), labels, query, key_pos, trace.causal,
                  " (rows renormalised over the shown tokens)" if keep is not None else "")

    ui.drawn_when_opened("Aggregates over heads and layers", "aggregates", aggregates)
    ui.drawn_when_opened("Which heads link two tokens", "token_pair", token_pair)

    st.divider()
    ui.download_trace(selection, trace)
    ui.caveat()
