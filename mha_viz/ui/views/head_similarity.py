"""The Head similarity page's view: which heads attend alike? The distance matrix, its
clustering, a 2-D map of heads and the nearest heads of a chosen head; for an encoder-decoder,
its cross-attention heads, or every kind of head compared by what it writes."""

from __future__ import annotations

from functools import partial

import streamlit as st

from ... import analysis as A
from ... import plots, ui
from ...analysis.map_cosine import distances_of_kind
from ...maps.downsample import block_factor, downsampled_labels
from ...plots import fit
from ...server import export
from .. import picks
from ..words import similarity as words

ROW_LIMIT = 128  # longer inputs compare this many evenly spaced query rows (unless told not to)
NEIGHBOUR_CHOICES = [1, 2, 3, 4, 5]
TOP_ACROSS = 8  # pairs of heads of different kinds listed
SIDE_BY_SIDE_MAX = 128  # maps beside each other are block-averaged above this many tokens
INTRO = ("Two heads are alike when they spread each token's attention the same way. The "
         "distance between heads a and b is the Jensen-Shannon (JS) divergence between their "
         "rows, averaged over the query tokens: 0 for identical maps, at most ln 2 ≈ 0.693. "
         "Clustering and a 2-D map then show which heads form families.")


def distance_views(selection, dist, n_layer: int, n_head: int, layer: int, head: int,
                   kind: str, order_by: str, k_near: int) -> tuple[list, int, list]:
    """The distance matrix, the 2-D map of heads and the chosen head's nearest heads;
    -> (head names, the chosen head's index, its nearest heads)."""
    stem = selection.file_stem
    order = ui.memo(A.cluster_order, dist)
    coords = ui.memo(A.mds_2d, dist)
    names = A.head_names(n_layer, n_head)  # in layer order, as the matrix's rows
    chosen = A.head_index(layer, head, n_head)
    nearest = A.nearest_heads(dist, chosen, k_near)

    # ---------------------------------------------------------------- matrix + map
    st.subheader("All heads against all heads")
    matrix_col, map_col = ui.figure_columns(2, gap="medium")
    with matrix_col:
        if order_by == "cluster":
            st.caption("Reordered by average-linkage clustering: blocks of dark cells along the "
                       "diagonal are families of heads that attend alike. The coloured strips "
                       "give each head's layer (same colours as the map on the right).")
        else:
            st.caption("Heads in layer order (L0.H0, L0.H1, …); white lines mark the layer "
                       "boundaries.")
        fig = plots.distance_heatmap(dist, n_head, order=order if order_by == "cluster" else None,
                                     kind=kind)
        ui.show_figure(fig, key="distances", alt="Head-to-head distance matrix",
                       share=ui.column_share(0.5))
        ui.download_csv(partial(export.matrix_csv, dist, names, names, corner="head \\ head"),
                        export.safe_filename(stem, "head_distances", kind, suffix=".csv"),
                        "Distance matrix as CSV", key="dl_dist",
                        help="Heads in layer order; the clustering order is in the map's CSV.")
    with map_col:
        st.caption("Metric MDS places the heads in 2-D so that distances on the map match the "
                   "matrix as well as possible. Colour = layer; a point's label names "
                   "its head; click or tap a head to choose it below. The chosen head and its nearest heads are ringed.",
                   help=ui.TERMS["MDS"])
        fig = plots.head_scatter(coords, n_head, highlight=[chosen, *nearest])
        ui.show_figure(fig, key="mds",
                       on_select=lambda: picks.head_from_scatter("mds", n_layer),
                       share=ui.column_share(0.5),
                       alt="2-D map of the heads (MDS)")
        rank = A.positions_in_order(order)
        layers, heads = A.layers_and_heads(n_layer, n_head)
        ui.download_csv(partial(export.table_csv, {
            "layer": layers, "head": heads, "name": names,
            "mds_1": coords[:, 0], "mds_2": coords[:, 1], "cluster_order_position": rank}),
            export.safe_filename(stem, "head_map", kind, suffix=".csv"),
            "Map coordinates as CSV", key="dl_mds")
    with st.expander("Published results to compare with", expanded=True):
        st.markdown(
            "- **Clark, Khandelwal, Levy & Manning 2019** (*What Does BERT Look At?*) embedded "
            "BERT-base's 144 heads this way (JS divergence, multidimensional scaling, averaged "
            "over many inputs): heads of the same layer tend to sit together, and heads with "
            "one behaviour form clusters: broad heads, heads attending to the next or the "
            "previous token, to [CLS], to [SEP]. Over half of the attention in BERT-base's "
            "layers 6–10 goes to [SEP]; they count layers from 1, so that is **L5–L9** here.\n"
            "- **Olsson et al. 2022** (*In-context Learning and Induction Heads*): on repeated "
            "text, induction heads attend from a token to the one that followed its previous "
            "occurrence. In GPT-2 small the heads found by the repeated-random-token probe are "
            "L5.H1, L5.H5, L6.H9, L7.H2 and L7.H10 (Wang et al. 2023; ARENA), counted from 0. "
            "Try the *Repeated text* example with `gpt2`: they should sit close together.\n"
            "- This page uses one input, so expect more noise than an average over a corpus; a "
            "label such as *induction head* depends on the probe text that revealed it.")

    # ---------------------------------------------------------------- nearest heads
    st.subheader(f"{plots.head_name(layer, head)} and its nearest heads")
    name = plots.head_name(layer, head)
    st.dataframe(
        {"rank": list(range(1, len(nearest) + 1)),
         "head": [names[i] for i in nearest],
         f"{words.DISTANCE_SHORT[kind]} to {name}":
             [round(float(dist[chosen, i]), 4) for i in nearest],
         "same layer": ["yes" if A.head_at(i, n_head)[0] == layer else "" for i in nearest]},
        hide_index=True, width="content")
    return names, chosen, nearest


