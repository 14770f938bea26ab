"""Plotly figure builders: numpy arrays in, ``plotly.graph_objects.Figure`` out.

No Streamlit here, so every figure also works in a notebook. Conventions shared by all
builders:

- layers and heads count from 0; a head is named "L5.H1";
- token axes use integer positions with tickvals/ticktext, never the token strings as
  categories, because Plotly merges equal categories ("the" twice would become one row);
- every string that reaches the browser goes through ``_esc``: Plotly reads text as a small
  HTML dialect and typesets ``$...$`` with MathJax (fetched from a CDN), so '$', '<', '>'
  and '&' are written as entities, which Plotly turns back into the plain characters.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

try:
    # Plotly imports pandas lazily, from whichever thread draws a figure first; two sessions'
    # script threads doing it at once can meet a half-initialised module ("partially
    # initialized module 'pandas' has no attribute 'Series'"). Import it once, here.
    import pandas  # noqa: F401
except ImportError:  # pragma: no cover - Streamlit requires pandas
    pass

from mha_viz.downsample import block_ranges, block_reduce, downsampled_labels, thin_labels
from mha_viz.analysis.heads import head_name
from mha_viz.errors import InputError

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


# --------------------------------------------------------------------------- helpers


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
    # A raw newline would not render in SVG text; show it.
    return s.replace("\r", "\\r").replace("\n", "\\n")


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
    """A NEW figure with fig's traces and shapes and the shared layout (plus kw): write
    ``fig = _base_layout(fig, ...)``, the figure passed in is left as it was.

    Built as go.Figure(data=..., layout=...) in one go: fig.update_layout on a live figure
    runs Plotly's relayout machinery and cost ~30 ms per figure, this ~5 ms.
    """
    layout = dict(
        template=TEMPLATE,
        title=title,
        margin=dict(l=70, r=30, t=90 if title and "<br>" in title["text"] else 60, b=60),
        font=dict(size=12),
        hoverlabel=dict(font=dict(size=12)),
    )
    existing = fig.layout.to_plotly_json()
    existing.pop("template", None)
    layout = _merge(_merge(layout, existing), kw)
    return go.Figure(data=fig.data, layout=layout)


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
    """Small, nearly square matrices read best with square cells (mha_viz.fit); a 11 x 576
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


# --------------------------------------------------------------------------- one head


