"""A head picked by a click in a figure or a row of a table -> the shared layer/head choice
(kept in the URL), read from the widget's selection state."""

from __future__ import annotations

import streamlit as st

from .output import section_open_key
from .state import set_value


def head_from_scatter(state_key: str, n_layer: int) -> None:
    """A click on a head scatter whose trace l is layer l and point h head h (traces after
    the layers, such as a ring marking the chosen head, are ignored)."""
    state = st.session_state.get(state_key) or {}
    for point in (state.get("selection") or {}).get("points") or []:
        curve = point.get("curve_number")
        index = point.get("point_index", point.get("point_number"))
        if curve is not None and index is not None and 0 <= int(curve) < n_layer:
            set_value("layer", int(curve))
            set_value("head", int(index))
            return


def head_from_table(state_key: str, rows, opens_section: str | None = None) -> None:
    """A row picked in a table of heads (each row with .layer and .head); opens the folded
    section that shows the head, if one is named."""
    state = st.session_state.get(state_key) or {}
    picked = (state.get("selection") or {}).get("rows") or []
    if picked and 0 <= int(picked[0]) < len(rows):
        set_value("layer", rows[int(picked[0])].layer)
        set_value("head", rows[int(picked[0])].head)
        if opens_section:
            st.session_state[section_open_key(opens_section)] = True
