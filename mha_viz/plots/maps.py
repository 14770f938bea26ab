"""Attention maps: one head as a heatmap, every head as a grid of thumbnails, heads side by
side (the token-to-token line view is in lines.py)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from ..analysis.heads import head_name
from ..core.errors import InputError
# block_factor is also head_heatmap's argument name
from ..maps.downsample import block_factor as factor_for
from ..maps.downsample import block_ranges, block_reduce, downsampled_labels, thin_labels
from .picking import ZOOM_BUTTONS, add_pickable_cells, can_pick
from ._style import (GRID_SCALE, HIGHLIGHT, MASK_GREY, PAIR_COLOUR, WEIGHT_SCALE, _base_layout,
                     _check_labels, _esc, _mask_path, _no_dollar, _square_map, _title)


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
    block_factor: int | None = None,
    offset: int = 0,
    highlight: tuple[int, int] | None = None,
    value_name: str = "weight",
    pickable: bool = False,
    marked: tuple[int, int] | None = None,
) -> go.Figure:
    """One head's [T, T] map: query on y (top to bottom), key on x.

    causal + grey_causal_mask draws the masked upper triangle grey (trace "causal mask"),
    so a future position reads as "not allowed", not as weight 0. pair_boundary is the
    first position of sentence B: the A->A, A->B, B->A, B->B blocks get outlined. Maps
    larger than max_size are block-averaged (the title says so).
    block_factor: `attention` is already the f x f block mean of a map over len(labels)
    tokens (AttentionTrace.block_mean: the overview of a long input). offset: the first
    position shown (a window of a long input; positions are labelled from it). highlight:
    (start, stop) positions outlined on both axes (where the window lies in an overview).
    value_name: what a cell holds ("weight"; a value-weighted map's "share moved").
    pickable: a click on a cell selects it (picking.add_pickable_cells; cell_of_point reads
    the (query, key) back, offset included) on a map drawn cell by cell, up to
    picking.PICK_MAX_CELLS. marked: (query, key) positions (offset included, as the hover
    names them) of one cell outlined on a map drawn cell by cell: the cell a click asked
    about (shape "marked cell"; none when it lies outside the map).
    """
    a = _square_map(attention)
    if block_factor is None:
        n_tok = a.shape[0]
        labels = _check_labels(labels, n_tok)
    else:
        n_tok = len(labels)
        if a.shape[0] != -(-n_tok // block_factor):
            raise InputError(f"a {block_factor}x block mean of {n_tok} tokens has "
                             f"{-(-n_tok // block_factor)} rows, got {a.shape[0]}")
    if pair_boundary is not None and not 0 < pair_boundary < n_tok:
        raise InputError(
            f"pair_boundary must lie strictly between 0 and {n_tok} (the number of tokens), "
            f"got {pair_boundary}."
        )
    if block_factor is None:
        z, f = block_reduce(a.astype(np.float32, copy=False), max_size)
    else:
        z, f = a, max(1, int(block_factor))
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
        desc = [f"{i + offset} '{_esc(t)}'" for i, t in enumerate(labels)]
    else:
        desc = [
            f"{lo + offset}–{hi + offset} '{_esc(labels[lo])}'…" if hi > lo
            else f"{lo + offset} '{_esc(labels[lo])}'"
            for lo, hi in ranges
        ]

    tick_labels = [_esc(t) for t in (labels if f == 1 else downsampled_labels(labels, f))]
    tick_pos, ticktext = thin_labels(tick_labels, max_ticks)
    tickvals = [desc[p] for p in tick_pos]
    # a label that stands for several rows says its position (every 4th character of a
    # repeated text can be a space: a column of "␣" could not be found); mha_viz.plots.fit
    # numbers the labels it thins too
    numbers = [p + offset for p in tick_pos] if f == 1 else None
    if numbers is not None and len(tick_pos) < n:
        ticktext = [f"{k} {t}" for k, t in zip(numbers, ticktext)]
    finite = z[np.isfinite(z)]
    top = float(zmax) if zmax is not None else (float(finite.max()) if finite.size else 1.0)
    value_word = value_name if f == 1 else f"mean {value_name}"

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

    if highlight is not None:
        lo, hi = (min(max(p - offset, 0), n_tok) / f - 0.5 for p in highlight)
        fig.add_shape(type="rect", x0=lo, x1=hi, y0=lo, y1=hi, name="window",
                      line=dict(color=HIGHLIGHT, width=2), fillcolor="rgba(0,0,0,0)")

    if marked is not None and f == 1:
        row, col = (int(p) - offset for p in marked)
        if 0 <= row < n and 0 <= col < n:
            fig.add_shape(type="rect", x0=col - 0.5, x1=col + 0.5, y0=row - 0.5,
                          y1=row + 0.5, name="marked cell",
                          line=dict(color=HIGHLIGHT, width=3), fillcolor="rgba(0,0,0,0)")

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
        # a grid map: mha_viz.plots.fit gives it square cells, and numbers labels it thins
        meta=dict(cells=[n, n], **({"tick_numbers": numbers} if numbers else {})),
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
    if pickable and f == 1 and can_pick(n, n):
        add_pickable_cells(fig, desc, desc, z, "query %{y} → key %{x}", offset=offset)
    return fig


def model_view_grid(
    attentions: np.ndarray,
    thumb_size: int = 32,
    selected: tuple[int, int] | None = None,
    cell_px: int = 64,
    title: str = "All heads",
    first_layer: int = 0,
    from_tokens: int | None = None,
) -> go.Figure:
    """Every layer x head as a thumbnail, stitched into ONE heatmap trace.

    ``attentions`` may already be the thumbnails (downsample.block_reduce to thumb_size, so
    a page can keep them between runs): ``from_tokens`` then gives the maps' own token count,
    for the note that says they were averaged.

    ``attentions`` may be a window of the layers (a projector shows a few at a time):
    ``first_layer`` is the layer of its first row, for the labels, the click data and
    ``selected`` (a selected head outside the window is not marked).

    Trace 0 is the image (no hover); trace 1 is a transparent scatter with one point per
    head at the thumbnail centre: customdata = [layer, head], point index = layer * H + head.
    Click it (Streamlit on_select) to pick a head; see ``grid_point_to_head``.
    Each thumbnail is scaled to its own maximum so sharp and broad heads are both visible.
    """
    a = np.asarray(attentions)
    if a.ndim != 4:
        raise InputError(f"attentions must be [L, H, T, T] (or [L, H, T, S] for "
                         f"cross-attention), got shape {a.shape}.")
    n_layer, n_head, n_tok = a.shape[0], a.shape[1], max(a.shape[2], a.shape[3])
    red, f = block_reduce(a.astype(np.float32, copy=False), thumb_size)
    if from_tokens is not None and from_tokens > n_tok:  # averaged before it came here
        f, n_tok = factor_for(from_tokens, thumb_size), from_tokens
    rows, cols = red.shape[-2:]  # a cross-attention map is a rectangle: rows x cols
    t = max(rows, cols)
    peak = red.max(axis=(-2, -1), keepdims=True)
    red = red / np.where(peak > 0, peak, 1.0)
    # Send bytes, not floats: 1..255 is the thumbnail scaled to its maximum, 0 is the gap
    # between thumbnails (drawn white by the colour scale). 8 bits is all a colour scale
    # shows, and it makes the image 4x smaller than float32 (~0.3 MB at 12 x 12 heads).
    red = (1 + np.rint(np.nan_to_num(red) * 254)).astype(np.uint8)
    gap = max(1, round(t / 12))
    step_r, step_c = rows + gap, cols + gap
    padded = np.zeros((n_layer, n_head, step_r, step_c), dtype=np.uint8)
    padded[:, :, :rows, :cols] = red
    # [L, H, r, c] -> [L, r, H, c] -> one image; crop the trailing gap.
    image = padded.transpose(0, 2, 1, 3).reshape(n_layer * step_r, n_head * step_c)
    image = image[: n_layer * step_r - gap, : n_head * step_c - gap]

    centre_r, centre_c = (rows - 1) / 2, (cols - 1) / 2
    rows_of, heads = np.meshgrid(np.arange(n_layer), np.arange(n_head), indexing="ij")
    rows_of, heads = rows_of.ravel(), heads.ravel()
    layers = rows_of + int(first_layer)
    # traces as dicts, checked once by the figure (a go.Heatmap and add_trace check twice)
    fig = go.Figure(data=[
        dict(
            type="heatmap", z=image, colorscale=_gap_scale(GRID_SCALE), zmin=0, zmax=255,
            showscale=False, hoverinfo="skip", name="thumbnails",
        ),
        dict(
            type="scatter", x=heads * step_c + centre_c,
            y=rows_of * step_r + centre_r,
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
        ),
    ])
    if selected is not None:
        sl, sh = selected
        if first_layer == 0 and not (0 <= sl < n_layer and 0 <= sh < n_head):
            raise InputError(
                f"selected head {selected} is outside the model ({n_layer} layers x {n_head} heads)."
            )
        sl -= int(first_layer)
    if selected is not None and 0 <= sl < n_layer:
        pad = gap / 2
        fig.add_shape(
            type="rect",
            x0=sh * step_c - 0.5 - pad, x1=sh * step_c + cols - 0.5 + pad,
            y0=sl * step_r - 0.5 - pad, y1=sl * step_r + rows - 0.5 + pad,
            line=dict(color=HIGHLIGHT, width=3), name="selected",
        )
    note = "each thumbnail scaled to its own maximum; click a head to open it"
    if f > 1:
        note += f"; downsampled {f}× ({n_tok} → {t} positions)"
    fig = _base_layout(
        fig,
        _title(title + (f" — selected {head_name(*selected)}" if selected else ""), note),
        height=int(n_layer * cell_px + 140),
        xaxis=dict(
            tickmode="array", tickvals=[h * step_c + centre_c for h in range(n_head)],
            ticktext=[f"H{h}" for h in range(n_head)], side="top",
            showgrid=False, zeroline=False, range=[-0.5 - gap, image.shape[1] - 0.5 + gap],
            constrain="domain",
        ),
        yaxis=dict(
            tickmode="array", tickvals=[l * step_r + centre_r for l in range(n_layer)],
            ticktext=[f"L{l + first_layer}" for l in range(n_layer)],
            showgrid=False, zeroline=False, range=[image.shape[0] - 0.5 + gap, -0.5 - gap],
            scaleanchor="x", constrain="domain",
        ),
        margin=dict(l=50, r=20, t=110, b=20),
        plot_bgcolor="white",
        clickmode="event+select",
        dragmode=False,
        modebar=dict(remove=ZOOM_BUTTONS),  # a grid is clicked, not zoomed (picking)
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


def grid_point_to_head(point: Mapping, n_head: int, first_layer: int = 0
                       ) -> tuple[int, int] | None:
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
        return int(index) // n_head + int(first_layer), int(index) % n_head
    return None


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
    # make_subplots' grid laid out here, with its arithmetic (a figure of go.Heatmaps added
    # one at a time checks every trace twice and relayouts once a map): maps fill the rows
    # from the top, each cell's axes are numbered in that order, a title sits above each map
    across = 0.03 if per_row > 1 else 0.0
    down = 0.3 / n_rows if n_rows > 1 else 0.0
    widths = [(1.0 - across * (per_row - 1)) / per_row] * per_row
    heights = [(1.0 - down * (n_rows - 1)) / n_rows] * n_rows
    word = "weight" if f == 1 else "mean weight"
    traces, layout, annotations = [], {}, []
    for i, z in enumerate(reduced):
        row, col = divmod(i, per_row)
        up = n_rows - 1 - row  # rows counted from the bottom, as the paper's y is
        x0 = sum(widths[:col]) + col * across
        y0 = sum(heights[:up]) + up * down
        x_domain, y_domain = [x0, x0 + widths[col]], [y0, y0 + heights[-1 - row]]
        suffix = "" if i == 0 else str(i + 1)
        first_in_row = col == 0
        traces.append(dict(
            type="heatmap", z=z, x=np.arange(n), y=np.arange(n), coloraxis="coloraxis",
            customdata=np.stack(np.broadcast_arrays(hover_labels[:, None],
                                                    hover_labels[None, :]), axis=-1),
            hovertemplate=(f"{_esc(titles[i])}<br>query %{{customdata[0]}} → key "
                           f"%{{customdata[1]}}: %{{z:.3f}}<extra></extra>"),
            hoverongaps=False, name=_esc(titles[i]), xaxis=f"x{suffix}", yaxis=f"y{suffix}",
        ))
        layout[f"xaxis{suffix}"] = dict(
            anchor=f"y{suffix}", domain=x_domain, tickmode="array", tickvals=tickvals,
            ticktext=ticktext, tickangle=-90, showgrid=False, zeroline=False,
            range=[-0.5, n - 0.5], constrain="domain", title=dict(text="key"))
        layout[f"yaxis{suffix}"] = dict(
            anchor=f"x{suffix}", domain=y_domain, tickmode="array", tickvals=tickvals,
            ticktext=ticktext if first_in_row else [""] * len(tickvals), showgrid=False,
            zeroline=False, range=[n - 0.5, -0.5], scaleanchor=f"x{suffix}",
            constrain="domain", title=dict(text="query" if first_in_row else ""))
        if titles[i]:
            annotations.append(dict(
                y=y_domain[1], xref="paper", x=sum(x_domain) / 2.0, yref="paper",
                text=_no_dollar(_esc(titles[i])), showarrow=False, font=dict(size=13),
                xanchor="center", yanchor="bottom"))
    notes = []
    if f > 1:
        notes.append(f"downsampled {f}× for display (block mean over {f}×{f} cells)")
    if causal:
        notes.append("grey = masked (causal)")
    fig = go.Figure(data=traces)
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
        annotations=annotations,
        **layout,
        coloraxis=dict(colorscale=WEIGHT_SCALE, cmin=0.0, cmax=top if top > 0 else 1.0,
                       colorbar=dict(title=dict(text=word), thickness=14)),
        plot_bgcolor=MASK_GREY if causal else "white",
        # one map per row is a phone's column: no gap to its right, the map takes the width
        margin=dict(l=70, r=10 if per_row == 1 else 30, t=90 if (title or notes) else 50,
                    b=60),
    )
