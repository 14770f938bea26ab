"""Maps whose cells can be clicked: Plotly selects points, not a heatmap's cells, so a
pickable map carries one invisible square marker per cell (customdata = [row, column]), which
also gives the hover; a click (or one tap) selects the cell and ``cell_of_point`` reads it
back from the point Streamlit reports. Masked cells are markers of their own, so a click on
one can be answered too."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

PICK_MAX_CELLS = 64 * 64  # past this a map is not pickable: its markers would weigh more
# than its numbers (a window or the query and key selectors pick a cell instead)


def can_pick(n_rows: int, n_cols: int) -> bool:
    return 0 < n_rows * n_cols <= PICK_MAX_CELLS


def add_pickable_cells(fig: go.Figure, x: Sequence, y: Sequence, values: np.ndarray,
                       hover: str, fmt: str = ".3f", offset: int = 0) -> None:
    """Give fig's heatmap (values [rows, cols], drawn at the category names x and y) a
    marker per cell: customdata [row + offset, col + offset, value]; non-finite values are
    the "masked cells" trace, whose hover says so. hover: the words before the value
    ("query %{y} → key %{x}"). The heatmap's own hover is switched off (the markers give
    it), and every click goes to the nearest cell, however large the cells are drawn."""
    values = np.asarray(values, dtype=np.float64)
    rows, cols = np.meshgrid(np.arange(values.shape[0]), np.arange(values.shape[1]),
                             indexing="ij")
    finite = np.isfinite(values)
    for name, chosen, template in (
            ("cells", finite, f"{hover}: %{{customdata[2]:{fmt}}}<extra></extra>"),
            ("masked cells", ~finite, f"{hover}: masked<extra></extra>")):
        if not chosen.any():
            continue
        i, j = rows[chosen], cols[chosen]
        # numpy arrays, not lists: Plotly keeps them as they are and sends them as typed
        # arrays, where lists are checked, deep-copied and written to JSON item by item for
        # every visitor who is sent the figure (most of a shared figure's cost per visitor)
        columns = [i + offset, j + offset] + ([values[chosen]] if name == "cells" else [])
        data = np.stack(columns, axis=1).astype(np.float32)  # positions < 2**24: exact
        fig.add_trace(go.Scatter(
            x=np.asarray(x, dtype=object)[j], y=np.asarray(y, dtype=object)[i],
            mode="markers", name=name,
            marker=dict(symbol="square", size=8, color="rgba(0,0,0,0)", line=dict(width=0)),
            customdata=data, hovertemplate=template, showlegend=False))
    for trace in fig.data:
        if trace.type == "heatmap":
            trace.hoverinfo = "skip"
            trace.hovertemplate = None
    fig.update_layout(clickmode="event+select", hoverdistance=-1)


def cell_of_point(point: Mapping) -> tuple[int, int] | None:
    """(row, column) of a selected point of a pickable map (a Streamlit point dict), or None
    for a point of another figure."""
    custom = point.get("customdata")
    if isinstance(custom, Mapping):  # a typed array from the browser: {"0": i, "1": j}
        custom = [custom.get("0", custom.get(0)), custom.get("1", custom.get(1))]
    if custom is None or len(custom) < 2 or None in custom[:2]:
        return None
    return int(custom[0]), int(custom[1])


def index_of_point(point: Mapping) -> int | None:
    """The index a clickable marker carries as its customdata (a token strip's position, a
    bar's feature), from a selected point Streamlit reports, or None."""
    custom = point.get("customdata")
    if isinstance(custom, (list, tuple)):
        custom = custom[0] if custom else None
    if isinstance(custom, Mapping):  # a typed array from the browser: {"0": i}
        custom = custom.get("0", custom.get(0))
    try:
        return None if custom is None or isinstance(custom, bool) else int(custom)
    except (TypeError, ValueError):
        return None


# A figure read or clicked, not zoomed: its toolbar keeps the camera alone, one button at the
# top right that its title does not reach (a row of nine covered a phone's title).
ZOOM_BUTTONS = ["zoom", "pan", "select", "lasso", "zoomin", "zoomout", "autoscale",
                "resetscale"]


def camera_only(fig: go.Figure) -> go.Figure:
    """fig's toolbar without its zoom buttons (in place; returned for chaining)."""
    fig.update_layout(modebar=dict(remove=ZOOM_BUTTONS))
    return fig