def head_and_neighbours(trace) -> tuple[int, int, int]:
    """The chosen head (of the trace's layers and heads) and how many neighbours to show."""
    pick_col, k_col, _ = st.columns([2, 1, 1])
    with pick_col:
        layer, head = ui.head_picker(trace)
    with k_col:
        k_near = ui.synced(st.selectbox, "near", "Nearest heads shown", 3,
                           options=NEIGHBOUR_CHOICES,
                           help="How many of the chosen head's nearest heads to ring on the "
                                "map and show below.")
    return layer, head, k_near


def cross_attention_similarity(selection, seq) -> None:
    """An encoder-decoder's cross-attention heads, compared on their rows over the source."""
    maps = seq.cross_attentions
    n_layer, n_head, t, s = maps.shape
    kind, order_by = distance_options(*st.columns(3)[:2])
    layer, head, k_near = head_and_neighbours(seq.as_trace("decoder"))
    max_rows = A.rows_within_work(n_layer * n_head, max(t, s), None)
    rows = f"all {t}" if max_rows is None else f"{max_rows} evenly spaced of the {t}"
    st.info(f"**The figures show the {words.DISTANCE_KINDS[kind]}** between cross-attention "
            f"heads: each head's rows are the target positions' attention over the {s} source tokens, "
            f"compared on {rows} rows" + ("." if kind == "cosine" else
                                          f", smoothed first (0.999·a + 0.001/{s})."))
    dist = ui.memo(distances_of_kind, seq.cross_attentions if kind == "cosine" else
                   seq.source("cross"), kind=kind, max_rows=max_rows)
    distance_views(selection, dist, n_layer, n_head, layer, head, kind, order_by, k_near)
    st.caption("The maps of these heads are on the Attention maps page (cross-attention).")
    ui.caveat()


