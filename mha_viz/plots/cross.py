"""Cross-attention of an encoder-decoder: a rectangular map, target tokens on the rows (the
positions that read) and source tokens on the columns (what they read)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from ..downsample import thin_labels
from ..errors import InputError
from ._style import HIGHLIGHT, WEIGHT_SCALE, _base_layout, _check_labels, _esc, _title


def cross_attention_heatmap(weights: np.ndarray, target_labels: Sequence[str],
                            source_labels: Sequence[str], title: str = "",
                            strongest: bool = True, max_ticks: int = 40,
                            height: int | None = None, zmax: float | None = None
                            ) -> go.Figure:
    """A [T, S] map: row i is how target position i spreads its attention over the source.
    strongest: a dot on each row's most-attended source token (the alignment it suggests)."""
    z = np.asarray(weights, dtype=np.float32)
    if z.ndim != 2:
        raise InputError(f"a cross-attention map is [T, S], got shape {list(z.shape)}")
    n_rows, n_cols = z.shape
    rows = [f"{i} '{_esc(t)}'" for i, t in enumerate(_check_labels(target_labels, n_rows,
                                                                  "target labels"))]
    cols = [f"{j} '{_esc(t)}'" for j, t in enumerate(_check_labels(source_labels, n_cols,
                                                                  "source labels"))]
    top = float(zmax) if zmax is not None else float(z.max()) if z.size else 1.0
    fig = go.Figure(go.Heatmap(
        z=z, x=cols, y=rows, colorscale=WEIGHT_SCALE, zmin=0.0, zmax=top if top > 0 else 1.0,
        name="cross-attention",
        hovertemplate="target %{y} reads source %{x}: %{z:.3f}<extra></extra>",
        colorbar=dict(title=dict(text="weight"), thickness=14)))
    if strongest and z.size:
        best = z.argmax(axis=1)
        fig.add_trace(go.Scatter(
            x=[cols[j] for j in best], y=rows, mode="markers", name="strongest source",
            marker=dict(symbol="circle-open", size=11, color=HIGHLIGHT, line=dict(width=2.5)),
            hovertemplate="strongest for %{y}: %{x}<extra></extra>", showlegend=False))
    row_pos, row_text = thin_labels([_esc(t) for t in target_labels], max_ticks)
    col_pos, col_text = thin_labels([_esc(t) for t in source_labels], max_ticks)
    note = "rows: target tokens (queries) · columns: source tokens (keys)"
    if strongest:
        note += " · ○ each row's strongest source token"
    return _base_layout(
        fig, _title(title, note),
        height=height or int(min(900, max(380, 24 * n_rows + 220))),
        meta=dict(cells=[n_rows, n_cols]),  # mha_viz.fit keeps the cells square
        xaxis=dict(title=dict(text="source (key)"), type="category", tickmode="array",
                   tickvals=[cols[p] for p in col_pos], ticktext=col_text, showgrid=False,
                   zeroline=False, constrain="domain", range=[-0.5, n_cols - 0.5],
                   tickangle=-45),
        yaxis=dict(title=dict(text="target (query)"), type="category", tickmode="array",
                   tickvals=[rows[p] for p in row_pos], ticktext=row_text, showgrid=False,
                   zeroline=False, range=[n_rows - 0.5, -0.5], scaleanchor="x",
                   constrain="domain"))
