"""Predictions: the text as a strip of tokens coloured by their loss."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from ._style import _esc, _title, _base_layout, _check_labels


def token_loss_strip(tokens: Sequence[str], loss: np.ndarray, hover: Sequence[str],
                     per_row: int = 12, title: str = "How surprised the model was by each token",
                     max_loss: float | None = None, clickable: bool = True,
                     given: str = "the tokens before it") -> go.Figure:
    """The text as a grid of cells, per_row tokens a row, each coloured by the loss of
    predicting it (-log p, nats; the first token is predicted by nothing and stays blank).
    hover[i] is shown over token i (e.g. what the model expected instead). clickable: the
    note invites a click (the page explains the clicked prediction); given: what each
    prediction is conditioned on, for the note."""
    tokens = _check_labels(tokens, len(loss), "tokens")
    hover = _check_labels(hover, len(loss), "hover texts")
    n = len(tokens)
    rows = -(-n // per_row)
    z = np.full((rows, per_row), np.nan)
    text = np.full((rows, per_row), "", dtype=object)
    tips = np.full((rows, per_row), "", dtype=object)
    for i in range(n):
        z[i // per_row, i % per_row] = loss[i]
        text[i // per_row, i % per_row] = _esc(tokens[i][:14])
        tips[i // per_row, i % per_row] = hover[i]
    finite = np.asarray(loss, dtype=float)
    finite = finite[np.isfinite(finite)]
    top = max_loss or (float(finite.max()) if finite.size else 1.0)
    fig = go.Figure(go.Heatmap(
        z=z, text=text, customdata=tips, texttemplate="%{text}", textfont=dict(size=13),
        hovertemplate="%{customdata}<extra></extra>", hoverongaps=False,
        # purple, not red: on the Predictions page red and blue say which way a head pushes
        # the prediction (one colour meaning per page)
        colorscale="Purples", zmin=0.0, zmax=max(top, 1e-6), xgap=2, ygap=2,
        # a colour bar beside a strip two rows high cannot hold its labels: the note says
        # what the colours mean, the hover gives each value
        showscale=False))
    # A heatmap sends no selection events: transparent markers over the cells take the click
    # (customdata = the token's position; see strip_point_to_token).
    positions = np.arange(n)
    fig.add_trace(go.Scatter(
        x=(positions % per_row).tolist(), y=(positions // per_row).tolist(), mode="markers",
        marker=dict(symbol="square", size=26, color="rgba(0,0,0,0)", line=dict(width=0)),
        customdata=positions.tolist(), hovertext=list(hover),
        hovertemplate="%{hovertext}<extra></extra>", showlegend=False, name="tokens"))
    return _base_layout(
        fig, _title(title, f"colour = −log p(token | {given}), from white (0) to "
                           f"dark purple ({max(top, 1e-6):.1f} nats); point at a token for "
                           f"the model's top guesses" + (
                               ", click or tap it to explain its prediction" if clickable
                               else "")),
        # one row of cells ~40 px high: the title and its note take the top 80
        height=int(90 + 40 * rows), margin=dict(l=10, r=70, t=80, b=10),
        xaxis=dict(visible=False, range=[-0.5, per_row - 0.5], fixedrange=True),
        yaxis=dict(visible=False, range=[rows - 0.5, -0.5], fixedrange=True),
        plot_bgcolor="white")


def strip_point_to_token(point: Mapping) -> int | None:
    """The token position of one selected point of ``token_loss_strip``, or None."""
    custom = point.get("customdata")
    if isinstance(custom, (list, tuple)):
        custom = custom[0] if custom else None
    if isinstance(custom, Mapping):
        custom = custom.get("0", custom.get(0))
    try:
        return None if custom is None or isinstance(custom, bool) else int(custom)
    except (TypeError, ValueError):
        return None