def output_similarity_view(selection, kind: str) -> None:
    """An encoder-decoder's heads compared by what they write: the encoder's heads among
    themselves, or the decoder's self-attention and cross-attention heads together (both
    write into the decoder's stream at the target positions)."""
    outputs = ui.memo(A.head_outputs_seq2seq, selection.model, large=True,
                      source=selection.text, target=selection.target)
    kinds = ["encoder"] if kind == "encoder" else ["decoder", "cross"]
    heads, names = A.outputs_of_kinds(outputs, kinds)
    similarity = ui.memo(A.output_similarity, heads)
    where = ("the source positions, into the encoder's stream" if kind == "encoder" else
             "the target positions, into the decoder's stream")
    st.info(f"**Cosine similarity of what each head writes**: its output through its slice "
            f"of W_O, the vector it adds at each of {where}, compared position by position "
            f"and averaged. 1 = the two heads write the same direction, 0 = unrelated "
            f"directions, −1 = opposite." + (
                "" if kind == "encoder" else " A self-attention row spreads over the target "
                "and a cross-attention row over the source, so their maps cannot be "
                "compared; their outputs can."))
    small = len(names) <= 24
    fig = plots.tensor_figure(similarity, names, names,
                              "Cosine similarity of the heads' outputs",
                              show_values=small, fmt=".2f", row_title="head",
                              col_title="head")
    ui.show_figure(fig, key="output_similarity", alt="Cosine similarity of the heads' outputs")
    ui.download_csv(partial(export.matrix_csv, similarity, names, names,
                            corner="head \\ head"),
                    export.safe_filename(selection.file_stem, "output_cosine", *kinds,
                                         suffix=".csv"),
                    "Similarity matrix as CSV", key="dl_output_similarity")
    if kind != "encoder":
        split = len(names) // 2
        closest = A.closest_across(similarity, names, split, k=TOP_ACROSS)
        st.markdown("**The most alike across kinds**: a decoder self-attention head and a "
                    "cross-attention head that write in the same direction")
        st.dataframe({"self-attention head": [a for a, _, _ in closest],
                      "cross-attention head": [b for _, b, _ in closest],
                      "cosine similarity": [round(v, 3) for _, _, v in closest]},
                     hide_index=True, width="content")
    st.caption(ui.NUMBERING)
    ui.caveat()


def distance_options(c1, c2) -> tuple[str, str]:
    """The distance (JS divergence or its root) and the order of the matrix."""
    with c1:
        kind = ui.synced(st.radio, "dist", "Distance", "js",
                         options=["js", "js_distance", "cosine"],
                         format_func={"js": "JS divergence (nats)",
                                      "js_distance": "JS distance (√ divergence)",
                                      "cosine": "cosine (1 − cos)"}.get,
                         horizontal=True,
                         help="JS divergence is what Clark et al. (2019) use. Its square root, "
                              "the JS distance, is a true metric (it obeys the triangle "
                              "inequality), which suits the 2-D map better. Cosine: head "
                              "diversity as the attention texts define it, the cosine "
                              "similarity of two maps read as long vectors.")
    with c2:
        order_by = ui.synced(st.radio, "order", "Order the matrix by", "cluster",
                             options=["cluster", "layer"],
                             format_func={"cluster": "clustering", "layer": "layer"}.get,
                             horizontal=True,
                             help="Clustering (average linkage) puts similar heads next to "
                                  "each other; the coloured strips then show each head's layer.")
    return kind, order_by


