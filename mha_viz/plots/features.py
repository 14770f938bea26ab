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
from .why import source_bars, source_matrix

FIRING_SCALE = "Oranges"  # an activation is never negative: white (0) to orange
BAR_COLOUR = "#e6550d"  # the dark end of FIRING_SCALE
LABEL_CHARS = 8  # of a token in a label ("0 <|endof…"): "<|endoftext|>" took a third of a map
TOKEN_LABELS_PX = 92  # a column of token labels on a phone, at most 8 characters each


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
                        title: str, note: str = "", sources_down: bool = False) -> go.Figure:
    """A feature's pre-activation at one query split by head x source token: terms
    [n_head, n_sources] (analysis.FeatureSources.terms, the sources a query sees), each
    cell's signed part coloured red (raises the pre-activation) to blue, each head's total,
    each source's total and the corner (the sum of every term: the pre-activation without
    its bias). Heads are rows and source tokens columns, or the other way round with
    sources_down (a phone: a column of tokens reads down the screen, a row of forty does
    not fit across it). Each token is named by its position too ("12 ␣"): a text's
    characters repeat, and a thinned axis keeps every k-th label; a long token is cut
    (LABEL_CHARS)."""
    values = np.asarray(terms, dtype=float)
    if values.ndim != 2 or not values.size:
        raise InputError(f"terms must be [heads, sources], got shape {values.shape}")
    labels = [f"{j} {t if len(t) <= LABEL_CHARS else t[:LABEL_CHARS - 1] + '…'}"
              for j, t in enumerate(_check_labels(tokens, values.shape[1], "tokens"))]
    if sources_down:
        fig = source_matrix(values.T, labels, heads, title, row_title="", col_title="head",
                            note=note)
        # room for a label cut to 8 characters ("0 <|end…", wider than fit reckons), so
        # that Plotly's automargin need not take it from a phone's plot; no axis title
        fig.layout.margin.l = TOKEN_LABELS_PX
        return fig
    return source_matrix(values, heads, labels, title, row_title="head",
                         col_title="source token", note=note)


def signed_bars(labels: Sequence[str], values: np.ndarray, title: str, note: str = "",
                value_name: str = "part", total: float | None = None,
                total_label: str = "total") -> go.Figure:
    """Signed values by name as the why panel's source bars draw them (red up, blue down,
    the strongest first, a total last when given: plots.source_bars), with the left margin
    as wide as the names need and no wider (a phone keeps its plot width): the next tokens
    a feature raises and lowers, a score's feature pairs."""
    fig = source_bars(labels, values, title, note, value_name=value_name, total=total,
                      total_label=total_label)
    fig.layout.margin.l = 10  # the y axis's automargin makes room for the names
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
