"""Heads at long range (analysis.long_range): the needle-in-a-haystack grid (copy accuracy by
context length x needle depth, as the papers draw it), and labelled bars for a few numbers
side by side (losses with and without a window, copy accuracy with heads switched off).
Layer x head maps (retrieval scores, sinks, window costs) are layer_head_heatmap's."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from ..core.errors import InputError
from .picking import ZOOM_BUTTONS
from ._style import _base_layout, _check_labels, _esc, _title

GRID_SCALE = "RdYlGn"  # red: the needle lost, green: copied (the papers' colours)
BAR_COLOUR, MARK_COLOUR = "#4a7fb5", "#d62728"


def needle_grid_figure(lengths: Sequence[int], depths: Sequence[float], accuracy: np.ndarray,
                       title: str, value_name: str = "copy accuracy") -> go.Figure:
    """accuracy [len(lengths), len(depths)] in 0..1 as depth (y, 0% on top) x context length
    (x, one column per length, in order), each cell labelled with its value."""
    v = np.asarray(accuracy, dtype=float)
    if v.shape != (len(lengths), len(depths)) or not v.size:
        raise InputError(f"accuracy must be [lengths, depths] = [{len(lengths)}, "
                         f"{len(depths)}], got {list(v.shape)}")
    x_labels = [f"{int(n):,}" for n in lengths]
    y_labels = [f"{100 * float(d):.0f}%" for d in depths]
    fig = go.Figure(go.Heatmap(
        z=v.T, x=list(range(len(lengths))), y=list(range(len(depths))), zmin=0.0, zmax=1.0,
        colorscale=GRID_SCALE, xgap=2, ygap=2, texttemplate="%{z:.2f}",
        customdata=[[f"{x} tokens, needle at {y}" for x in x_labels] for y in y_labels],
        hovertemplate="%{customdata}: %{z:.2f}<extra></extra>",
        colorbar=dict(title=dict(text=_esc(value_name)), thickness=14)))
    # no square cells (meta "cells"): a few wide columns, as the papers draw the grid
    return _base_layout(
        fig, _title(title), height=int(max(300, 46 * len(depths) + 170)),
        xaxis=dict(title=dict(text="context length (tokens)"), tickmode="array",
                   tickvals=list(range(len(lengths))), ticktext=x_labels, showgrid=False),
        yaxis=dict(title=dict(text="needle depth"), tickmode="array",
                   tickvals=list(range(len(depths))), ticktext=y_labels, showgrid=False,
                   autorange="reversed"))


def labelled_bars(labels: Sequence[str], values: Sequence[float], title: str,
                  value_name: str, fmt: str = ".3f", marked: Sequence[bool] | None = None,
                  note: str = "") -> go.Figure:
    """One horizontal bar per label, in the order given (the first at the top), its label and
    value written on it (beside it when the bar is too short): the plot keeps the width a
    phone has, with no column of labels beside it. Marked bars (the one a reader compares
    the others with) in the mark colour."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or not v.size:
        raise InputError(f"values must be a non-empty list, got shape {v.shape}")
    names = [_esc(t) for t in _check_labels(labels, v.size)]
    marked = [False] * v.size if marked is None else list(marked)
    top = float(np.nanmax(v)) if np.isfinite(v).any() else 1.0
    fig = go.Figure(go.Bar(
        x=v, y=list(range(v.size)), orientation="h", customdata=names,
        text=[f"{name}: {x:{fmt}}" for name, x in zip(names, v)], textposition="auto",
        insidetextanchor="start", cliponaxis=False,
        marker_color=[MARK_COLOUR if m else BAR_COLOUR for m in marked],
        hovertemplate=f"%{{customdata}}: %{{x:{fmt}}}<extra>{_esc(value_name)}</extra>"))
    return _base_layout(
        fig, _title(title, _esc(note)), height=int(130 + 40 * v.size), showlegend=False,
        modebar=dict(remove=ZOOM_BUTTONS), margin=dict(l=20, r=20),
        xaxis=dict(title=dict(text=_esc(value_name)), range=[0, 1.05 * top if top > 0 else 1]),
        yaxis=dict(showticklabels=False, autorange="reversed", showgrid=False))
