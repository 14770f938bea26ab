"""Cross-attention of an encoder-decoder: a rectangular map, target tokens on the rows (the
positions that read) and source tokens on the columns (what they read)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from ..core.errors import InputError
from ..maps.downsample import thin_labels
from .picking import add_pickable_cells, can_pick
from ._style import HIGHLIGHT, WEIGHT_SCALE, _base_layout, _check_labels, _esc, _title


def cross_attention_heatmap(weights: np.ndarray, target_labels: Sequence[str],
                            source_labels: Sequence[str], title: str = "",
                            strongest: bool = True, max_ticks: int = 40,
                            height: int | None = None, zmax: float | None = None,
                            pickable: bool = False) -> go.Figure:
    """A [T, S] map: row i is how target position i spreads its attention over the source.
    strongest: a dot on each row's most-attended source token (the alignment it suggests).
    pickable: a click on a cell selects it (picking.cell_of_point reads (row, column)
    back), up to picking.PICK_MAX_CELLS cells."""
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
            customdata=[[i, int(j)] for i, j in enumerate(best)],  # a click on it: its cell
            marker=dict(symbol="circle-open", size=11, color=HIGHLIGHT, line=dict(width=2.5)),
            hovertemplate="strongest for %{y}: %{x}<extra></extra>", showlegend=False))
    if pickable and can_pick(n_rows, n_cols):
        add_pickable_cells(fig, cols, rows, z, "target %{y} reads source %{x}")
    row_pos, row_text = thin_labels([_esc(t) for t in target_labels], max_ticks)
    col_pos, col_text = thin_labels([_esc(t) for t in source_labels], max_ticks)
    note = "rows: target tokens (queries) · columns: source tokens (keys)"
    if strongest:
        note += " · ○ each row's strongest source token"
    return _base_layout(
        fig, _title(title, note),
        height=height or int(min(900, max(380, 24 * n_rows + 220))),
        meta=dict(cells=[n_rows, n_cols]),  # mha_viz.plots.fit keeps the cells square
        xaxis=dict(title=dict(text="source (key)"), type="category", tickmode="array",
                   tickvals=[cols[p] for p in col_pos], ticktext=col_text, showgrid=False,
                   zeroline=False, constrain="domain", range=[-0.5, n_cols - 0.5],
                   tickangle=-45),
        yaxis=dict(title=dict(text="target (query)"), type="category", tickmode="array",
                   tickvals=[rows[p] for p in row_pos], ticktext=row_text, showgrid=False,
                   zeroline=False, range=[n_rows - 0.5, -0.5], scaleanchor="x",
                   constrain="domain"))


def cross_attention_over_image(image: np.ndarray, weights: np.ndarray, patch_width: int,
                               target_labels: Sequence[str], title: str = "",
                               row_px: int = 30, plot_px: int = 700) -> go.Figure:
    """Cross-modal attention on the pixels: the image the encoder read (top) and, under it,
    one row per written token: its attention over the image's strips, each strip's weight
    drawn across the strip's patch_width pixel columns, on the same x axis as the image.
    plot_px: the plot area's width on screen, so the image's pixels come out about square."""
    from plotly.subplots import make_subplots

    picture = np.asarray(image, dtype=np.float32)
    z = np.asarray(weights, dtype=np.float32)
    if picture.ndim != 2 or z.ndim != 2 or z.shape[1] * patch_width != picture.shape[1]:
        raise InputError(f"an image [H, W] and weights [T, W / {patch_width}] are needed, got "
                         f"{list(picture.shape)} and {list(z.shape)}")
    n_rows, width = z.shape[0], picture.shape[1]
    rows = [f"{i} '{_esc(t)}'" for i, t in enumerate(_check_labels(target_labels, n_rows,
                                                                  "target labels"))]
    per_pixel = np.repeat(z, patch_width, axis=1)
    x = np.arange(width)
    image_px = int(np.clip(picture.shape[0] * plot_px / width, 24, 240))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.03,
                        row_heights=[image_px, row_px * n_rows])
    fig.add_trace(go.Heatmap(z=picture, x=x, colorscale="Greys", reversescale=False,
                             showscale=False, name="image",
                             hovertemplate="pixel column %{x}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Heatmap(
        z=per_pixel, x=x, y=rows, colorscale=WEIGHT_SCALE, zmin=0.0,
        zmax=float(z.max()) if z.size and z.max() > 0 else 1.0, name="cross-attention",
        customdata=np.repeat(np.arange(z.shape[1]), patch_width)[None].repeat(n_rows, 0),
        hovertemplate="%{y} reads strip %{customdata}: %{z:.3f}<extra></extra>",
        # under the plot, across: the plot keeps the page's width on a phone
        colorbar=dict(title=dict(text="weight", side="top"), orientation="h",
                      thickness=10, len=0.5, nticks=3, x=0.5, xanchor="center",
                      y=-0.22, yanchor="top")),
        row=2, col=1)
    # subplots' axes by name (row 1: xaxis/yaxis, row 2: xaxis2/yaxis2): _base_layout
    # returns a figure without make_subplots' grid
    return _base_layout(
        fig, _title(title, "the image read, then each token's attention"),
        height=int(image_px + row_px * n_rows + 240), margin=dict(l=60, r=20, b=110),
        yaxis=dict(autorange="reversed", showticklabels=False),
        yaxis2=dict(autorange="reversed", type="category", title=dict(text="written token")),
        xaxis2=dict(title=dict(text="pixel column"), range=[-0.5, width - 0.5],
                    tickvals=[int(v) for v in np.arange(0, width, 2 * patch_width)]))
