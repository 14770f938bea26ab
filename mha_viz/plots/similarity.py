"""Head similarity: the head-to-head distance matrix and the 2-D map of heads."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..analysis.heads import head_name
from ..core.errors import InputError
from ..maps.downsample import block_ranges, block_reduce
from ._style import HIGHLIGHT, LAYER_COLOURS, _base_layout, _title

# Past this many heads the matrix is drawn in blocks: a 2,048-head trace would otherwise
# send 4.2 M cells to the browser.
MAX_MATRIX_HEADS = 512

_KIND_TEXT = {
    "js": "Jensen-Shannon divergence (nats)",
    "js_distance": "Jensen-Shannon distance",
    "cosine": "cosine distance (1 − cos of the maps)",
}


def _layer_colourscale(n_layer: int) -> list:
    # Stepped scale: value l in [l - 0.5, l + 0.5] gets exactly layer l's colour.
    scale = []
    for l in range(n_layer):
        c = LAYER_COLOURS[l % len(LAYER_COLOURS)]
        scale += [[l / n_layer, c], [(l + 1) / n_layer, c]]
    return scale


def distance_heatmap(
    distances: np.ndarray,
    n_head: int,
    order: np.ndarray | None = None,
    kind: str = "js",
    title: str | None = None,
) -> go.Figure:
    """Head-by-head distance matrix (N = L * H, head n = l * n_head + h).

    Without order: layer order, lines at layer boundaries. With order (e.g. the leaf order
    of a clustering): rows/cols permuted, ticks "L5.H1", and a strip of layer colours along
    the top and left (same colours as ``head_scatter``).
    """
    if kind not in _KIND_TEXT:
        raise InputError(f"kind must be one of {sorted(_KIND_TEXT)}, got {kind!r}.")
    d = np.asarray(distances, dtype=float)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise InputError(f"distances must be a square [N, N] array, got shape {d.shape}.")
    n = d.shape[0]
    if n_head < 1 or n % n_head:
        raise InputError(f"{n} heads cannot be split into layers of {n_head} heads.")
    n_layer = n // n_head
    names = np.array([head_name(i // n_head, i % n_head) for i in range(n)])
    if order is None:
        idx = np.arange(n)
    else:
        idx = np.asarray(order, dtype=int)
        if sorted(idx.tolist()) != list(range(n)):
            raise InputError(f"order must be a permutation of 0..{n - 1}.")
    shown = d[np.ix_(idx, idx)]
    # Head names are unique, so categorical axes are safe here and give the hover its
    # names for free (no N x N text array).
    cat = names[idx].tolist()
    kind_text = _KIND_TEXT[kind]
    shown, factor = block_reduce(shown, MAX_MATRIX_HEADS)
    if factor > 1:  # thousands of heads: blocks of neighbours in the shown order, averaged
        cat = [f"{cat[first]}…{cat[last]}" for first, last in block_ranges(n, factor)]
        return _reduced_distance_figure(shown, cat, factor, n, kind_text, title)
    fig = go.Figure()
    fig.add_trace(
        go.Heatmap(  # float32 halves the figure (270 heads: 780 -> 390 kB) for 4 shown digits
            z=shown.astype(np.float32), x=cat, y=cat, colorscale="Viridis", zmin=0.0,
            hovertemplate="%{y} ↔ %{x}: %{z:.4f}<extra></extra>",
            colorbar=dict(title=dict(text=kind_text.replace(" (", "<br>(")), thickness=14),
            name="distance",
        )
    )
    axis = dict(type="category", showgrid=False, zeroline=False, tickfont=dict(size=9))
    layout = {}
    if order is None:
        mid = [names[l * n_head + n_head // 2] for l in range(n_layer)]
        for ax in ("x", "y"):
            layout[f"{ax}axis"] = dict(axis, tickmode="array", tickvals=mid,
                                       ticktext=[f"L{l}" for l in range(n_layer)])
        for l in range(1, n_layer):
            p = l * n_head - 0.5  # category axes place shapes by serial number
            fig.add_shape(type="line", x0=p, x1=p, y0=-0.5, y1=n - 0.5,
                          line=dict(color="white", width=1))
            fig.add_shape(type="line", y0=p, y1=p, x0=-0.5, x1=n - 0.5,
                          line=dict(color="white", width=1))
        note = "heads in layer order; white lines separate layers"
        layout["xaxis"].update(domain=[0, 1])
        layout["yaxis"].update(autorange="reversed", domain=[0, 1])
    else:
        layer_of = (idx // n_head).astype(float)
        strip = dict(colorscale=_layer_colourscale(n_layer), zmin=-0.5, zmax=n_layer - 0.5,
                     showscale=False, name="layer",
                     hovertemplate="%{text}<extra></extra>")
        layer_text = [f"{c} (layer {c.split('.')[0][1:]})" for c in cat]
        fig.add_trace(go.Heatmap(z=layer_of[:, None], x=["layer"], y=cat, xaxis="x2",
                                 text=[[t] for t in layer_text], **strip))
        fig.add_trace(go.Heatmap(z=layer_of[None, :], x=cat, y=["layer"], yaxis="y2",
                                 text=[layer_text], **strip))
        layout["xaxis"] = dict(axis, domain=[0.05, 1.0])
        # Drawn on the strip's left edge, so the tick labels sit left of the strip.
        layout["yaxis"] = dict(axis, domain=[0.0, 0.95], autorange="reversed", anchor="x2")
        layout["xaxis2"] = dict(domain=[0.0, 0.035], anchor="y", showticklabels=False,
                                showgrid=False, zeroline=False)
        layout["yaxis2"] = dict(domain=[0.965, 1.0], anchor="x", showticklabels=False,
                                showgrid=False, zeroline=False)
        note = "reordered by clustering; coloured strips = layer of each head"
    fig = _base_layout(
        fig,
        _title(title if title is not None else f"Head-to-head {kind_text}", note),
        height=int(min(950, max(450, 5 * n + 200))),
        meta=dict(cells=[n, n]),
        **layout,
    )
    return fig


def _reduced_distance_figure(shown: np.ndarray, cat: list[str], factor: int, n: int,
                             kind_text: str, title: str | None) -> go.Figure:
    fig = go.Figure(go.Heatmap(
        z=shown.astype(np.float32), x=cat, y=cat, colorscale="Viridis", zmin=0.0,
        hovertemplate="%{y} ↔ %{x}: mean %{z:.4f}<extra></extra>",
        colorbar=dict(title=dict(text=kind_text.replace(" (", "<br>(")), thickness=14)))
    axis = dict(type="category", showgrid=False, zeroline=False, showticklabels=False)
    note = (f"{n:,} heads, too many to draw one by one: each cell is the mean over a block "
            f"of {factor} x {factor} heads")
    return _base_layout(fig, _title(title if title is not None
                                    else f"Head-to-head {kind_text}", note),
                        height=950, meta=dict(cells=[len(cat), len(cat)]),
                        xaxis=axis, yaxis=dict(axis, autorange="reversed"))


def head_scatter(
    coords: np.ndarray,
    n_head: int,
    highlight: list[int] | None = None,
    title: str = "Heads in 2-D (MDS of the distance matrix)",
) -> go.Figure:
    """2-D map of heads, one colour (and legend entry) per layer; hover "L5.H1".

    Points carry customdata [layer, head]. highlight lists head indices n = l*H + h to ring.
    """
    c = np.asarray(coords, dtype=float)
    if c.ndim != 2 or c.shape[1] != 2:
        raise InputError(f"coords must be [N, 2], got shape {c.shape}.")
    n = c.shape[0]
    if n_head < 1 or n % n_head:
        raise InputError(f"{n} heads cannot be split into layers of {n_head} heads.")
    n_layer = n // n_head
    fig = go.Figure()
    for l in range(n_layer):
        sl = slice(l * n_head, (l + 1) * n_head)
        fig.add_trace(
            go.Scatter(
                x=c[sl, 0], y=c[sl, 1], mode="markers", name=f"L{l}",
                marker=dict(size=10, color=LAYER_COLOURS[l % len(LAYER_COLOURS)],
                            line=dict(width=0.5, color="white")),
                customdata=np.stack([np.full(n_head, l), np.arange(n_head)], axis=1),
                hovertext=[head_name(l, h) for h in range(n_head)],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    if highlight:
        hl = np.asarray(highlight, dtype=int)
        if hl.min() < 0 or hl.max() >= n:
            raise InputError(f"highlight indices must lie in 0..{n - 1}.")
        fig.add_trace(
            go.Scatter(
                x=c[hl, 0], y=c[hl, 1], mode="markers+text", name="highlighted",
                # only the first (the chosen head) is named: close neighbours' names would
                # print over each other; the page lists them, and they are ringed
                text=[head_name(i // n_head, i % n_head) if k == 0 else ""
                      for k, i in enumerate(hl)],
                textposition="top center",
                marker=dict(size=18, color="rgba(0,0,0,0)", line=dict(width=2, color=HIGHLIGHT)),
                hoverinfo="skip",
            )
        )
    fig = _base_layout(
        fig,
        _title(title, "heads that attend alike sit close together; colour = layer"),
        height=560,
        xaxis=dict(title=dict(text="MDS 1"), zeroline=False),
        yaxis=dict(title=dict(text="MDS 2"), zeroline=False, scaleanchor="x"),
        legend=dict(title=dict(text="layer")),
    )
    return fig