def head_heatmap(
    attention: np.ndarray,
    labels: Sequence[str],
    title: str = "",
    causal: bool = False,
    grey_causal_mask: bool = True,
    pair_boundary: int | None = None,
    max_size: int = 256,
    colorscale: str | list = WEIGHT_SCALE,
    zmax: float | None = None,
    max_ticks: int = 40,
    height: int | None = None,
) -> go.Figure:
    """One head's [T, T] map: query on y (top to bottom), key on x.

    causal + grey_causal_mask draws the masked upper triangle grey (trace "causal mask"),
    so a future position reads as "not allowed", not as weight 0. pair_boundary is the
    first position of sentence B: the A->A, A->B, B->A, B->B blocks get outlined. Maps
    larger than max_size are block-averaged (the title says so).
    """
    a = _square_map(attention)
    n_tok = a.shape[0]
    labels = _check_labels(labels, n_tok)
    if pair_boundary is not None and not 0 < pair_boundary < n_tok:
        raise InputError(
            f"pair_boundary must lie strictly between 0 and {n_tok} (the number of tokens), "
            f"got {pair_boundary}."
        )
    z, f = block_reduce(a.astype(np.float32, copy=False), max_size)
    z = np.array(z, dtype=np.float32)  # own copy: NaNs get written below
    n = z.shape[0]
    ranges = block_ranges(n_tok, f)

    masked = None
    if causal and grey_causal_mask:
        # A block is masked only when every cell in it is a future key (j > i).
        last_query = np.array([r[1] for r in ranges])  # of each row block
        first_key = np.array([r[0] for r in ranges])  # of each column block
        masked = first_key[None, :] > last_query[:, None]
        z[masked] = np.nan

    # Axis values are position-prefixed strings ("3 'cat'"), unique even when tokens repeat,
    # so Plotly cannot merge two "the" rows, and the hover gets both token strings from
    # %{y} / %{x}. A per-cell hover text array would cost T*T strings (~3 MB at T=256).
    if f == 1:
        desc = [f"{i} '{_esc(t)}'" for i, t in enumerate(labels)]
    else:
        desc = [
            f"{lo}–{hi} '{_esc(labels[lo])}'…" if hi > lo else f"{lo} '{_esc(labels[lo])}'"
            for lo, hi in ranges
        ]

    tick_labels = [_esc(t) for t in (labels if f == 1 else downsampled_labels(labels, f))]
    tick_pos, ticktext = thin_labels(tick_labels, max_ticks)
    tickvals = [desc[p] for p in tick_pos]
    finite = z[np.isfinite(z)]
    top = float(zmax) if zmax is not None else (float(finite.max()) if finite.size else 1.0)
    value_word = "weight" if f == 1 else "mean weight"

    fig = go.Figure()
    if masked is not None and masked.any():
        # One grey staircase polygon over the masked cells: O(T) bytes, where a second
        # heatmap layer would send another T x T array.
        fig.add_shape(
            type="path", path=_mask_path(masked), layer="below",
            fillcolor=MASK_GREY, line=dict(width=0), name="causal mask",
        )
    fig.add_trace(
        go.Heatmap(
            z=z,
            x=desc, y=desc,
            colorscale=colorscale,
            zmin=0.0,
            zmax=top if top > 0 else 1.0,
            name="attention",
            hovertemplate="query %{y} → key %{x}: "
            + ("mean " if f > 1 else "") + "%{z:.3f}<extra></extra>",
            hoverongaps=False,
            colorbar=dict(title=dict(text=value_word), thickness=14),
        )
    )

    if pair_boundary is not None:
        b = pair_boundary / f - 0.5  # original position p sits at display p / f - 0.5
        lo, hi = -0.5, n_tok / f - 0.5
        spans = {"A": (lo, b), "B": (b, hi)}
        for q in "AB":
            for k in "AB":
                (y0, y1), (x0, x1) = spans[q], spans[k]
                fig.add_shape(
                    type="rect",
                    x0=x0, x1=x1, y0=y0, y1=y1,
                    line=dict(color=PAIR_COLOUR, width=2),
                    fillcolor="rgba(0,0,0,0)",
                    name=f"{q}→{k}",
                    label=dict(
                        text=f"{q}→{k}", textposition="top left",
                        font=dict(size=11, color=PAIR_COLOUR),
                    ),
                )

    notes = []
    if f > 1:
        notes.append(f"downsampled {f}× for display (block mean over {f}×{f} cells)")
    if masked is not None:
        notes.append("grey = masked (causal)")
    if pair_boundary is not None:
        notes.append(f"sentence B starts at position {pair_boundary}")
    if f > 1 and not title:
        title = "Attention"
    fig = _base_layout(
        fig,
        _title(title, "; ".join(notes)),
        height=height or int(min(900, max(420, 22 * n + 200))),
        meta=dict(cells=[n, n]),  # a grid map: mha_viz.fit gives it square cells
        # Category axes place cell k at serial number k, so shapes and ranges stay numeric.
        xaxis=dict(
            title=dict(text="key"), type="category", tickmode="array", tickvals=tickvals,
            ticktext=ticktext, showgrid=False, zeroline=False, constrain="domain",
            range=[-0.5, n - 0.5],
        ),
        yaxis=dict(
            title=dict(text="query"), type="category", tickmode="array", tickvals=tickvals,
            ticktext=ticktext, showgrid=False, zeroline=False, range=[n - 0.5, -0.5],
            scaleanchor="x", constrain="domain",
        ),
    )
    return fig


# --------------------------------------------------------------------------- all heads


