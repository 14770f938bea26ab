"""The look every figure shares: the Plotly template, colour scales, escaping of text for
Plotly, common layout helpers and the chart configuration."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from ..core.errors import InputError
from ..core.text import visible

TEMPLATE = "mha_viz"  # plotly_white's look, registered below; see _register_template
WEIGHT_SCALE = "Blues"
GRID_SCALE = WEIGHT_SCALE  # thumbnails of attention maps: the same scale as one map
DIVERGING_SCALE = "RdBu_r"  # red = positive (e.g. the score got worse when a head was removed)
MASK_GREY = "#c9c9c9"
HIGHLIGHT = "#d62728"
PAIR_COLOUR = "#ff7f0e"
# 24 distinct colours; layer k uses LAYER_COLOURS[k % 24] in every figure, so the strip on
# the distance matrix and the dots on the head map agree.
LAYER_COLOURS = [
    "#2E91E5", "#E15F99", "#1CA71C", "#FB0D0D", "#DA16FF", "#222A2A", "#B68100", "#750D86",
    "#EB663B", "#511CFB", "#00A08B", "#FB00D1", "#FC0080", "#B2828D", "#6C7C32", "#778AAE",
    "#862A16", "#A777F1", "#620042", "#1616A7", "#DA60CA", "#6C4516", "#0D2A63", "#AF0038",
]
HEAD_COLOURS = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22",
]


def _register_template() -> None:
    """Register "mha_viz": the parts of plotly_white these figures use.

    Naming a template makes Plotly deep-copy it into every figure; plotly_white carries
    defaults for ~50 trace types and cost ~30 ms per figure (a third of the time to build a
    small heatmap), this one about 3 ms. The look is the same for our traces.
    """
    import plotly.io as pio

    if TEMPLATE in pio.templates:
        return
    white = pio.templates["plotly_white"].layout
    axis = dict(gridcolor="#EBF0F8", linecolor="#EBF0F8", ticks="", zerolinecolor="#EBF0F8",
                zerolinewidth=2, automargin=True, title=dict(standoff=15))
    colorbar = dict(outlinewidth=0, ticks="", title=dict(side="right"))  # sideways: narrow
    pio.templates[TEMPLATE] = go.layout.Template(
        layout=dict(
            font=dict(color="#2a3f5f"), paper_bgcolor="white", plot_bgcolor="white",
            colorway=list(white.colorway), hovermode="closest", hoverlabel=dict(align="left"),
            xaxis=axis, yaxis=axis, title=dict(x=0.05),
            shapedefaults=dict(line=dict(color="#2a3f5f")),
            annotationdefaults=dict(arrowcolor="#2a3f5f", arrowhead=0, arrowwidth=1),
        ),
        data=dict(heatmap=[dict(type="heatmap", colorbar=colorbar)],
                  bar=[dict(type="bar", marker=dict(line=dict(color="white", width=0.5)))]),
    )


_register_template()


def _esc(text: object) -> str:
    """Make any string safe to show in Plotly: no MathJax, no accidental tags."""
    s = str(text)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = s.replace("$", "&#36;")
    # A raw newline would not render in SVG text; show it, and every other control or
    # direction-changing character too (mha_viz.core.text.visible).
    return visible(s.replace("\r", "\\r").replace("\n", "\\n"))


def _no_dollar(text: str) -> str:
    """For titles written by our callers: keep their markup (<b>, <br>) but defuse '$'."""
    return str(text).replace("$", "&#36;")


def _title(main: str, note: str = "") -> dict:
    text = _no_dollar(main)
    if note:
        text = f"{text}<br><sup>{_no_dollar(note)}</sup>" if text else _no_dollar(note)
    return dict(text=text, x=0.0, xanchor="left", font=dict(size=16))


def _merge(base: dict, extra: dict) -> dict:
    """Nested dict update: extra wins, sub-dicts are merged (as update_layout does)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _base_layout(fig: go.Figure, title: dict | None = None, **kw) -> go.Figure:
    """fig, its layout replaced by the shared one (plus kw, over what fig's layout held: its
    shapes, annotations...): for the figure a plots function has just built, ``return
    _base_layout(fig, ...)``.

    The layout is assigned whole: fig.update_layout on a live figure runs Plotly's relayout
    machinery and cost ~30 ms per figure; a new go.Figure(data=fig.data, layout=...) checked
    every trace again (1-3 ms of a map's 3-6 ms here)."""
    layout = dict(
        template=TEMPLATE,
        title=title,
        margin=dict(l=70, r=30, t=90 if title and "<br>" in title["text"] else 60, b=60),
        font=dict(size=12),
        hoverlabel=dict(font=dict(size=12)),
    )
    existing = fig.layout.to_plotly_json()
    existing.pop("template", None)
    fig.layout = _merge(_merge(layout, existing), kw)
    return fig


def _check_labels(labels: Sequence[str], n: int, what: str = "labels") -> list[str]:
    labels = [str(t) for t in labels]
    if len(labels) != n:
        raise InputError(f"{what} has {len(labels)} entries but the array has {n} positions.")
    return labels


def _square_map(attention: np.ndarray, name: str = "attention") -> np.ndarray:
    a = np.asarray(attention)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise InputError(f"{name} must be a square [T, T] array, got shape {a.shape}.")
    return a


def _squarish(n_row: int, n_col: int) -> bool:
    """Small, nearly square matrices read best with square cells (mha_viz.plots.fit); a 11 x 576
    tensor would be a thin strip, so it keeps free proportions."""
    return max(n_row, n_col) <= 2 * min(n_row, n_col)


def _mask_path(masked: np.ndarray) -> str:
    """SVG path around the masked cells of a causal map (masked[i, j] true for j >= s_i,
    with s_i non-decreasing); cell (i, j) spans [j - 0.5, j + 0.5] x [i - 0.5, i + 0.5]."""
    n_row, n_col = masked.shape
    starts = np.where(masked.any(1), masked.argmax(1), n_col)
    pts = [(n_col - 0.5, -0.5)]
    for i, s in enumerate(starts):
        pts += [(s - 0.5, i - 0.5), (s - 0.5, i + 0.5)]
    pts.append((n_col - 0.5, n_row - 0.5))
    return "M " + " L ".join(f"{x:g},{y:g}" for x, y in pts) + " Z"


def FIGURE_CONFIG(image_format: str = "png") -> dict:  # noqa: N802 (a name pages already use)
    """Plotly config for ``st.plotly_chart(config=...)``: camera button exports png or svg."""
    if image_format not in ("png", "svg"):
        raise InputError(f"image_format must be 'png' or 'svg', got {image_format!r}.")
    return {
        "displaylogo": False,
        # The camera ("toImage") button stays; these options set what it saves.
        "toImageButtonOptions": {
            "format": image_format,
            "filename": "mha-viz",
            # scale 2 gives a sharp PNG for slides; SVG is vector, scale means nothing.
            "scale": 2 if image_format == "png" else 1,
        },
        # Belt and braces against MathJax: the app must work offline.
        "typesetMath": False,
        "responsive": True,
    }


def columns_at_bottom(fig: go.Figure) -> go.Figure:
    """Move an x axis drawn on top (``layer_head_heatmap``'s heads, ``matrix_figure``'s
    columns) to the bottom, so a long or two-line title cannot collide with its tick labels
    or axis title (Plotly lays the title and a top axis out in the same strip). Changes fig
    in place and returns it."""
    if fig.layout.xaxis.side == "top":
        fig.update_layout(xaxis_side="bottom")
    return fig
