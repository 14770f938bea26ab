"""A text as a strip of tokens, per_row a row, each cell coloured by one value (a token's loss
on Predictions, a feature's activation on Features), with one transparent marker over each
cell that takes a click or a tap (a heatmap sends no selection events) and whose
customdata is the token's position (picking.index_of_point reads it back)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from ._style import _base_layout, _check_labels, _esc, _title

CELL_CHARS = 14  # characters of a token written in its cell (the hover gives it whole)
NARROW_CELL_CHARS = 6  # ... in a strip of six tokens a row or fewer (a phone's)
NARROW_ROW = 6


def token_strip(tokens: Sequence[str], values: np.ndarray, hover: Sequence[str], *,
                per_row: int, colorscale, zmax: float, title: str, note: str,
                marked: int | None = None) -> go.Figure:
    """The strip (see the module docstring): values [T] from 0 (white) to zmax, NaN left
    blank; hover[i] over token i; marked: a position outlined (the one a page follows)."""
    tokens = _check_labels(tokens, len(values), "tokens")
    hover = _check_labels(hover, len(values), "hover texts")
    n = len(tokens)
    rows = -(-n // per_row)
    narrow = per_row <= NARROW_ROW
    z = np.full((rows, per_row), np.nan)
    text = np.full((rows, per_row), "", dtype=object)
    tips = np.full((rows, per_row), "", dtype=object)
    for i in range(n):
        z[i // per_row, i % per_row] = values[i]
        token = tokens[i][:CELL_CHARS]
        if narrow and len(token) > NARROW_CELL_CHARS:  # "<|endoftext|>" overflowed its cell
            token = token[:NARROW_CELL_CHARS - 1] + "…"
        text[i // per_row, i % per_row] = _esc(token)
        tips[i // per_row, i % per_row] = hover[i]
    fig = go.Figure(go.Heatmap(
        z=z, text=text, customdata=tips, texttemplate="%{text}", textfont=dict(size=13),
        hovertemplate="%{customdata}<extra></extra>", hoverongaps=False,
        colorscale=colorscale, zmin=0.0, zmax=max(zmax, 1e-6), xgap=2, ygap=2,
        # a colour bar beside a strip two rows high cannot hold its labels: the note says
        # what the colours mean, the hover gives each value
        showscale=False))
    positions = np.arange(n)
    fig.add_trace(go.Scatter(
        x=(positions % per_row).tolist(), y=(positions // per_row).tolist(), mode="markers",
        marker=dict(symbol="square", size=26, color="rgba(0,0,0,0)", line=dict(width=0)),
        customdata=positions.tolist(), hovertext=list(hover),
        hovertemplate="%{hovertext}<extra></extra>", showlegend=False, name="tokens"))
    shapes = []
    if marked is not None and 0 <= int(marked) < n:
        row, col = divmod(int(marked), per_row)
        shapes.append(dict(type="rect", x0=col - 0.5, x1=col + 0.5, y0=row - 0.5, y1=row + 0.5,
                           line=dict(color="#202020", width=3), name="marked token"))
    return _base_layout(
        fig, _title(title, note), shapes=shapes,
        # one row of cells ~40 px high: the title and its note take the top 80
        height=int(90 + 40 * rows), margin=dict(l=10, r=70, t=80, b=10),
        xaxis=dict(visible=False, range=[-0.5, per_row - 0.5], fixedrange=True),
        yaxis=dict(visible=False, range=[rows - 0.5, -0.5], fixedrange=True),
        plot_bgcolor="white")