def model_view_grid(
    attentions: np.ndarray,
    thumb_size: int = 32,
    selected: tuple[int, int] | None = None,
    cell_px: int = 64,
    title: str = "All heads",
) -> go.Figure:
    """Every layer x head as a thumbnail, stitched into ONE heatmap trace.

    Trace 0 is the image (no hover); trace 1 is a transparent scatter with one point per
    head at the thumbnail centre: customdata = [layer, head], point index = layer * H + head.
    Click it (Streamlit on_select) to pick a head; see ``grid_point_to_head``.
    Each thumbnail is scaled to its own maximum so sharp and broad heads are both visible.
    """
    a = np.asarray(attentions)
    if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
        raise InputError(f"attentions must be [L, H, T, T], got shape {a.shape}.")
    n_layer, n_head, n_tok = a.shape[0], a.shape[1], a.shape[2]
    red, f = block_reduce(a.astype(np.float32, copy=False), thumb_size)
    t = red.shape[-1]
    peak = red.max(axis=(-2, -1), keepdims=True)
    red = red / np.where(peak > 0, peak, 1.0)
    # Send bytes, not floats: 1..255 is the thumbnail scaled to its maximum, 0 is the gap
    # between thumbnails (drawn white by the colour scale). 8 bits is all a colour scale
    # shows, and it makes the image 4x smaller than float32 (~0.3 MB at 12 x 12 heads).
    red = (1 + np.rint(np.nan_to_num(red) * 254)).astype(np.uint8)
    gap = max(1, round(t / 12))
    step = t + gap
    padded = np.zeros((n_layer, n_head, step, step), dtype=np.uint8)
    padded[:, :, :t, :t] = red
    # [L, H, r, c] -> [L, r, H, c] -> one image; crop the trailing gap.
    image = padded.transpose(0, 2, 1, 3).reshape(n_layer * step, n_head * step)
    image = image[: n_layer * step - gap, : n_head * step - gap]

    centre = (t - 1) / 2
    layers, heads = np.meshgrid(np.arange(n_layer), np.arange(n_head), indexing="ij")
    layers, heads = layers.ravel(), heads.ravel()
    fig = go.Figure()
    fig.add_trace(
        go.Heatmap(
            z=image, colorscale=_gap_scale(GRID_SCALE), zmin=0, zmax=255, showscale=False,
            hoverinfo="skip", name="thumbnails",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=heads * step + centre,
            y=layers * step + centre,
            mode="markers",
            # Fully transparent but still hoverable and clickable.
            marker=dict(
                symbol="square", size=max(8, int(cell_px * 0.8)),
                color="rgba(0,0,0,0)", line=dict(width=0),
            ),
            # plain lists: a numpy array would travel as a typed array and come back from a
            # click as {"0": l, "1": h}
            customdata=np.stack([layers, heads], axis=1).tolist(),
            hovertext=[head_name(l, h) for l, h in zip(layers, heads)],
            hovertemplate="%{hovertext}<extra></extra>",
            name="heads",
            showlegend=False,
        )
    )
    if selected is not None:
        sl, sh = selected
        if not (0 <= sl < n_layer and 0 <= sh < n_head):
            raise InputError(
                f"selected head {selected} is outside the model ({n_layer} layers x {n_head} heads)."
            )
        pad = gap / 2
        fig.add_shape(
            type="rect",
            x0=sh * step - 0.5 - pad, x1=sh * step + t - 0.5 + pad,
            y0=sl * step - 0.5 - pad, y1=sl * step + t - 0.5 + pad,
            line=dict(color=HIGHLIGHT, width=3), name="selected",
        )
    note = "each thumbnail scaled to its own maximum; click a head to open it"
    if f > 1:
        note += f"; downsampled {f}× ({n_tok} → {t} positions)"
    centres = [k * step + centre for k in range(max(n_layer, n_head))]
    fig = _base_layout(
        fig,
        _title(title + (f" — selected {head_name(*selected)}" if selected else ""), note),
        height=int(n_layer * cell_px + 140),
        xaxis=dict(
            tickmode="array", tickvals=centres[:n_head],
            ticktext=[f"H{h}" for h in range(n_head)], side="top",
            showgrid=False, zeroline=False, range=[-0.5 - gap, image.shape[1] - 0.5 + gap],
            constrain="domain",
        ),
        yaxis=dict(
            tickmode="array", tickvals=centres[:n_layer],
            ticktext=[f"L{l}" for l in range(n_layer)],
            showgrid=False, zeroline=False, range=[image.shape[0] - 0.5 + gap, -0.5 - gap],
            scaleanchor="x", constrain="domain",
        ),
        margin=dict(l=50, r=20, t=110, b=20),
        plot_bgcolor="white",
        clickmode="event+select",
        dragmode=False,
    )
    return fig


def _gap_scale(name: str) -> list:
    """A named colour scale squeezed onto 1..255 of a 0..255 range, with 0 drawn white."""
    from plotly.colors import get_colorscale

    edge = 0.5 / 255
    scale = [[0.0, "white"], [edge, "white"]]
    for p, c in get_colorscale(name):
        scale.append([edge + (1 - edge) * p if p > 0 else edge, c])
    return scale


