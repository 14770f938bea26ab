"""Why a head attends where it does (analysis.score_attribution): the parts of one score by
source, as signed bars (red raises the score, blue lowers it, as the source matrix colours
them)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from ..core.errors import InputError
from .picking import ZOOM_BUTTONS
from ._style import _base_layout, _check_labels, _esc, _title

RAISES, LOWERS = "#b2182b", "#2166ac"  # the ends of DIVERGING_SCALE: red up, blue down


def source_bars(labels: Sequence[str], values: np.ndarray, title: str, note: str = "",
                value_name: str = "part of the score") -> go.Figure:
    """Signed parts [n] of a score by source, one horizontal bar each, in the order given
    (the strongest first, at the top)."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or not v.size:
        raise InputError(f"values must be a non-empty list of parts, got shape {v.shape}")
    names = [_esc(t) for t in _check_labels(labels, v.size)]
    # room beside the bars for their numbers, written outside the short ones
    low, high = min(0.0, float(v.min())), max(0.0, float(v.max()))
    pad = 0.3 * ((high - low) or 1.0)
    fig = go.Figure(go.Bar(
        x=v, y=names, orientation="h", marker_color=[RAISES if x >= 0 else LOWERS for x in v],
        text=[f"{x:+.2f}" for x in v], textposition="outside", cliponaxis=False,
        hovertemplate=f"%{{y}}: %{{x:+.3f}}<extra>{_esc(value_name)}</extra>"))
    return _base_layout(
        fig, _title(title, note), height=int(120 + 28 * v.size), showlegend=False,
        modebar=dict(remove=ZOOM_BUTTONS),  # read, not zoomed
        margin=dict(l=110, r=30, b=50),
        xaxis=dict(title=dict(text=_esc(value_name)), zeroline=True, zerolinewidth=2,
                   range=[low - pad if low < 0 else low, high + pad]),
        yaxis=dict(autorange="reversed", type="category"))
