"""The Head similarity page's view: which heads attend alike? The distance matrix, its
clustering, a 2-D map of heads and the nearest heads of a chosen head; for an encoder-decoder,
its cross-attention heads, or every kind of head compared by what it writes.

``show()`` builds the page's context once (``Distances``: the heads' distances, the chosen
head and its nearest heads, over a trace's rows or cross-attention's; ``Outputs``: the heads
compared by what they write) and walks its sections, each a function of it. A new section is
one function and one line."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np
import streamlit as st

from ... import analysis as A
from ... import plots, ui
from ...analysis.map_cosine import distances_of_kind
from ...maps.downsample import block_factor, downsampled_labels
from ...plots import fit
from ...server import export
from .. import picks
from ..words import similarity as words

MAPS = ("self", "encoder", "decoder", "cross")  # the sets of maps the page reads (maps.sets)
ROW_LIMIT = 128  # longer inputs compare this many evenly spaced query rows (unless told not to)
NEIGHBOUR_CHOICES = [1, 2, 3, 4, 5]
TOP_ACROSS = 8  # pairs of heads of different kinds listed
SIDE_BY_SIDE_MAX = 128  # maps beside each other are block-averaged above this many tokens
INTRO = words.INTRO


@dataclass(frozen=True)
class Distances:
    """Every pair of heads' distance and what the page chose: the distance, the matrix's
    order, the head and how many of its nearest heads. ``trace``: the trace whose maps were
    compared (None for cross-attention, whose maps are on the Attention maps page)."""
    selection: ui.Selection
    dist: np.ndarray  # [heads, heads] in layer order
    n_layer: int
    n_head: int
    layer: int
    head: int
    kind: str  # "js", "js_distance" or "cosine"
    order_by: str
    k_near: int
    trace: object | None = None

    @cached_property
    def names(self) -> list[str]:
        return A.head_names(self.n_layer, self.n_head)  # in layer order, as the matrix's rows

    @property
    def chosen(self) -> int:
        return A.head_index(self.layer, self.head, self.n_head)

    @cached_property
    def nearest(self) -> list[int]:
        return A.nearest_heads(self.dist, self.chosen, self.k_near)

    @property
    def name(self) -> str:
        return plots.head_name(self.layer, self.head)


def distance_options(c1, c2) -> tuple[str, str]:
    """The distance (JS divergence or its root) and the order of the matrix."""
    with c1:
        kind = ui.synced(st.radio, "dist", "Distance", "js",
                         options=["js", "js_distance", "cosine"],
                         format_func=words.DISTANCE_CHOICES.get, horizontal=True,
                         help=words.DISTANCE_HELP)
    with c2:
        order_by = ui.synced(st.radio, "order", "Order the matrix by", "cluster",
                             options=["cluster", "layer"],
                             format_func={"cluster": "clustering", "layer": "layer"}.get,
                             horizontal=True, help=words.ORDER_HELP)
    return kind, order_by


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


def distances_of(selection: ui.Selection) -> Distances:
    """A trace's heads compared on their rows (every row, or evenly spaced ones past a
    length), the choices drawn above the sections."""
    trace = ui.get_trace(selection)
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
    # every pair of heads on every row: past a work bound, fewer rows (a saved trace can hold
    # many heads; a long text many rows)
    max_rows = A.rows_within_work(n_layer * n_head, n, wanted_rows)
    layer, head, k_near = head_and_neighbours(trace)
    st.info(words.rows_compared(kind, n, max_rows, wanted_rows, ROW_LIMIT, n_layer * n_head))
    # only the compared rows of every head are read (a long input computes just those)
    dist = ui.memo(distances_of_kind, trace, kind=kind, max_rows=max_rows)
    return Distances(selection, dist, n_layer, n_head, layer, head, kind, order_by, k_near,
                     trace)


def cross_distances_of(selection: ui.Selection) -> Distances:
    """An encoder-decoder's cross-attention heads, compared on their rows over the source."""
    seq = ui.get_seq2seq_trace(selection)
    n_layer, n_head, t, s = seq.cross_attentions.shape
    kind, order_by = distance_options(*st.columns(3)[:2])
    layer, head, k_near = head_and_neighbours(seq.as_trace(selection.map_set.stack))
    max_rows = A.rows_within_work(n_layer * n_head, max(t, s), None)
    st.info(words.cross_rows_compared(kind, t, s, max_rows))
    dist = ui.memo(distances_of_kind, seq.cross_attentions if kind == "cosine" else
                   seq.source(selection.kind), kind=kind, max_rows=max_rows)
    return Distances(selection, dist, n_layer, n_head, layer, head, kind, order_by, k_near)


