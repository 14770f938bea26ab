"""Statistics per head and per query: layer x head heatmaps (linear or log scale), one
value per query token, and the attention mass on token classes per layer."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import hex_to_rgb

from ..analysis.heads import head_name
from ..core.errors import InputError
from ..maps.downsample import thin_labels
from ._style import DIVERGING_SCALE, HEAD_COLOURS, _base_layout, _check_labels, _esc, _title


def layer_head_heatmap(
    values: np.ndarray,
    title: str,
    colorbar_title: str,
    fmt: str = ".2f",
    diverging: bool = False,
    reference: float | None = None,
    show_values: bool = True,
    reference_name: str = "reference",
    colorscale: str | list | None = None,
    zmin: float | None = None,
    zmax: float | None = None,
    log_scale: bool = False,
) -> go.Figure:
    """[L, H] values as layer (y, L0 on top) x head (x); hover "L3.H7: 1.234".

    log_scale colours by log10 of the size (three decades below the largest, smaller sizes
    take the end colour; signs kept when diverging), so a few large values do not wash out
    the rest; hover and cell values stay the plain numbers.

    diverging centres a red-blue scale on 0 (ablation effects), from -zmax to zmax when zmax
    is given (maps that share a scale). reference (e.g. ln n for uniform entropy) is named in
    the colorbar title and the subtitle. zmin / zmax fix the colour range (e.g. 0 to the
    uniform entropy, or 0 to 1 for fractions); values outside it take the end colours.
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 2:
        raise InputError(f"values must be [L, H], got shape {v.shape}.")
    n_layer, n_head = v.shape
    names = [[head_name(l, h) for h in range(n_head)] for l in range(n_layer)]
    cbar = _esc(colorbar_title)
    note = ""
    if reference is not None:
        cbar += f"<br>({_esc(reference_name)}: {reference:{fmt}})"
        note = f"{reference_name}: {reference:{fmt}}"
    trace = dict(
        z=v, x=np.arange(n_head), y=np.arange(n_layer), text=names,
        hovertemplate=f"%{{text}}: %{{z:{fmt}}}<extra></extra>",
        hoverongaps=False,
        colorbar=dict(title=dict(text=cbar), thickness=14),
        xgap=1, ygap=1,
    )
    if show_values and n_layer <= 16 and n_head <= 16:
        trace.update(texttemplate=f"%{{z:{fmt}}}", textfont=dict(size=10))
    if log_scale:
        return _log_layer_head(trace, v, fmt, diverging, colorscale, title, note, n_layer,
                               n_head)
    if diverging:
        finite = v[np.isfinite(v)]
        span = float(np.abs(finite).max()) if finite.size else 1.0
        if zmax is not None:  # a scale shared with other maps: ±zmax
            span = float(zmax)
        span = span if span > 0 else 1.0
        trace.update(colorscale=colorscale or DIVERGING_SCALE, zmid=0.0, zmin=-span, zmax=span)
    else:
        trace.update(colorscale=colorscale or "Viridis")
        if zmin is not None:
            trace.update(zmin=float(zmin))
        if zmax is not None:
            trace.update(zmax=float(zmax))
    return _layer_head_figure(trace, title, note, n_layer, n_head)


LOG_DECADES = 3


def _log_layer_head(trace: dict, v: np.ndarray, fmt: str, diverging: bool, colorscale,
                    title: str, note: str, n_layer: int, n_head: int) -> go.Figure:
    finite = np.abs(v[np.isfinite(v)])
    top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    floor = top * 10.0 ** -LOG_DECADES
    size = np.log10(np.maximum(np.abs(v), floor) / floor)  # 0 .. LOG_DECADES
    shown = np.where(np.isfinite(v), np.sign(v) * size if diverging else size, np.nan)
    ticks = np.arange(-LOG_DECADES if diverging else 0, LOG_DECADES + 1)
    smallest = f"|x| ≤ {floor:.1g}" if diverging else f"≤ {floor:.1g}"
    labels = [f"{np.sign(k) * floor * 10.0 ** abs(k):.2g}" if k else smallest for k in ticks]
    trace = dict(trace, z=shown, customdata=v,
                 hovertemplate=f"%{{text}}: %{{customdata:{fmt}}}<extra></extra>")
    if "texttemplate" in trace:
        trace["texttemplate"] = f"%{{customdata:{fmt}}}"
    trace["colorbar"] = dict(trace["colorbar"], tickmode="array", tickvals=ticks.tolist(),
                             ticktext=labels)
    span = float(LOG_DECADES)
    if diverging:
        trace.update(colorscale=colorscale or DIVERGING_SCALE, zmid=0.0, zmin=-span, zmax=span)
    else:
        trace.update(colorscale=colorscale or "Viridis", zmin=0.0, zmax=span)
    note = "; ".join(n for n in (note, "log colour scale (3 decades)") if n)
    return _layer_head_figure(trace, title, note, n_layer, n_head)


