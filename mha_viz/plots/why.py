"""Why a head attends where it does (analysis.score_attribution): the parts of one score by
source, as signed bars (red raises the score, blue lowers it, as the source matrix colours
them), and the query source x key source matrix with its row and column totals, so that a
reader can check that the parts add up to the score."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from ..core.errors import InputError
from .picking import ZOOM_BUTTONS
from ._style import DIVERGING_SCALE, _base_layout, _check_labels, _esc, _title

RAISES, LOWERS = "#b2182b", "#2166ac"  # the ends of DIVERGING_SCALE: red up, blue down
TOTAL_COLOUR = "#404040"  # the sum of the bars: neither up nor down
TOTALS_FILL = [[0.0, "#efefef"], [1.0, "#efefef"]]  # the totals' cells: read, not coloured
TOTAL = "total"


def source_bars(labels: Sequence[str], values: np.ndarray, title: str, note: str = "",
                value_name: str = "part of the score", total: float | None = None,
                total_label: str = TOTAL) -> go.Figure:
    """Signed parts [n] of a score by source, one horizontal bar each, in the order given
    (the strongest first, at the top). total: their sum, drawn last as a grey bar of its own
    (trace 1, named total_label), so a reader can check the parts add up to it."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or not v.size:
        raise InputError(f"values must be a non-empty list of parts, got shape {v.shape}")
    names = [_esc(t) for t in _check_labels(labels, v.size)]
    every = v if total is None else np.append(v, total)
    # room beside the bars for their numbers, written outside the short ones
    low, high = min(0.0, float(every.min())), max(0.0, float(every.max()))
    pad = 0.3 * ((high - low) or 1.0)
    fig = go.Figure(go.Bar(
        x=v, y=names, orientation="h", marker_color=[RAISES if x >= 0 else LOWERS for x in v],
        text=[f"{x:+.2f}" for x in v], textposition="outside", cliponaxis=False,
        name="parts", hovertemplate=f"%{{y}}: %{{x:+.3f}}<extra>{_esc(value_name)}</extra>"))
    if total is not None:
        fig.add_trace(go.Bar(
            x=[float(total)], y=[_esc(total_label)], orientation="h",
            marker_color=TOTAL_COLOUR, text=[f"{total:+.2f}"], textposition="outside",
            cliponaxis=False, name=_esc(total_label),
            hovertemplate=f"%{{y}}: %{{x:+.3f}}<extra>the parts' sum</extra>"))
    n_bars = v.size + (total is not None)
    return _base_layout(
        fig, _title(title, note), height=int(120 + 28 * n_bars), showlegend=False,
        modebar=dict(remove=ZOOM_BUTTONS),  # read, not zoomed
        margin=dict(l=110, r=30, b=50),
        xaxis=dict(title=dict(text=_esc(value_name)), zeroline=True, zerolinewidth=2,
                   range=[low - pad if low < 0 else low, high + pad]),
        yaxis=dict(autorange="reversed", type="category"))


def source_matrix(cells: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str],
                  title: str, row_title: str = "query side", col_title: str = "key side",
                  note: str = "") -> go.Figure:
    """A score's parts [rows, cols] (query source x key source, analysis.ScoreParts.cells),
    each cell's signed value written in it, coloured red (raises the score) to blue, and
    beside them their totals: a column of row totals, a row of column totals and, in the
    corner, the sum of every cell (the score), in grey cells of their own.

    Trace 0 holds the cells alone (its z adds up to the score); trace 1 the totals (NaN
    where the cells are)."""
    m = np.asarray(cells, dtype=float)
    if m.ndim != 2 or not m.size:
        raise InputError(f"cells must be a non-empty 2-D matrix, got shape {m.shape}")
    n_row, n_col = m.shape
    rows = [_esc(t) for t in _check_labels(row_labels, n_row, "row_labels")]
    cols = [_esc(t) for t in _check_labels(col_labels, n_col, "col_labels")]
    span = float(np.abs(m).max()) or 1.0
    cell_text = [[f"{rows[i]} × {cols[j]}" for j in range(n_col)] for i in range(n_row)]
    fig = go.Figure(go.Heatmap(
        z=m, x=list(range(n_col)), y=list(range(n_row)), text=cell_text, name="cells",
        colorscale=DIVERGING_SCALE, zmid=0.0, zmin=-span, zmax=span, xgap=1, ygap=1,
        texttemplate="%{z:+.2f}", textfont=dict(size=11),
        hovertemplate="%{text}: %{z:+.3f}<extra></extra>",
        colorbar=dict(thickness=14, nticks=5, title=dict(text="part"))))
    totals = np.full((n_row + 1, n_col + 1), np.nan)
    totals[:n_row, n_col] = m.sum(1)
    totals[n_row, :n_col] = m.sum(0)
    totals[n_row, n_col] = m.sum()
    total_text = [[f"all key sources of {rows[i]}" for _ in range(n_col + 1)]
                  for i in range(n_row)]
    total_text.append([f"all query sources with {c}" for c in cols] + ["every cell: the sum"])
    fig.add_trace(go.Heatmap(
        z=totals, x=list(range(n_col + 1)), y=list(range(n_row + 1)), text=total_text,
        name="totals", colorscale=TOTALS_FILL, showscale=False, xgap=1, ygap=1,
        hoverongaps=False, texttemplate="%{z:+.2f}", textfont=dict(size=11, color="#202020"),
        hovertemplate="%{text}: %{z:+.3f}<extra>total</extra>"))
    # a line between the cells and their totals
    for x0, x1, y0, y1 in ((n_col - 0.5, n_col - 0.5, -0.5, n_row + 0.5),
                           (-0.5, n_col + 0.5, n_row - 0.5, n_row - 0.5)):
        fig.add_shape(type="line", x0=x0, x1=x1, y0=y0, y1=y1,
                      line=dict(color="#202020", width=2))
    return _base_layout(
        fig, _title(title, note), height=int(min(900, max(300, 34 * (n_row + 1) + 170))),
        # mha_viz.plots.fit sizes the cells, wide enough for the sources' names
        meta=dict(cells=[n_row + 1, n_col + 1], labels_across=True),
        modebar=dict(remove=ZOOM_BUTTONS), showlegend=False,
        xaxis=dict(title=dict(text=_esc(col_title)), tickmode="array",
                   tickvals=list(range(n_col + 1)), ticktext=cols + [TOTAL], showgrid=False,
                   zeroline=False, range=[-0.5, n_col + 0.5]),
        yaxis=dict(title=dict(text=_esc(row_title)), tickmode="array",
                   tickvals=list(range(n_row + 1)), ticktext=rows + [TOTAL], showgrid=False,
                   zeroline=False, range=[n_row + 0.5, -0.5]))
