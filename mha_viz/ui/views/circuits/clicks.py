"""The Circuits page's clickable figures: a head clicked in the head map becomes path
patching's receiver; a head clicked in the circuit graph opens its attention map on the
clean prompt (on the next run, open_clicked_head).

The page's widget keys and URL parameters are named here as the page has always named them:
links and tests rely on them."""

from __future__ import annotations

import streamlit as st

from .... import plots
from ....analysis.heads import head_name
from ...messages import callback
from ...state import set_value

_OPEN_HEAD = "_mv_circuits_open_head"  # (layer, head, text) of a clicked node of the graph
# this page's own parameters in the address (and the folded sections' "open"), which the
# link to another page leaves behind
PAGE_PARAMS = ("open", "c_pairs", "clean", "corrupted", "c_target", "c_contrast", "c_metric",
               "c_dir", "c_view", "c_stream", "c_recv", "c_part", "c_edges", "c_ablation",
               "c_n", "c_seed", "c_corrupted", "c_direction")


def open_clicked_head() -> None:
    """After a click on a head of the circuit graph: open its attention map on the text.
    The link carries what the page will show (the sidebar's settings, the text, the head),
    so that page writes nothing new into the address, and one Back press returns here (each
    change of the address is a step of the browser's history)."""
    if _OPEN_HEAD in st.session_state:
        layer, head, text = st.session_state.pop(_OPEN_HEAD)
        set_value("text", text)
        set_value("layer", layer)
        set_value("head", head)
        carried = {name: value for name, value in st.query_params.to_dict().items()
                   if name not in PAGE_PARAMS}
        st.switch_page("pages/1_Attention_Maps.py",
                       query_params={**carried, "text": text, "layer": str(layer),
                                     "head": str(head)})


def _selected_points(key: str) -> list:
    return ((st.session_state.get(key) or {}).get("selection") or {}).get("points") or []


@callback
def receiver_from_map(n_head: int) -> None:
    """A click in the head map: that head becomes path patching's receiver."""
    for point in _selected_points("patch_heads"):
        picked = plots.grid_point_to_head(point, n_head)
        if picked is not None and point.get("curve_number", 1) == 1:
            set_value("c_recv", head_name(*picked))
            set_value("c_view", "paths")
            return


@callback
def open_node(names: list, node_curve: int, text: str) -> None:
    for point in _selected_points("circuit_graph"):
        node = plots.circuit_point_to_node(point, names, node_curve)
        head = plots.node_to_head(node) if node else None
        if head is not None:
            st.session_state[_OPEN_HEAD] = (head[0], head[1], text)
            return