def grid_point_to_head(point: Mapping, n_heads: int) -> tuple[int, int] | None:
    """(layer, head) from one selected point of ``model_view_grid`` (a Streamlit point dict).

    Uses customdata when present, else the point index of the head trace (trace 1).
    Returns None for points of another trace.
    """
    custom = point.get("customdata")
    if isinstance(custom, Mapping):  # a typed array from the browser: {"0": l, "1": h}
        custom = [custom.get("0", custom.get(0)), custom.get("1", custom.get(1))]
    if custom is not None and len(custom) >= 2 and None not in custom[:2]:
        return int(custom[0]), int(custom[1])
    curve = point.get("curve_number", point.get("curveNumber"))
    index = point.get("point_index", point.get("pointIndex", point.get("point_number")))
    if curve == 1 and index is not None:
        return int(index) // n_heads, int(index) % n_heads
    return None


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


# --------------------------------------------------------------------------- line view

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
) -> go.Figure:
    """BertViz-style head view: queries on the left, keys on the right, one line per weight.

    ``attention`` is one head [T, T] or a layer's heads [H, T, T]; ``heads`` picks which
    slices of a [H, T, T] array to draw (None: all) and names them H{h} (L{layer}.H{h}
    when layer is given). Lines are grouped into a few opacity bins per head, one
    trace each. ``query`` draws only that query's lines (an index into ``attention``).
    ``offset`` is added to the positions shown in hovers, for a window cut from a longer
    input. ``width`` None lets the figure fill its container.
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
    traces = []  # one go.Figure(data=traces) at the end: add_trace costs ~2 ms per call
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
            # One trace per bin: segments joined with None breaks (x 0 -> 1 per line).
            xs = np.tile(np.array([0.0, 1.0, np.nan]), qi.size)
            ys = np.stack([qi, kj, np.full(qi.size, -1)], axis=1).ravel().astype(float)
            ys[2::3] = np.nan
            upper = min(hi, 1.0)
            mid = (lo + upper) / 2
            hover = None
            if qi.size <= 400:  # per-line hover only when it stays cheap
                hover = []
                for i, j in zip(qi, kj):
                    s = (f"{name}: query {i + offset} '{_esc(labels[i])}' → key {j + offset} "
                         f"'{_esc(labels[j])}': {w[i, j]:.3f}")
                    hover += [s, s, None]
            traces.append(
                go.Scatter(
                    # None breaks the line (connectgaps=False); short ints and nulls as
                    # JSON text are smaller than base64 float64 arrays.
                    x=[None if np.isnan(v) else int(v) for v in xs],
                    y=[None if np.isnan(v) else int(v) for v in ys],
                    mode="lines",
                    line=dict(color=colour, width=0.6 + 3.0 * mid),
                    opacity=float(np.clip(0.15 + 0.85 * mid / 0.7, 0.15, 1.0)),
                    name=name,
                    legendgroup=name,
                    showlegend=False,
                    hoverinfo="text" if hover else "skip",
                    hovertext=hover,
                    connectgaps=False,
                )
            )
        # Legend entry at full opacity (the bins are faint); clicking it toggles the group.
        traces.append(go.Scatter(x=[None], y=[None], mode="lines", name=name,
                                 line=dict(color=colour, width=3), legendgroup=name,
                                 hoverinfo="skip"))
    pos = np.arange(shown)
    esc = [_esc(t) for t in labels[:shown]]
    for side, x, anchor in (("query", 0.0, "middle left"), ("key", 1.0, "middle right")):
        traces.append(
            go.Scatter(
                x=np.full(shown, x), y=pos, mode="text", text=esc, textposition=anchor,
                customdata=pos + offset,
                hovertext=[f"{side} {i + offset} '{t}'" for i, t in enumerate(esc)],
                hovertemplate="%{hovertext}<extra></extra>",
                showlegend=False, name=f"{side} tokens",
                textfont=dict(size=12, color="#222"),
            )
        )
    fig = go.Figure(data=traces)
    notes = [f"lines: weight ≥ {min_weight:g}; darker and thicker = larger weight"]
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


# --------------------------------------------------------------------------- layer x head


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

    diverging centres a red-blue scale on 0 (ablation effects). reference (e.g. ln n for
    uniform entropy) is named in the colorbar title and the subtitle. zmin / zmax fix the
    colour range (e.g. 0 to the uniform entropy, or 0 to 1 for fractions); values outside
    it take the end colours.
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


# --------------------------------------------------------------------------- per query


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
    """Bars of a per-query quantity (e.g. row entropy) with a dashed reference line."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1:
        raise InputError(f"values must be one number per query [T], got shape {v.shape}.")
    labels = _check_labels(labels, v.size)
    esc = [_esc(t) for t in labels]
    pos = np.arange(v.size)
    fig = go.Figure(
        go.Bar(
            x=pos, y=v, name=_esc(y_title) or "value", marker_color="#4a7fb5",
            hovertext=[f"query {i} '{t}'" for i, t in enumerate(esc)],
            hovertemplate=f"%{{hovertext}}: %{{y:{fmt}}}<extra></extra>",
        )
    )
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


