"""The token-to-token line view (BertViz's head view): queries on the left, keys on the
right, one line per weight."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from ..analysis.heads import head_name
from ..core.errors import InputError
from ._style import HEAD_COLOURS, _base_layout, _check_labels, _esc, _title

_LINE_BINS = (0.05, 0.1, 0.2, 0.4, 0.7)  # upper edges below 1; min_weight is the first edge


def line_view(
    attention: np.ndarray,
    labels: Sequence[str],
    heads: list[int] | None = None,
    min_weight: float = 0.02,
    max_tokens: int = 200,
    layer: int | None = None,
    query: int | None = None,
    title: str | None = None,
    offset: int = 0,
    width: int | None = 560,
    value_name: str = "weight",
) -> go.Figure:
    """BertViz-style head view: queries on the left, keys on the right, one line per weight.

    ``attention`` is one head [T, T] or a layer's heads [H, T, T]; ``heads`` picks which
    slices of a [H, T, T] array to draw (None: all) and names them H{h} (L{layer}.H{h}
    when layer is given). Lines are grouped into a few opacity bins per head, one
    trace each. ``query`` draws only that query's lines (an index into ``attention``).
    ``offset`` is added to the positions shown in hovers, for a window cut from a longer
    input. ``width`` None lets the figure fill its container. ``value_name``: what a line
    stands for ("weight"; a value-weighted map's "share moved").
    """
    a = np.asarray(attention)
    if a.ndim == 2:
        a = a[None]
        ids = [heads[0] if heads else 0]
    elif a.ndim == 3:
        ids = list(range(a.shape[0])) if heads is None else [int(h) for h in heads]
        bad = [h for h in ids if not 0 <= h < a.shape[0]]
        if bad:
            raise InputError(f"heads {bad} are out of range for {a.shape[0]} heads.")
        a = a[ids]
    else:
        raise InputError(f"attention must be [T, T] or [H, T, T], got shape {a.shape}.")
    if a.shape[-1] != a.shape[-2]:
        raise InputError(f"attention maps must be square, got shape {a.shape}.")
    n_tok = a.shape[-1]
    labels = _check_labels(labels, n_tok)
    shown = min(n_tok, max_tokens)
    a = a[:, :shown, :shown]
    if query is not None and not 0 <= query < shown:
        raise InputError(f"query {query} is outside the {shown} shown tokens.")

    edges = [min_weight] + [e for e in _LINE_BINS if e > min_weight] + [np.inf]
    esc = [_esc(t) for t in labels[:shown]]
    # Traces as dicts, checked once by go.Figure(data=traces) at the end: a go.Scatter is
    # checked when made and copied and checked again by the figure (half of a build), and
    # add_trace costs ~2 ms per call
    traces = []
    for k, h in enumerate(ids):
        colour = HEAD_COLOURS[k % len(HEAD_COLOURS)]
        name = head_name(layer, h) if layer is not None else f"H{h}"
        w = a[k]
        if query is not None:
            keep_rows = np.zeros(shown, dtype=bool)
            keep_rows[query] = True
            w = np.where(keep_rows[:, None], w, 0.0)
        for lo, hi in zip(edges[:-1], edges[1:]):
            qi, kj = np.nonzero((w >= lo) & (w < hi) & (w > 0))  # 0 is never a line
            if qi.size == 0:
                continue
            # One trace per bin: segments joined with NaN breaks (x 0 -> 1 per line). Numpy
            # arrays: Plotly keeps them and sends them as typed arrays, where lists are
            # checked and copied item by item (a third of a head's build).
            xs = np.tile(np.array([0.0, 1.0, np.nan], dtype=np.float32), qi.size)
            ys = np.stack([qi, kj, np.zeros_like(qi)], axis=1).ravel().astype(np.float32)
            ys[2::3] = np.nan
            upper = min(hi, 1.0)
            mid = (lo + upper) / 2
            hover = None
            if qi.size <= 400:  # per-line hover only when it stays cheap
                hover = []
                for i, j in zip(qi, kj):
                    s = (f"{name}: query {i + offset} '{esc[i]}' → key {j + offset} "
                         f"'{esc[j]}': {w[i, j]:.3f}")
                    hover += [s, s, None]
            traces.append(
                dict(
                    type="scatter", x=xs, y=ys,  # NaN breaks the line (connectgaps=False)
                    mode="lines",
                    line=dict(color=colour, width=0.6 + 3.0 * mid),
                    opacity=float(np.clip(0.15 + 0.85 * mid / 0.7, 0.15, 1.0)),
                    name=name,
                    legendgroup=name,
                    showlegend=False,
                    hoverinfo="text" if hover else "skip",
                    hovertext=None if hover is None else np.array(hover, dtype=object),
                    connectgaps=False,
                )
            )
        # Legend entry at full opacity (the bins are faint); clicking it toggles the group.
        traces.append(dict(type="scatter", x=[None], y=[None], mode="lines", name=name,
                           line=dict(color=colour, width=3), legendgroup=name,
                           hoverinfo="skip"))
    pos = np.arange(shown)
    for side, x, anchor in (("query", 0.0, "middle left"), ("key", 1.0, "middle right")):
        traces.append(
            dict(
                type="scatter", x=np.full(shown, x), y=pos, mode="text", text=esc,
                textposition=anchor, customdata=pos + offset,
                hovertext=[f"{side} {i + offset} '{t}'" for i, t in enumerate(esc)],
                hovertemplate="%{hovertext}<extra></extra>",
                showlegend=False, name=f"{side} tokens",
                textfont=dict(size=12, color="#222"),
            )
        )
    fig = go.Figure(data=traces)
    notes = [f"lines: {value_name} ≥ {min_weight:g}; darker and thicker = larger {value_name}"]
    if shown < n_tok:
        notes.append(f"showing the first {shown} of {n_tok} tokens (weights to later keys hidden)")
    if query is not None:
        notes.append(f"only query {query + offset} '{_esc(labels[query])}'")
    default = "Head view: query (left) → key (right)"
    fig = _base_layout(
        fig,
        _title(default if title is None else title, "; ".join(notes)),
        height=int(max(300, 17 * shown + 140)),
        width=width,
        xaxis=dict(visible=False, range=[-1.1, 2.1], fixedrange=True),
        yaxis=dict(visible=False, range=[shown - 0.5, -0.8]),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0.0),
        margin=dict(l=10, r=10, t=110, b=10),
        hovermode="closest",
    )
    return fig