def matrix_section(d: Distances) -> None:
    """All heads against all heads: the matrix, and the heads placed in 2-D."""
    order = ui.memo(A.cluster_order, d.dist)
    st.subheader("All heads against all heads")
    matrix_col, map_col = ui.figure_columns(2, gap="medium")
    with matrix_col:
        st.caption(words.CLUSTERED if d.order_by == "cluster" else words.LAYER_ORDER)
        fig = plots.distance_heatmap(d.dist, d.n_head,
                                     order=order if d.order_by == "cluster" else None,
                                     kind=d.kind)
        ui.show_figure(fig, key="distances", alt="Head-to-head distance matrix",
                       share=ui.column_share(0.5))
        ui.download_csv(partial(export.matrix_csv, d.dist, d.names, d.names,
                                corner="head \\ head"),
                        export.safe_filename(d.selection.file_stem, "head_distances", d.kind,
                                             suffix=".csv"),
                        "Distance matrix as CSV", key="dl_dist",
                        help="Heads in layer order; the clustering order is in the map's CSV.")
    with map_col:
        heads_map(d, order)


def heads_map(d: Distances, order) -> None:
    """The heads placed in 2-D by metric MDS; a click picks a head."""
    coords = ui.memo(A.mds_2d, d.dist)
    st.caption(words.MDS, help=ui.TERMS["MDS"])
    fig = plots.head_scatter(coords, d.n_head, highlight=[d.chosen, *d.nearest])
    ui.show_figure(fig, key="mds", on_select=partial(picks.head_from_scatter, "mds", d.n_layer),
                   share=ui.column_share(0.5), alt="2-D map of the heads (MDS)")
    layers, heads = A.layers_and_heads(d.n_layer, d.n_head)
    ui.download_csv(partial(export.table_csv, {
        "layer": layers, "head": heads, "name": d.names,
        "mds_1": coords[:, 0], "mds_2": coords[:, 1],
        "cluster_order_position": A.positions_in_order(order)}),
        export.safe_filename(d.selection.file_stem, "head_map", d.kind, suffix=".csv"),
        "Map coordinates as CSV", key="dl_mds")


def published_section(d: Distances) -> None:
    with st.expander("Published results to compare with", expanded=True):
        st.markdown(words.PUBLISHED)


def nearest_section(d: Distances) -> None:
    """The chosen head's nearest heads in a table."""
    st.subheader(f"{d.name} and its nearest heads")
    st.dataframe(
        {"rank": list(range(1, len(d.nearest) + 1)),
         "head": [d.names[i] for i in d.nearest],
         f"{words.DISTANCE_SHORT[d.kind]} to {d.name}":
             [round(float(d.dist[d.chosen, i]), 4) for i in d.nearest],
         "same layer": ["yes" if A.head_at(i, d.n_head)[0] == d.layer else ""
                        for i in d.nearest]},
        hide_index=True, width="content")


def nearest_maps(d: Distances) -> None:
    """The chosen head's map beside its nearest heads' maps."""
    trace = d.trace
    unit = "nats" if d.kind == "js" else ""  # the JS distance and 1 − cos have no unit
    shown = [d.chosen, *d.nearest]
    titles = [f"{d.names[i]} (chosen)" if i == d.chosen else
              f"{d.names[i]}: {d.dist[d.chosen, i]:.3f} {unit}".strip() for i in shown]
    screen = ui.figure_screen()
    narrow = screen is not None and screen.width < fit.NARROW_PX
    # each map at most SIDE_BY_SIDE_MAX cells a side (block means; the whole map when it
    # fits), read the same way whether the trace holds its maps or rebuilds them
    factor = block_factor(trace.n_tokens, SIDE_BY_SIDE_MAX)
    shown_maps = [ui.memo(trace.block_mean, *A.head_at(i, d.n_head), factor=factor)
                  for i in shown]
    fig = plots.head_heatmap_row(shown_maps, downsampled_labels(trace.display_tokens, factor),
                                 titles, causal=trace.causal, max_size=SIDE_BY_SIDE_MAX,
                                 per_row=1 if narrow else None,
                                 height=int(screen.width + 40) if narrow else
                                 int(min(560, max(380, 1300 / len(shown) + 100))))
    ui.show_figure(fig, key="nearest", alt=f"Attention maps of {d.name} and its nearest heads")
    st.caption(words.nearest_maps_caption(ui.NUMBERING))