# --------------------------------------------------------------------------- token classes


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
        _title(title, "mean over the heads of each layer; hover for the min and max head"),
        height=420,
        xaxis=dict(title=dict(text="layer"), tickmode="array",
                   tickvals=list(range(n_layer)), ticktext=[f"L{l}" for l in range(n_layer)]),
        yaxis=dict(title=dict(text="attention mass (fraction)"), rangemode="tozero"),
        hovermode="closest",
    )
    return fig


# --------------------------------------------------------------------------- similarity

_KIND_TEXT = {
    "js": "Jensen-Shannon divergence (nats)",
    "js_distance": "Jensen-Shannon distance",
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
    n_heads: int,
    order: np.ndarray | None = None,
    kind: str = "js",
    title: str | None = None,
) -> go.Figure:
    """Head-by-head distance matrix (N = L * H, head n = l * n_heads + h).

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
    if n_heads < 1 or n % n_heads:
        raise InputError(f"{n} heads cannot be split into layers of {n_heads} heads.")
    n_layer = n // n_heads
    names = np.array([head_name(i // n_heads, i % n_heads) for i in range(n)])
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
    fig = go.Figure()
    fig.add_trace(
        go.Heatmap(
            z=shown, x=cat, y=cat, colorscale="Viridis", zmin=0.0,
            hovertemplate="%{y} ↔ %{x}: %{z:.4f}<extra></extra>",
            colorbar=dict(title=dict(text=kind_text.replace(" (", "<br>(")), thickness=14),
            name="distance",
        )
    )
    axis = dict(type="category", showgrid=False, zeroline=False, tickfont=dict(size=9))
    layout = {}
    if order is None:
        mid = [names[l * n_heads + n_heads // 2] for l in range(n_layer)]
        for ax in ("x", "y"):
            layout[f"{ax}axis"] = dict(axis, tickmode="array", tickvals=mid,
                                       ticktext=[f"L{l}" for l in range(n_layer)])
        for l in range(1, n_layer):
            p = l * n_heads - 0.5  # category axes place shapes by serial number
            fig.add_shape(type="line", x0=p, x1=p, y0=-0.5, y1=n - 0.5,
                          line=dict(color="white", width=1))
            fig.add_shape(type="line", y0=p, y1=p, x0=-0.5, x1=n - 0.5,
                          line=dict(color="white", width=1))
        note = "heads in layer order; white lines separate layers"
        layout["xaxis"].update(domain=[0, 1])
        layout["yaxis"].update(autorange="reversed", domain=[0, 1])
    else:
        layer_of = (idx // n_heads).astype(float)
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


def head_scatter(
    coords: np.ndarray,
    n_heads: int,
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
    if n_heads < 1 or n % n_heads:
        raise InputError(f"{n} heads cannot be split into layers of {n_heads} heads.")
    n_layer = n // n_heads
    fig = go.Figure()
    for l in range(n_layer):
        sl = slice(l * n_heads, (l + 1) * n_heads)
        fig.add_trace(
            go.Scatter(
                x=c[sl, 0], y=c[sl, 1], mode="markers", name=f"L{l}",
                marker=dict(size=10, color=LAYER_COLOURS[l % len(LAYER_COLOURS)],
                            line=dict(width=0.5, color="white")),
                customdata=np.stack([np.full(n_heads, l), np.arange(n_heads)], axis=1),
                hovertext=[head_name(l, h) for h in range(n_heads)],
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
                text=[head_name(i // n_heads, i % n_heads) if k == 0 else ""
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


# --------------------------------------------------------------------------- pruning


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


# --------------------------------------------------------------------------- small matrix


def matrix_figure(
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str,
    show_values: bool = True,
    max_cells_with_values: int = 400,
    colorscale: str | list | None = None,
    diverging: bool = False,
    fmt: str = ".2f",
    row_title: str = "",
    col_title: str = "",
    max_ticks: int = 60,
) -> go.Figure:
    """A small matrix (Q, K, V, scores, weights) with values in the cells when small.

    Rows and columns sit at integer positions, so repeated labels stay separate rows.
    Non-finite entries (e.g. -inf scores under a mask) are drawn as gaps and hover "masked".
    """
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2:
        raise InputError(f"matrix must be 2-D, got shape {m.shape}.")
    n_row, n_col = m.shape
    rows = [_esc(t) for t in _check_labels(row_labels, n_row, "row_labels")]
    cols = [_esc(t) for t in _check_labels(col_labels, n_col, "col_labels")]
    z = np.where(np.isfinite(m), m, np.nan)
    text = [[f"{rows[i]} ({i}) · {cols[j]} ({j})" for j in range(n_col)] for i in range(n_row)]
    trace = dict(
        z=z, text=text, hoverongaps=False,
        hovertemplate=f"%{{text}}: %{{z:{fmt}}}<extra></extra>",
        colorbar=dict(thickness=14), xgap=1, ygap=1,
    )
    if show_values and n_row * n_col <= max_cells_with_values:
        trace.update(texttemplate=f"%{{z:{fmt}}}", textfont=dict(size=10))
    if diverging:
        finite = z[np.isfinite(z)]
        span = float(np.abs(finite).max()) if finite.size else 1.0
        span = span if span > 0 else 1.0
        trace.update(colorscale=colorscale or DIVERGING_SCALE, zmid=0.0, zmin=-span, zmax=span)
    else:
        trace.update(colorscale=colorscale or "Viridis")
    fig = go.Figure(go.Heatmap(**trace))
    has_gaps = bool(np.isnan(z).any())
    if has_gaps:
        fig.update_layout(plot_bgcolor=MASK_GREY)
    xv, xt = thin_labels(cols, max_ticks)
    yv, yt = thin_labels(rows, max_ticks)
    fig = _base_layout(
        fig,
        _title(title, "grey = masked (-inf)" if has_gaps else ""),
        height=int(min(900, max(300, 28 * n_row + 160))),
        meta=dict(cells=[n_row, n_col]) if _squarish(n_row, n_col) else {},
        xaxis=dict(title=dict(text=_esc(col_title)), tickmode="array", tickvals=xv,
                   ticktext=xt, showgrid=False, zeroline=False, side="top"),
        yaxis=dict(title=dict(text=_esc(row_title)), tickmode="array", tickvals=yv,
                   ticktext=yt, showgrid=False, zeroline=False, autorange="reversed"),
    )
    return fig


# --------------------------------------------------------------------------- maps side by side


def head_heatmap_row(
    maps: Sequence[np.ndarray],
    labels: Sequence[str],
    titles: Sequence[str],
    causal: bool = False,
    zmax: float | None = None,
    max_size: int = 128,
    max_ticks: int = 16,
    height: int = 420,
    title: str = "",
    per_row: int | None = None,
) -> go.Figure:
    """Several [T, T] maps of one input side by side in ONE figure, sharing a colour scale
    (0 to zmax, default the largest weight shown), e.g. a head and its nearest heads.
    per_row: at most this many maps in a row (a phone shows two); ``height`` is per row.

    Rows are queries (top to bottom), columns keys; token labels only on the first map's
    y axis and under every map. Maps larger than max_size are block-averaged. causal draws
    the masked upper triangle grey (as head_heatmap does).
    """
    from plotly.subplots import make_subplots

    arrays = [_square_map(m, "each map") for m in maps]
    if not arrays:
        raise InputError("maps is empty: give at least one [T, T] map.")
    n_tok = arrays[0].shape[0]
    if any(a.shape != arrays[0].shape for a in arrays):
        raise InputError("every map must have the same shape.")
    if len(titles) != len(arrays):
        raise InputError(f"{len(titles)} titles for {len(arrays)} maps.")
    labels = _check_labels(labels, n_tok)
    reduced = []
    f = 1
    for a in arrays:
        z, f = block_reduce(a.astype(np.float32, copy=False), max_size)
        reduced.append(np.array(z, dtype=np.float32))
    n = reduced[0].shape[0]
    if causal:
        ranges = block_ranges(n_tok, f)
        last_query = np.array([r[1] for r in ranges])
        first_key = np.array([r[0] for r in ranges])
        masked = first_key[None, :] > last_query[:, None]
        for z in reduced:
            z[masked] = np.nan
    finite = [float(np.nanmax(z)) for z in reduced if np.isfinite(z).any()]
    top = float(zmax) if zmax is not None else (max(finite) if finite else 1.0)
    tick_labels = [_esc(t) for t in (labels if f == 1 else downsampled_labels(labels, f))]
    tickvals, ticktext = thin_labels(tick_labels, max_ticks)
    hover_labels = np.array(tick_labels, dtype=object)
    k = len(arrays)
    per_row = max(1, min(per_row or k, k))
    n_rows = -(-k // per_row)
    fig = make_subplots(rows=n_rows, cols=per_row,
                        horizontal_spacing=0.03 if per_row > 1 else 0.0,
                        vertical_spacing=0.3 / n_rows if n_rows > 1 else 0.0,
                        subplot_titles=[_no_dollar(_esc(t)) for t in titles])
    word = "weight" if f == 1 else "mean weight"
    for i, z in enumerate(reduced):
        fig.add_trace(
            go.Heatmap(
                z=z, x=np.arange(n), y=np.arange(n), coloraxis="coloraxis",
                customdata=np.stack(np.broadcast_arrays(hover_labels[:, None],
                                                        hover_labels[None, :]), axis=-1),
                hovertemplate=(f"{_esc(titles[i])}<br>query %{{customdata[0]}} → key "
                               f"%{{customdata[1]}}: %{{z:.3f}}<extra></extra>"),
                hoverongaps=False, name=_esc(titles[i]),
            ),
            row=i // per_row + 1, col=i % per_row + 1,
        )
        suffix = "" if i == 0 else str(i + 1)
        first_in_row = i % per_row == 0
        fig.update_layout({
            f"xaxis{suffix}": dict(tickmode="array", tickvals=tickvals, ticktext=ticktext,
                                   tickangle=-90, showgrid=False, zeroline=False,
                                   range=[-0.5, n - 0.5], constrain="domain",
                                   title=dict(text="key")),
            f"yaxis{suffix}": dict(tickmode="array", tickvals=tickvals,
                                   ticktext=ticktext if first_in_row else [""] * len(tickvals),
                                   showgrid=False, zeroline=False, range=[n - 0.5, -0.5],
                                   scaleanchor=f"x{suffix}", constrain="domain",
                                   title=dict(text="query" if first_in_row else "")),
        })
    notes = []
    if f > 1:
        notes.append(f"downsampled {f}× for display (block mean over {f}×{f} cells)")
    if causal:
        notes.append("grey = masked (causal)")
    layout = fig.layout.to_plotly_json()
    layout.pop("template", None)
    for annotation in layout.get("annotations", []):
        annotation["font"] = dict(size=13)
    fig = go.Figure(data=fig.data, layout=layout)
    if title:
        head = _title(title, "; ".join(notes))
    elif notes:  # a note alone stays small
        head = dict(text=f"<sup>{_no_dollar('; '.join(notes))}</sup>", x=0.0, xanchor="left")
    else:
        head = None
    return _base_layout(
        fig,
        head,
        height=height * n_rows,
        coloraxis=dict(colorscale=WEIGHT_SCALE, cmin=0.0, cmax=top if top > 0 else 1.0,
                       colorbar=dict(title=dict(text=word), thickness=14)),
        plot_bgcolor=MASK_GREY if causal else "white",
        margin=dict(l=70, r=30, t=90 if (title or notes) else 50, b=60),
    )


def columns_at_bottom(fig: go.Figure) -> go.Figure:
    """Move an x axis drawn on top (``layer_head_heatmap``'s heads, ``matrix_figure``'s
    columns) to the bottom, so a long or two-line title cannot collide with its tick labels
    or axis title (Plotly lays the title and a top axis out in the same strip). Changes fig
    in place and returns it."""
    if fig.layout.xaxis.side == "top":
        fig.update_layout(xaxis_side="bottom")
    return fig


def tensor_figure(
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str,
    show_values: bool = True,
    diverging: bool = True,
    colorscale: str | list | None = None,
    fmt: str = ".2f",
    row_title: str = "",
    col_title: str = "",
    max_ticks: int = 48,
    height: int | None = None,
) -> go.Figure:
    """One step's tensor (X, Q, K, V, scores, weights, ...) as a heatmap, cheap at any size.

    Like ``matrix_figure`` but without a per-cell hover-text array: rows and columns are
    category axes whose (unique) names carry the labels, so the hover reads
    "row → column: value" from the axes and a 64 x 768 tensor costs the browser the numbers
    only. show_values writes each value in its cell (use it for small tensors). Non-finite
    entries (-inf scores under a causal mask) are gaps on a grey background.
    diverging centres a red-blue scale on 0 (signed values); otherwise ``colorscale``
    (default Viridis) from the smallest to the largest value.
    """
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2:
        raise InputError(f"matrix must be 2-D, got shape {m.shape}.")
    n_row, n_col = m.shape
    rows = [_esc(t) for t in _check_labels(row_labels, n_row, "row_labels")]
    cols = [_esc(t) for t in _check_labels(col_labels, n_col, "col_labels")]
    # Category names must be unique or Plotly merges rows: number repeated ones.
    if len(set(rows)) < n_row:
        rows = [f"{i} {t}" for i, t in enumerate(rows)]
    if len(set(cols)) < n_col:
        cols = [f"{j} {t}" for j, t in enumerate(cols)]
    z = np.where(np.isfinite(m), m, np.nan).astype(np.float32)
    trace = dict(z=z, x=cols, y=rows, hoverongaps=False,
                 hovertemplate=f"%{{y}} → %{{x}}: %{{z:{fmt}}}<extra></extra>",
                 colorbar=dict(thickness=14), name=_esc(title))
    if show_values:
        trace.update(texttemplate=f"%{{z:{fmt}}}", textfont=dict(size=10), xgap=1, ygap=1)
    finite = z[np.isfinite(z)]
    if diverging:
        span = float(np.abs(finite).max()) if finite.size else 1.0
        span = span if span > 0 else 1.0
        trace.update(colorscale=colorscale or DIVERGING_SCALE, zmid=0.0, zmin=-span, zmax=span)
    else:
        trace.update(colorscale=colorscale or "Viridis")
    has_gaps = bool(np.isnan(z).any())
    xv, xt = thin_labels(cols, max_ticks)
    yv, yt = thin_labels(rows, max_ticks)
    fig = go.Figure(go.Heatmap(**trace))
    fig = _base_layout(
        fig,
        _title(title, "grey = masked (−∞)" if has_gaps else ""),
        height=height or int(min(900, max(300, (28 if show_values else 18) * n_row + 180))),
        meta=dict(cells=[n_row, n_col]) if _squarish(n_row, n_col) and not height else {},
        plot_bgcolor=MASK_GREY if has_gaps else "white",
        xaxis=dict(title=dict(text=_esc(col_title)), type="category", tickmode="array",
                   tickvals=[cols[i] for i in xv], ticktext=xt, showgrid=False,
                   zeroline=False),
        yaxis=dict(title=dict(text=_esc(row_title)), type="category", tickmode="array",
                   tickvals=[rows[i] for i in yv], ticktext=yt, showgrid=False,
                   zeroline=False, autorange="reversed"),
    )
    return fig


__all__ = [
    "FIGURE_CONFIG",
    "class_mass_by_layer",
    "distance_heatmap",
    "grid_point_to_head",
    "head_heatmap",
    "head_heatmap_row",
    "head_name",
    "head_scatter",
    "layer_head_heatmap",
    "line_view",
    "matrix_figure",
    "model_view_grid",
    "per_query_line",
    "pruning_curve_figure",
    "tensor_figure",
    "columns_at_bottom",
    "token_loss_strip",
    "strip_point_to_token",
]


# --------------------------------------------------------------------------- predictions


def token_loss_strip(tokens: Sequence[str], loss: np.ndarray, hover: Sequence[str],
                     per_row: int = 12, title: str = "How surprised the model was by each token",
                     max_loss: float | None = None) -> go.Figure:
    """The text as a grid of cells, per_row tokens a row, each coloured by the loss of
    predicting it (-log p, nats; the first token is predicted by nothing and stays blank).
    hover[i] is shown over token i (e.g. what the model expected instead)."""
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
        colorscale="YlOrRd", zmin=0.0, zmax=max(top, 1e-6), xgap=2, ygap=2,
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
        fig, _title(title, f"colour = −log p(token | the tokens before it), from white (0) to "
                           f"dark red ({max(top, 1e-6):.1f} nats); hover for the model's top "
                           f"guesses, click a token to explain its prediction"),
        # one row of cells ~40 px high: the title and its note take the top 80
        height=int(90 + 40 * rows), margin=dict(l=10, r=70, t=80, b=10),
        xaxis=dict(visible=False, range=[-0.5, per_row - 0.5], fixedrange=True),
        yaxis=dict(visible=False, range=[rows - 0.5, -0.5], fixedrange=True),
        plot_bgcolor="white")