def _layer_head_figure(trace: dict, title: str, note: str, n_layer: int, n_head: int
                       ) -> go.Figure:
    fig = go.Figure(go.Heatmap(**trace))
    fig = _base_layout(
        fig,
        _title(title, _esc(note)),
        height=int(max(320, 34 * n_layer + 160)),
        meta=dict(cells=[n_layer, n_head]),
        xaxis=dict(title=dict(text="head"), tickmode="array", tickvals=list(range(n_head)),
                   ticktext=[f"H{h}" for h in range(n_head)], showgrid=False, side="top",
                   constrain="domain"),
        yaxis=dict(title=dict(text="layer"), tickmode="array", tickvals=list(range(n_layer)),
                   ticktext=[f"L{l}" for l in range(n_layer)], showgrid=False,
                   autorange="reversed", scaleanchor="x", constrain="domain"),
    )
    return fig


# per_query_line draws bars up to this many queries, a filled line beyond
BARS_UP_TO = 400
_BAR_COLOUR = "#4a7fb5"


def per_query_line(
    values: np.ndarray,
    labels: Sequence[str],
    title: str,
    reference: np.ndarray | float | None = None,
    reference_name: str = "uniform",
    y_title: str = "",
    fmt: str = ".3f",
    max_ticks: int = 60,
) -> go.Figure:
    """Bars of a per-query quantity (e.g. row entropy) with a dashed reference line; past
    BARS_UP_TO queries a filled line instead (thousands of bars are thinner than a pixel and
    draw as an empty chart)."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1:
        raise InputError(f"values must be one number per query [T], got shape {v.shape}.")
    labels = _check_labels(labels, v.size)
    esc = [_esc(t) for t in labels]
    pos = np.arange(v.size)
    common = dict(x=pos, y=v, name=_esc(y_title) or "value",
                  hovertext=[f"query {i} '{t}'" for i, t in enumerate(esc)],
                  hovertemplate=f"%{{hovertext}}: %{{y:{fmt}}}<extra></extra>")
    if v.size <= BARS_UP_TO:
        values_trace = go.Bar(marker_color=_BAR_COLOUR, **common)
    else:
        red, green, blue = hex_to_rgb(_BAR_COLOUR)
        values_trace = go.Scatter(mode="lines", fill="tozeroy", line=dict(color=_BAR_COLOUR,
                                  width=1), fillcolor=f"rgba({red}, {green}, {blue}, 0.35)",
                                  **common)
    fig = go.Figure(values_trace)
    if reference is not None:
        ref = np.asarray(reference, dtype=float)
        if ref.ndim == 0:
            xs, ys = [-0.5, v.size - 0.5], [float(ref), float(ref)]
            hov = f"{_esc(reference_name)}: {float(ref):{fmt}}"
        else:
            if ref.shape != v.shape:
                raise InputError(f"reference has shape {ref.shape}, values have {v.shape}.")
            xs, ys, hov = pos, ref, None
        fig.add_trace(
            go.Scatter(
                x=xs, y=ys, mode="lines", name=_esc(reference_name),
                line=dict(color="#444", dash="dash", width=2),
                hovertemplate=(f"{_esc(reference_name)}: %{{y:{fmt}}}<extra></extra>"
                               if hov is None else f"{hov}<extra></extra>"),
            )
        )
    tickvals, ticktext = thin_labels(esc, max_ticks)
    fig = _base_layout(
        fig,
        _title(title),
        height=380,
        xaxis=dict(title=dict(text="query"), tickmode="array", tickvals=tickvals,
                   ticktext=ticktext, range=[-0.6, v.size - 0.4]),
        yaxis=dict(title=dict(text=_esc(y_title)), rangemode="tozero"),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=1.0, xanchor="right"),
        bargap=0.15,
    )
    return fig


def class_mass_by_layer(
    mass: Mapping[str, np.ndarray], title: str = "Attention mass by token class"
) -> go.Figure:
    """One line per token class: mean over heads of the mass, per layer; hover adds min/max."""
    if not mass:
        raise InputError("mass is empty: give at least one token class.")
    fig = go.Figure()
    n_layer = None
    for k, (name, arr) in enumerate(mass.items()):
        m = np.asarray(arr, dtype=float)
        if m.ndim != 2:
            raise InputError(f"mass[{name!r}] must be [L, H], got shape {m.shape}.")
        n_layer = m.shape[0]
        with np.errstate(all="ignore"):
            mean, lo, hi = np.nanmean(m, 1), np.nanmin(m, 1), np.nanmax(m, 1)
        fig.add_trace(
            go.Scatter(
                x=np.arange(n_layer), y=mean, mode="lines+markers", name=_esc(name),
                line=dict(color=HEAD_COLOURS[k % len(HEAD_COLOURS)], width=2),
                customdata=np.stack([lo, hi], axis=1),
                hovertemplate=(
                    "%{fullData.name}, L%{x}: mean %{y:.3f}"
                    "<br>over heads: min %{customdata[0]:.3f}, max %{customdata[1]:.3f}"
                    "<extra></extra>"
                ),
            )
        )
    fig = _base_layout(
        fig,
        _title(title, "mean over the heads of each layer; point at a layer for the min and "
                      "max head"),
        height=420,
        xaxis=dict(title=dict(text="layer"), tickmode="array",
                   tickvals=list(range(n_layer)), ticktext=[f"L{l}" for l in range(n_layer)]),
        yaxis=dict(title=dict(text="attention mass (fraction)"), rangemode="tozero"),
        hovermode="closest",
    )
    return fig
