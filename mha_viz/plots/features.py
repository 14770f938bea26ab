"""A dictionary's features at a head (analysis.features): where a feature fires on a text (a
strip of tokens coloured by its activation, a click picks the query), a feature's
pre-activation at a query by head x source token with every head's and every source's
total (the grid the why panel draws for a score), and a head's strongest features as bars
that a click picks. Computing nothing: the numbers come from the library."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from ..core.errors import InputError
from ._style import _base_layout, _check_labels, _esc, _title
from .picking import ZOOM_BUTTONS
from .tokens import token_strip
from .why import source_matrix

FIRING_SCALE = "Oranges"  # an activation is never negative: white (0) to orange
BAR_COLOUR = "#e6550d"  # the dark end of FIRING_SCALE


def feature_strip(tokens: Sequence[str], activation: np.ndarray, title: str, note: str,
                  per_row: int = 12, marked: int | None = None,
                  hover: Sequence[str] | None = None) -> go.Figure:
    """Where a feature fires on a text: each token coloured by the feature's activation
    there (white = 0, the darkest = its largest on the text), the position the page follows
    outlined (marked); a click or a tap on a token reports its position
    (picking.index_of_point)."""
    values = np.asarray(activation, dtype=float)
    if values.ndim != 1 or not values.size:
        raise InputError(f"activation must be one value per token, got shape {values.shape}")
    tips = list(hover) if hover is not None else [
        f"{i}: '{_esc(t)}'<br>activation {v:.3f}" for i, (t, v) in enumerate(zip(tokens, values))]
    finite = values[np.isfinite(values)]
    top = float(finite.max()) if finite.size else 1.0
    return token_strip(tokens, values, tips, per_row=per_row, colorscale=FIRING_SCALE,
                       zmax=top, title=title, note=note, marked=marked)


def feature_sources_map(terms: np.ndarray, heads: Sequence[str], tokens: Sequence[str],
                        title: str, note: str = "") -> go.Figure:
    """A feature's pre-activation at one query split by head (rows) x source token
    (columns): terms [n_head, n_sources] (analysis.FeatureSources.terms, the sources a
    query sees), each cell's signed part coloured red (raises the pre-activation) to blue,
    a total column (each head's part), a total row (each source's part) and the corner (the
    sum of every term: the pre-activation without its bias). Token columns are numbered
    by position when their labels are thinned."""
    values = np.asarray(terms, dtype=float)
    if values.ndim != 2 or not values.size:
        raise InputError(f"terms must be [heads, sources], got shape {values.shape}")
    labels = _check_labels(tokens, values.shape[1], "tokens")
    fig = source_matrix(values, heads, labels, title, row_title="head",
                        col_title="source token", note=note)
    # a thinned token axis names each kept label's position ("12 ␣"); the total column none
    fig.layout.meta = {**fig.layout.meta, "tick_numbers": [*range(values.shape[1]), ""]}
    return fig


def head_features_bars(features: Sequence[int], weight: np.ndarray, summed: np.ndarray,
                       share: np.ndarray, head: str, title: str, note: str = "",
                       picked: int | None = None) -> go.Figure:
    """A head's strongest features on a text (analysis.HeadFeatures), strongest at the top:
    each bar the feature's activation summed over the text times its decoder-norm share on
    the head, its two factors in the hover; the picked feature's bar outlined. A click or a
    tap on a bar reports the feature (picking.index_of_point)."""
    w = np.asarray(weight, dtype=float)
    if w.ndim != 1 or not w.size or len(features) != w.size:
        raise InputError(f"one weight per feature: {len(features)} features, weights of "
                         f"shape {w.shape}")
    names = [f"f{int(f)}" for f in features]
    fig = go.Figure(go.Bar(
        x=w, y=names, orientation="h", customdata=[int(f) for f in features],
        marker=dict(color=BAR_COLOUR, line=dict(
            color=["#202020" if picked == int(f) else BAR_COLOUR for f in features],
            width=[3 if picked == int(f) else 0 for f in features])),
        text=[f"{v:.2f}" for v in w], textposition="outside", cliponaxis=False,
        hovertext=[f"{n}: summed activation {a:.3f} × share on {_esc(head)} {s:.3f}"
                   for n, a, s in zip(names, np.asarray(summed, float),
                                      np.asarray(share, float))],
        hovertemplate="%{hovertext} = %{x:.3f}<extra></extra>", name="features"))
    return _base_layout(
        fig, _title(title, note), height=int(130 + 28 * w.size), showlegend=False,
        modebar=dict(remove=ZOOM_BUTTONS), clickmode="event+select",
        margin=dict(l=70, r=40, b=50),
        xaxis=dict(title=dict(text="summed activation × share"), rangemode="tozero",
                   range=[0, float(w.max()) * 1.25 or 1.0]),
        yaxis=dict(autorange="reversed", type="category"))
