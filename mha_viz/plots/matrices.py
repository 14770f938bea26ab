"""Small matrices with their numbers (inside one head: X, Q, K, V, scores, weights) and
labelled tensors."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from ..core.errors import InputError
from ..maps.downsample import thin_labels
from .picking import add_pickable_cells, can_pick
from ._style import DIVERGING_SCALE, MASK_GREY, _base_layout, _check_labels, _esc, _squarish, _title


def matrix_figure(
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str,
    show_values: bool = True,
    max_cells_with_values: int = 400,
    colorscale: str | list | None = None,
    diverging: bool = False,
    fmt: str = ".2f",
    row_title: str = "",
    col_title: str = "",
    max_ticks: int = 60,
) -> go.Figure:
    """A small matrix (Q, K, V, scores, weights) with values in the cells when small.

    Rows and columns sit at integer positions, so repeated labels stay separate rows.
    Non-finite entries (e.g. -inf scores under a mask) are drawn as gaps and hover "masked".
    """
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2:
        raise InputError(f"matrix must be 2-D, got shape {m.shape}.")
    n_row, n_col = m.shape
    rows = [_esc(t) for t in _check_labels(row_labels, n_row, "row_labels")]
    cols = [_esc(t) for t in _check_labels(col_labels, n_col, "col_labels")]
    z = np.where(np.isfinite(m), m, np.nan)
    text = [[f"{rows[i]} ({i}) · {cols[j]} ({j})" for j in range(n_col)] for i in range(n_row)]
    trace = dict(
        z=z, text=text, hoverongaps=False,
        hovertemplate=f"%{{text}}: %{{z:{fmt}}}<extra></extra>",
        colorbar=dict(thickness=14), xgap=1, ygap=1,
    )
    if show_values and n_row * n_col <= max_cells_with_values:
        trace.update(texttemplate=f"%{{z:{fmt}}}", textfont=dict(size=10))
    if diverging:
        finite = z[np.isfinite(z)]
        span = float(np.abs(finite).max()) if finite.size else 1.0
        span = span if span > 0 else 1.0
        trace.update(colorscale=colorscale or DIVERGING_SCALE, zmid=0.0, zmin=-span, zmax=span)
    else:
        trace.update(colorscale=colorscale or "Viridis")
    fig = go.Figure(go.Heatmap(**trace))
    has_gaps = bool(np.isnan(z).any())
    if has_gaps:
        fig.update_layout(plot_bgcolor=MASK_GREY)
    xv, xt = thin_labels(cols, max_ticks)
    yv, yt = thin_labels(rows, max_ticks)
    fig = _base_layout(
        fig,
        _title(title, "grey = masked (-inf)" if has_gaps else ""),
        height=int(min(900, max(300, 28 * n_row + 160))),
        meta=dict(cells=[n_row, n_col]) if _squarish(n_row, n_col) else {},
        xaxis=dict(title=dict(text=_esc(col_title)), tickmode="array", tickvals=xv,
                   ticktext=xt, showgrid=False, zeroline=False, side="top"),
        yaxis=dict(title=dict(text=_esc(row_title)), tickmode="array", tickvals=yv,
                   ticktext=yt, showgrid=False, zeroline=False, autorange="reversed"),
    )
    return fig


def tensor_figure(
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str,
    show_values: bool = True,
    diverging: bool = True,
    colorscale: str | list | None = None,
    fmt: str = ".2f",
    row_title: str = "",
    col_title: str = "",
    max_ticks: int = 48,
    height: int | None = None,
    span: float | None = None,
    pickable: bool = False,
) -> go.Figure:
    """One step's tensor (X, Q, K, V, scores, weights, ...) as a heatmap, cheap at any size.

    Like ``matrix_figure`` but without a per-cell hover-text array: rows and columns are
    category axes whose (unique) names carry the labels, so the hover reads
    "row → column: value" from the axes and a 64 x 768 tensor costs the browser the numbers
    only. show_values writes each value in its cell (use it for small tensors). Non-finite
    entries (-inf scores under a causal mask) are gaps on a grey background.
    diverging centres a red-blue scale on 0 (signed values) reaching ±span (default: the
    largest |value|; two steps given one span share one scale); otherwise ``colorscale``
    (default Viridis) from the smallest to the largest value. pickable: a click on a cell
    selects it (picking.cell_of_point reads (row, column) back), up to
    picking.PICK_MAX_CELLS cells.
    """
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2:
        raise InputError(f"matrix must be 2-D, got shape {m.shape}.")
    n_row, n_col = m.shape
    rows = [_esc(t) for t in _check_labels(row_labels, n_row, "row_labels")]
    cols = [_esc(t) for t in _check_labels(col_labels, n_col, "col_labels")]
    # Category names must be unique or Plotly merges rows: number repeated ones.
    if len(set(rows)) < n_row:
        rows = [f"{i} {t}" for i, t in enumerate(rows)]
    if len(set(cols)) < n_col:
        cols = [f"{j} {t}" for j, t in enumerate(cols)]
    z = np.where(np.isfinite(m), m, np.nan).astype(np.float32)
    trace = dict(z=z, x=cols, y=rows, hoverongaps=False,
                 hovertemplate=f"%{{y}} → %{{x}}: %{{z:{fmt}}}<extra></extra>",
                 colorbar=dict(thickness=14), name=_esc(title))
    if show_values:
        trace.update(texttemplate=f"%{{z:{fmt}}}", textfont=dict(size=10), xgap=1, ygap=1)
    finite = z[np.isfinite(z)]
    if diverging:
        if span is None:
            span = float(np.abs(finite).max()) if finite.size else 1.0
        span = span if span > 0 else 1.0
        trace.update(colorscale=colorscale or DIVERGING_SCALE, zmid=0.0, zmin=-span, zmax=span)
    else:
        trace.update(colorscale=colorscale or "Viridis")
    has_gaps = bool(np.isnan(z).any())
    xv, xt = thin_labels(cols, max_ticks)
    yv, yt = thin_labels(rows, max_ticks)
    fig = go.Figure(go.Heatmap(**trace))
    fig = _base_layout(
        fig,
        _title(title, "grey = masked (−∞)" if has_gaps else ""),
        height=height or int(min(900, max(300, (28 if show_values else 18) * n_row + 180))),
        meta=dict(cells=[n_row, n_col]) if _squarish(n_row, n_col) and not height else {},
        plot_bgcolor=MASK_GREY if has_gaps else "white",
        xaxis=dict(title=dict(text=_esc(col_title)), type="category", tickmode="array",
                   tickvals=[cols[i] for i in xv], ticktext=xt, showgrid=False,
                   zeroline=False),
        yaxis=dict(title=dict(text=_esc(row_title)), type="category", tickmode="array",
                   tickvals=[rows[i] for i in yv], ticktext=yt, showgrid=False,
                   zeroline=False, autorange="reversed"),
    )
    if pickable and can_pick(n_row, n_col):
        add_pickable_cells(fig, cols, rows, z, "%{y} → %{x}", fmt=fmt)
    return fig


def kv_cache_figure(roles: np.ndarray, labels: Sequence[str], role_names: Sequence[str],
                    title: str, colours: Sequence[str]) -> go.Figure:
    """What a step of generation holds: rows Q, K, V, one column per token, each cell one of
    three roles (analysis.one_head.kv_cache_size.cache_roles: 0 not kept, 1 read from the
    cache, 2 computed now) in its colour; the title's note is the key (role_names and
    colours, in that order)."""
    r = np.asarray(roles, dtype=np.int64)
    if r.ndim != 2 or r.shape[0] != 3 or r.size and (r.min() < 0 or r.max() > 2):
        raise InputError(f"roles must be [3, tokens] of 0, 1 or 2, got shape {r.shape}.")
    if len(role_names) != 3 or len(colours) != 3:
        raise InputError("3 role names and 3 colours, one per role.")
    cols = [_esc(t) for t in _check_labels(labels, r.shape[1], "labels")]
    if len(set(cols)) < len(cols):  # categories must be unique, or Plotly merges columns
        cols = [f"{j} {t}" for j, t in enumerate(cols)]
    names = np.array([_esc(n) for n in role_names], dtype=object)[r]
    scale = [[0, colours[0]], [1 / 3, colours[0]], [1 / 3, colours[1]], [2 / 3, colours[1]],
             [2 / 3, colours[2]], [1, colours[2]]]
    fig = go.Figure(go.Heatmap(z=r, x=cols, y=["Q", "K", "V"], customdata=names, zmin=-0.5,
                               zmax=2.5, colorscale=scale, showscale=False, xgap=2, ygap=2,
                               hovertemplate="%{y} of %{x}: %{customdata}<extra></extra>"))
    key = " · ".join(f"<span style='color:{c}'>■</span> {_esc(n)}"
                     for n, c in zip(role_names, colours))
    return _base_layout(fig, _title(title, key), height=300,
                        meta=dict(cells=[3, int(r.shape[1])]),
                        xaxis=dict(type="category", title=dict(text="token")),
                        yaxis=dict(type="category", autorange="reversed"),
                        plot_bgcolor="white")