def show() -> None:
    selection = ui.sidebar()
    with ui.guard():
        if selection.kind is not None and selection.uploaded is None:
            compare = ui.synced(st.radio, "compare", "Compare the heads by", "maps",
                                options=["maps", "outputs"], horizontal=True,
                                format_func={"maps": "where they attend (their maps)",
                                             "outputs": "what they write (their outputs)"}.get,
                                help="Maps compare heads of one kind. Outputs compare the "
                                     "decoder's self-attention and cross-attention heads "
                                     "together: both write into the decoder's stream.")
            if compare == "outputs":
                output_similarity_view(selection, selection.kind)
                st.stop()
        trace = ui.get_trace(selection, cross_view=partial(cross_attention_similarity, selection))
        ui.trace_notes(trace)
        n_layer, n_head, n = trace.n_layer, trace.n_head, trace.n_tokens

        c1, c2, c3 = st.columns(3)
        kind, order_by = distance_options(c1, c2)
        with c3:
            all_rows = False
            if n > ROW_LIMIT and ui.one_pass_is_quick(trace):  # else sampled rows only
                all_rows = ui.synced(st.toggle, "allrows", "Compare every query row (slower)", False,
                                     help=f"By default long inputs are compared on {ROW_LIMIT} "
                                          f"evenly spaced query rows; the cost grows with the "
                                          f"number of rows.")
        wanted_rows = None if all_rows or n <= ROW_LIMIT else ROW_LIMIT
        # every pair of heads on every row: past a work bound, fewer rows (a saved trace can
        # hold many heads; a long text many rows)
        max_rows = A.rows_within_work(n_layer * n_head, n, wanted_rows)
        layer, head, k_near = head_and_neighbours(trace)
        kind_text = words.DISTANCE_KINDS[kind]
        if max_rows is None:
            rows_text = f"all {n} query rows."
        elif max_rows == wanted_rows:
            rows_text = (f"{ROW_LIMIT} evenly spaced query rows out of {n} (first and last "
                         f"included): an approximation that keeps long inputs fast. Switch on "
                         f"*Compare every query row* for the exact value.")
        else:
            rows_text = (f"{max_rows} evenly spaced query rows out of {n}: comparing all "
                         f"{n_layer * n_head:,} heads pair by pair on more rows would take too "
                         f"long on this server.")
        st.info(f"**The figures show the {kind_text}**, " + (
            "over " if kind == "cosine" else "averaged over ") + rows_text
                + ("" if kind == "cosine" else
                   " Rows are smoothed first, 0.999·a + 0.001/n, as in Clark et al.'s code."))

        # only the compared rows of every head are read (a long input computes just those)
        dist = ui.memo(distances_of_kind, trace, kind=kind, max_rows=max_rows)
        names, chosen, nearest = distance_views(selection, dist, n_layer, n_head, layer, head,
                                                kind, order_by, k_near)
        name = plots.head_name(layer, head)

        def nearest_maps() -> None:
            unit = "nats" if kind == "js" else ""  # the JS distance and 1 − cos have no unit
            shown = [chosen, *nearest]
            titles = [f"{names[i]} (chosen)" if i == chosen else
                      f"{names[i]}: {dist[chosen, i]:.3f} {unit}".strip() for i in shown]
            screen = ui.figure_screen()
            narrow = screen is not None and screen.width < fit.NARROW_PX
            # each map at most SIDE_BY_SIDE_MAX cells a side (block means; the whole map when it
            # fits), read the same way whether the trace holds its maps or rebuilds them
            factor = block_factor(n, SIDE_BY_SIDE_MAX)
            shown_maps = [ui.memo(trace.block_mean, *A.head_at(i, n_head), factor=factor)
                          for i in shown]
            shown_labels = downsampled_labels(trace.display_tokens, factor)
            fig = plots.head_heatmap_row(shown_maps, shown_labels, titles, causal=trace.causal,
                                         max_size=SIDE_BY_SIDE_MAX, per_row=1 if narrow else None,
                                         height=int(screen.width + 40) if narrow else
                                         int(min(560, max(380, 1300 / len(shown) + 100))))
            ui.show_figure(fig, key="nearest", alt=f"Attention maps of {name} and its nearest heads")
            st.caption(f"Each map: rows are queries, columns keys (as on the Attention maps page); "
                       f"all share one colour scale. "
                       f"{ui.NUMBERING} Clark et al. count layers from 1, so their layer 6 is L5 here.")

        ui.drawn_when_opened(f"The maps of {name} and its nearest heads", "nearest",
                             nearest_maps)

        st.divider()
        ui.download_trace(selection, trace)
        ui.caveat()
