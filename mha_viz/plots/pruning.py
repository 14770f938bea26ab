"""The pruning curve: the score as heads are removed."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ..core.errors import InputError
from ._style import _base_layout, _esc, _title


def pruning_curve_figure(
    fractions: np.ndarray,
    scores: np.ndarray,
    baseline: float | None = None,
    score_name: str = "score",
    title: str = "Score as heads are removed",
) -> go.Figure:
    """Score against the fraction of heads removed (x in percent), with a dashed baseline."""
    x = np.asarray(fractions, dtype=float) * 100.0
    y = np.asarray(scores, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise InputError(f"fractions {x.shape} and scores {y.shape} must be equal-length 1-D.")
    name = _esc(score_name)
    fig = go.Figure(
        go.Scatter(
            x=x, y=y, mode="lines+markers", name=name, line=dict(color="#1f77b4", width=2),
            hovertemplate=f"%{{x:.1f}}% of heads removed<br>{name}: %{{y:.4f}}<extra></extra>",
        )
    )
    if baseline is not None:
        lo, hi = (float(x.min()), float(x.max())) if x.size else (0.0, 100.0)
        fig.add_trace(
            go.Scatter(
                x=[lo, hi], y=[baseline, baseline], mode="lines", name="all heads kept",
                line=dict(color="#444", dash="dash"),
                hovertemplate=f"all heads kept: {float(baseline):.4f}<extra></extra>",
            )
        )
    fig = _base_layout(
        fig,
        _title(title),
        height=420,
        xaxis=dict(title=dict(text="heads removed"), ticksuffix="%", rangemode="tozero"),
        yaxis=dict(title=dict(text=name)),
        hovermode="closest",
    )
    return fig


KIND_COLOURS = {"encoder self-attention": "#1f77b4", "decoder self-attention": "#2ca02c",
                "cross-attention": "#d62728"}


def kept_heads_figure(fractions: np.ndarray, kept: dict[str, np.ndarray],
                      title: str = "Heads still on, by kind") -> go.Figure:
    """For each kind of head (label -> [steps]), the share still on after each pruning step,
    against the fraction of all heads removed (both in percent)."""
    x = np.asarray(fractions, dtype=float) * 100.0
    fig = go.Figure()
    for label, shares in kept.items():
        y = np.asarray(shares, dtype=float) * 100.0
        if y.shape != x.shape:
            raise InputError(f"{label}: {y.shape[0]} steps, the curve has {x.shape[0]}")
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="lines+markers", name=_esc(label),
            line=dict(color=KIND_COLOURS.get(label), width=2),
            hovertemplate=f"{_esc(label)}<br>%{{x:.1f}}% of all heads removed<br>"
                          f"%{{y:.0f}}% of these still on<extra></extra>"))
    return _base_layout(
        fig, _title(title), height=360,
        xaxis=dict(title=dict(text="heads removed (all kinds)"), ticksuffix="%",
                   rangemode="tozero"),
        yaxis=dict(title=dict(text="still on"), ticksuffix="%", range=[-3, 103]),
        hovermode="closest", legend=dict(orientation="h", y=-0.25))