def nearest_maps_section(d: Distances) -> None:
    ui.drawn_when_opened(f"The maps of {d.name} and its nearest heads", "nearest",
                         partial(nearest_maps, d))


def downloads_section(d: Distances) -> None:
    st.divider()
    ui.download_trace(d.selection, d.trace)
    ui.caveat()


def cross_maps_note(d: Distances) -> None:
    st.caption("The maps of these heads are on the Attention maps page (cross-attention).")
    ui.caveat()


# ------------------------------------------------------------- what the heads write


@dataclass(frozen=True)
class Outputs:
    """An encoder-decoder's heads compared by what they write: those of every set that
    writes into the same stream as the chosen set (the encoder's heads among themselves; the
    decoder's self-attention and cross-attention heads together)."""
    selection: ui.Selection
    kinds: list[str]
    heads: np.ndarray
    names: list[str]
    similarity: np.ndarray


def outputs_of(selection: ui.Selection) -> Outputs:
    outputs = ui.memo(A.head_outputs_seq2seq, selection.model, large=True,
                      source=selection.text, target=selection.target)
    stream = selection.map_set.stack  # the sets that write into the same stream
    kinds = [s.name for s in selection.model.map_sets if s.stack == stream]
    heads, names = A.outputs_of_kinds(outputs, kinds)
    return Outputs(selection, kinds, heads, names, ui.memo(A.output_similarity, heads))


def outputs_section(o: Outputs) -> None:
    """The cosine similarity of what every two heads write, and its CSV."""
    shown = o.selection.map_set
    st.info(words.outputs_compared(shown.queries, shown.stack, len(o.kinds) > 1))
    fig = plots.tensor_figure(o.similarity, o.names, o.names,
                              "Cosine similarity of the heads' outputs",
                              show_values=len(o.names) <= 24, fmt=".2f", row_title="head",
                              col_title="head")
    ui.show_figure(fig, key="output_similarity", alt="Cosine similarity of the heads' outputs")
    ui.download_csv(partial(export.matrix_csv, o.similarity, o.names, o.names,
                            corner="head \\ head"),
                    export.safe_filename(o.selection.file_stem, "output_cosine", *o.kinds,
                                         suffix=".csv"),
                    "Similarity matrix as CSV", key="dl_output_similarity")


def across_kinds_section(o: Outputs) -> None:
    """The pairs of heads of two sets that write most alike."""
    if len(o.kinds) > 1:
        closest = A.closest_across(o.similarity, o.names, len(o.names) // 2, k=TOP_ACROSS)
        st.markdown(words.CLOSEST_ACROSS)
        st.dataframe({"self-attention head": [a for a, _, _ in closest],
                      "cross-attention head": [b for _, b, _ in closest],
                      "cosine similarity": [round(v, 3) for _, _, v in closest]},
                     hide_index=True, width="content")
    st.caption(ui.NUMBERING)
    ui.caveat()


SECTIONS = [matrix_section, published_section, nearest_section, nearest_maps_section,
            downloads_section]
CROSS_SECTIONS = [matrix_section, published_section, nearest_section, cross_maps_note]
OUTPUT_SECTIONS = [outputs_section, across_kinds_section]


def compares_outputs(selection: ui.Selection) -> bool:
    """Whether an encoder-decoder's heads are compared by what they write (a choice offered
    where the sidebar picks one of several sets of maps)."""
    if selection.kind is None or selection.uploaded is not None:
        return False
    return ui.synced(st.radio, "compare", "Compare the heads by", "maps",
                     options=["maps", "outputs"], horizontal=True,
                     format_func=words.COMPARE.get, help=words.COMPARE_HELP) == "outputs"


def show() -> None:
    selection = ui.sidebar(reads=MAPS)
    with ui.guard():
        if compares_outputs(selection):
            ui.show_sections(outputs_of(selection), OUTPUT_SECTIONS)
        elif selection.map_set.square:
            ui.show_sections(distances_of(selection), SECTIONS)
        else:  # cross-attention: target rows over the source's columns
            ui.show_sections(cross_distances_of(selection), CROSS_SECTIONS)
