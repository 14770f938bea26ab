"""Causal interventions drawn: patching effects per head and per position, the attribution
estimate against exact patching, and a circuit as a layered graph."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from ..core.errors import InputError
from ._style import DIVERGING_SCALE, _base_layout, _esc, _title

POSITIVE, NEGATIVE = "#c0392b", "#2c6fbb"  # the ends of DIVERGING_SCALE: red > 0, blue < 0
NEUTRAL = "#555555"  # marks with no sign: red and blue mean one thing on a patching page


def _span(values: np.ndarray, fixed: float | None = None) -> float:
    """The colour scale's half-width: ``fixed`` (maps that share one scale), else the
    largest |value|."""
    if fixed is not None:
        return float(fixed)
    finite = np.abs(values[np.isfinite(values)])
    top = float(finite.max()) if finite.size else 1.0
    return top if top > 0 else 1.0


def patching_heatmap(shown: np.ndarray, raw: np.ndarray, title: str, colorbar_title: str,
                     kv_heads: Sequence[int] = (), raw_name: str = "patched metric",
                     shown_name: str = "normalized", fmt: str = ".3f",
                     clickable: bool = False, layers_across: bool | None = None,
                     span: float | None = None) -> go.Figure:
    """[L, H] patching effects (``shown``, e.g. normalized) per layer and head, on a
    diverging scale centred on 0 (from -span to span when given: maps that share one
    scale); hover gives both ``shown`` and the ``raw`` metric.
    kv_heads[h] is the key/value head query head h reads: groups sharing one are marked by
    lines between them and named on the axis. layers_across puts the layers along x (a deep,
    narrow model then fills a wide screen instead of a thin column); None: when there are
    half again as many layers as heads. clickable: a transparent marker on every cell
    (trace 1, customdata [layer, head], as plots.grid_point_to_head reads) takes clicks."""
    shown, raw = np.asarray(shown, dtype=float), np.asarray(raw, dtype=float)
    if shown.ndim != 2 or shown.shape != raw.shape:
        raise InputError(f"shown and raw must be the same [L, H] shape, got {shown.shape} "
                         f"and {raw.shape}")
    n_layer, n_head = shown.shape
    across = n_layer > 1.5 * n_head if layers_across is None else bool(layers_across)
    kv = list(kv_heads) if len(kv_heads) == n_head else list(range(n_head))
    grouped = len(set(kv)) < n_head
    names = np.array([[f"L{l}.H{h}" + (f" (key/value head {kv[h]})" if grouped else "")
                       for h in range(n_head)] for l in range(n_layer)])
    span = _span(shown, span)

    def oriented(a):  # [L, H] -> as drawn: rows down the y axis, columns along x
        return a.T if across else a
    trace = go.Heatmap(
        z=oriented(shown), text=oriented(names), customdata=oriented(raw),
        hovertemplate=(f"%{{text}}<br>{_esc(shown_name)}: %{{z:{fmt}}}<br>"
                       f"{_esc(raw_name)}: %{{customdata:.4g}}<extra></extra>"),
        colorscale=DIVERGING_SCALE, zmid=0.0, zmin=-span, zmax=span, hoverongaps=False,
        colorbar=dict(title=dict(text=_esc(colorbar_title)), thickness=14), xgap=1, ygap=1)
    head_axis = dict(title=dict(text="head"), tickmode="array", tickvals=list(range(n_head)),
                     ticktext=[f"H{h}" + (f" kv{kv[h]}" if grouped and across else "")
                               for h in range(n_head)], showgrid=False)
    layer_axis = dict(title=dict(text="layer"), tickmode="array",
                      tickvals=list(range(n_layer)), ticktext=[f"L{l}" for l in range(n_layer)],
                      showgrid=False)
    traces = [trace]
    if clickable:  # heatmap cells cannot be selected in Plotly; markers over them can
        layers, heads = np.meshgrid(np.arange(n_layer), np.arange(n_head), indexing="ij")
        layers, heads = layers.ravel(), heads.ravel()
        traces.append(go.Scatter(
            x=layers if across else heads, y=heads if across else layers, mode="markers",
            name="heads", showlegend=False,
            marker=dict(symbol="square", size=14, color="rgba(0,0,0,0)", line=dict(width=0)),
            customdata=np.stack([layers, heads], axis=1).tolist(),  # plain lists, see maps.py
            hovertext=[f"{names[l, h]}<br>{_esc(shown_name)}: {shown[l, h]:{fmt}}<br>"
                       f"{_esc(raw_name)}: {raw[l, h]:.4g}<br>click: path patching into it"
                       for l, h in zip(layers, heads)],
            hovertemplate="%{hovertext}<extra></extra>"))
        trace.hoverinfo = "skip"
        trace.hovertemplate = None
    x_axis, y_axis = (layer_axis, head_axis) if across else (head_axis, layer_axis)
    fig = _base_layout(
        go.Figure(traces), _title(title, "lines separate heads that share keys and values"
                                 if grouped else ""),
        height=int(max(320, 24 * (n_head if across else n_layer) + 160)),
        meta=dict(cells=[n_head, n_layer] if across else [n_layer, n_head]),
        xaxis=dict(x_axis, side="top", constrain="domain", tickangle=0),
        yaxis=dict(y_axis, autorange="reversed", scaleanchor="x", constrain="domain"))
    if clickable:
        fig.update_layout(clickmode="event+select", dragmode=False)
    if grouped:
        for h in range(1, n_head):
            if kv[h] != kv[h - 1]:
                edge, length = h - 0.5, n_layer - 0.5
                line = dict(type="line", line=dict(color="#222", width=2))
                if across:
                    fig.add_shape(x0=-0.5, x1=length, y0=edge, y1=edge, **line)
                else:
                    fig.add_shape(x0=edge, x1=edge, y0=-0.5, y1=length, **line)
        if not across:  # the groups named above their columns
            for g in sorted(set(kv)):
                members = [h for h in range(n_head) if kv[h] == g]
                fig.add_annotation(x=(members[0] + members[-1]) / 2, y=0.0, yref="paper",
                                   yanchor="top", text=f"kv{g}", showarrow=False,
                                   font=dict(size=12, color="#555"))
    return fig


def position_patching_map(shown: np.ndarray, raw: np.ndarray, tokens: Sequence[str],
                          title: str, colorbar_title: str, differing: Sequence[int] = (),
                          fmt: str = ".3f", span: float | None = None) -> go.Figure:
    """[L, T] patching effects of a stream (residual stream, attention or MLP output) at each
    layer and position, tokens along the x axis, on a diverging scale (from -span to span
    when given); positions where the prompts differ are marked with a star."""
    shown, raw = np.asarray(shown, dtype=float), np.asarray(raw, dtype=float)
    if shown.ndim != 2 or shown.shape != raw.shape:
        raise InputError(f"shown and raw must be the same [L, T] shape, got {shown.shape} "
                         f"and {raw.shape}")
    n_layer, n_tokens = shown.shape
    if len(tokens) != n_tokens:
        raise InputError(f"{len(tokens)} token labels for {n_tokens} positions")
    marked = set(int(p) for p in differing)
    labels = [f"{'★' if i in marked else ''}{_esc(t)}" for i, t in enumerate(tokens)]
    text = [[f"L{l} · {i}: {_esc(tokens[i])}" for i in range(n_tokens)] for l in range(n_layer)]
    span = _span(shown, span)
    trace = go.Heatmap(
        z=shown, x=np.arange(n_tokens), y=np.arange(n_layer), text=text, customdata=raw,
        hovertemplate=(f"%{{text}}<br>normalized effect: %{{z:{fmt}}}<br>patched metric: "
                       f"%{{customdata:.4g}}<extra></extra>"),
        colorscale=DIVERGING_SCALE, zmid=0.0, zmin=-span, zmax=span, hoverongaps=False,
        colorbar=dict(title=dict(text=_esc(colorbar_title)), thickness=14), xgap=1, ygap=1)
    note = "★ = the prompts differ there" if marked else ""
    return _base_layout(
        go.Figure(trace), _title(title, note),
        height=int(max(320, 20 * n_layer + 200)), meta=dict(cells=[n_layer, n_tokens]),
        xaxis=dict(title=dict(text="position"), tickmode="array",
                   tickvals=list(range(n_tokens)), ticktext=labels, showgrid=False),
        yaxis=dict(title=dict(text="layer"), tickmode="array", tickvals=list(range(n_layer)),
                   ticktext=[f"L{l}" for l in range(n_layer)], showgrid=False,
                   autorange="reversed"))


def attribution_scatter(estimate: np.ndarray, exact: np.ndarray, r: float,
                        worst: Sequence[str] = (), title: str | None = None) -> go.Figure:
    """Each head's attribution-patching estimate against its exact patching effect (both
    normalized), with the diagonal where they agree; the worst heads are named."""
    a = np.asarray(estimate, dtype=float)
    b = np.asarray(exact, dtype=float)
    if a.shape != b.shape or a.ndim != 2:
        raise InputError(f"estimate and exact must be the same [L, H] shape, got {a.shape} "
                         f"and {b.shape}")
    n_layer, n_head = b.shape
    names = [f"L{l}.H{h}" for l in range(n_layer) for h in range(n_head)]
    x, y = b.ravel(), a.ravel()
    finite = np.isfinite(x) & np.isfinite(y)
    low = float(min(x[finite].min(), y[finite].min(), 0.0)) if finite.any() else -1.0
    high = float(max(x[finite].max(), y[finite].max(), 0.0)) if finite.any() else 1.0
    pad = 0.05 * (high - low or 1.0)
    worst = set(worst)
    fig = go.Figure([
        go.Scatter(x=[low - pad, high + pad], y=[low - pad, high + pad], mode="lines",
                   line=dict(color="#999", dash="dash", width=1), hoverinfo="skip",
                   name="estimate = exact"),
        go.Scatter(x=x, y=y, mode="markers+text", name="heads",
                   text=[n if n in worst else "" for n in names], textposition="top center",
                   customdata=names, marker=dict(size=8, color=NEUTRAL, opacity=0.75),
                   hovertemplate="%{customdata}<br>exact: %{x:.3f}<br>estimate: %{y:.3f}"
                                 "<extra></extra>"),
    ])
    r_text = f"r = {r:.3f}" if np.isfinite(r) else "r undefined"
    return _base_layout(
        fig, _title(title or "Attribution patching (estimate) against exact patching",
                    f"{r_text}; points on the dashed line are estimated exactly"),
        height=460, showlegend=False,
        xaxis=dict(title=dict(text="exact patching (normalized)"), zeroline=True),
        yaxis=dict(title=dict(text="attribution estimate (normalized)"), zeroline=True))


# --- the circuit graph ------------------------------------------------------------------------


def _node_place(name: str, n_layer: int, n_head: int) -> tuple[float, float]:
    """(x, y) of a node: heads in their column, each layer's MLP to the right of its heads,
    the embeddings above layer 0 and the logits below the last layer."""
    centre = (n_head - 1) / 2
    if name == "embed":
        return centre, -1.0
    if name == "logits":
        return centre, float(n_layer)
    if name.startswith("MLP"):
        return n_head + 0.5, int(name[3:]) + 0.35  # below its heads: it reads them
    layer, head = name[1:].split(".H")
    return float(head), float(layer)


def _reader_node(reader: str) -> tuple[str, str]:
    """"L3.H1.q" -> ("L3.H1", "q"); MLPs and the logits read their whole input."""
    if reader.count(".") == 2:
        node, part = reader.rsplit(".", 1)
        return node, part
    return reader, ""


WIDTH_BINS = 4


def circuit_graph(edges: Sequence, n_layer: int, n_head: int, title: str = "Circuit",
                  faithfulness: float | None = None) -> go.Figure:
    """A circuit's edges (objects with upstream, downstream, score) as a layered graph:
    layers top to bottom, heads in their columns, MLPs to the right, the embeddings on top
    and the logits at the bottom. Node size: the summed |score| of its edges; edge colour:
    the sign (red: restoring it moves the metric towards the clean run), width: |score|.
    The node trace (named "nodes") carries each node's name in customdata, for clicks."""
    if not edges:
        raise InputError("the circuit has no edges to draw")
    weight: dict[str, float] = {}
    links: dict[str, int] = {}
    for e in edges:
        for node in (e.upstream, _reader_node(e.downstream)[0]):
            weight[node] = weight.get(node, 0.0) + abs(e.score)
            links[node] = links.get(node, 0) + 1
    top = max(abs(e.score) for e in edges) or 1.0
    part_offset = {"q": -0.22, "k": 0.0, "v": 0.22, "": 0.0}
    traces = []
    mids_x, mids_y, mids_text = [], [], []
    for sign, colour in ((1, POSITIVE), (-1, NEGATIVE)):
        for b in range(WIDTH_BINS):
            xs, ys = [], []
            for e in edges:
                strength = abs(e.score) / top
                if (e.score >= 0) != (sign > 0):
                    continue
                if min(int(strength * WIDTH_BINS), WIDTH_BINS - 1) != b:
                    continue
                x0, y0 = _node_place(e.upstream, n_layer, n_head)
                node, part = _reader_node(e.downstream)
                x1, y1 = _node_place(node, n_layer, n_head)
                x1 += part_offset[part]
                xs += [x0, x1, None]
                ys += [y0, y1, None]
                mids_x.append((x0 + x1) / 2)
                mids_y.append((y0 + y1) / 2)
                reads = f" (its {part})" if part else ""
                mids_text.append(f"{e.upstream} → {node}{reads}: {e.score:+.4g}")
            if xs:
                traces.append(go.Scatter(
                    x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                    line=dict(color=colour, width=0.8 + 3.2 * (b + 0.5) / WIDTH_BINS),
                    opacity=0.35 + 0.5 * (b + 0.5) / WIDTH_BINS))
    traces.append(go.Scatter(x=mids_x, y=mids_y, mode="markers", name="edges",
                             marker=dict(size=6, color="rgba(0,0,0,0)"), text=mids_text,
                             hovertemplate="%{text}<extra></extra>", showlegend=False))
    names = sorted(weight, key=lambda n: (_node_place(n, n_layer, n_head)[1],
                                          _node_place(n, n_layer, n_head)[0]))
    biggest = max(weight.values()) or 1.0
    xs, ys, sizes, symbols, colours, hover = [], [], [], [], [], []
    for name in names:
        x, y = _node_place(name, n_layer, n_head)
        xs.append(x)
        ys.append(y)
        sizes.append(10 + 26 * np.sqrt(weight[name] / biggest))
        kind = ("mlp" if name.startswith("MLP") else "end" if name in ("embed", "logits")
                else "head")
        symbols.append({"mlp": "square", "end": "diamond", "head": "circle"}[kind])
        colours.append({"mlp": "#a6a6a6", "end": "#222222", "head": NEUTRAL}[kind])
        hover.append(f"{name}: {links[name]} edge(s), Σ|score| {weight[name]:.4g}"
                     + ("<br>click: its attention map" if kind == "head" else ""))
    traces.append(go.Scatter(
        x=xs, y=ys, mode="markers+text", name="nodes", customdata=names, text=names,
        # the MLPs' column is the rightmost: their names go on its left, inside the plot
        textposition=["middle left" if n.startswith("MLP") else "middle right" for n in names],
        textfont=dict(size=12), hovertext=hover,
        hovertemplate="%{hovertext}<extra></extra>",
        marker=dict(size=sizes, symbol=symbols, color=colours, line=dict(color="white",
                                                                         width=1))))
    note = f"{len(edges)} edges" + (f"; recovered {faithfulness:.0%} of the way from the "
                                    f"corrupted run to the clean run"
                                    if faithfulness is not None and np.isfinite(faithfulness)
                                    else "")
    fig = _base_layout(
        go.Figure(traces), _title(title, note),
        height=int(max(420, 24 * (n_layer + 2) + 140)), showlegend=False,
        meta=dict(nodes=names, node_curve=len(traces) - 1),
        xaxis=dict(tickmode="array", tickvals=list(range(n_head)) + [n_head + 0.5],
                   ticktext=[f"H{h}" for h in range(n_head)] + ["MLP"], showgrid=False,
                   zeroline=False, side="top", range=[-0.8, n_head + 1.6]),
        yaxis=dict(tickmode="array", tickvals=[-1] + list(range(n_layer)) + [n_layer],
                   ticktext=["embed"] + [f"L{l}" for l in range(n_layer)] + ["logits"],
                   autorange="reversed", showgrid=True, zeroline=False),
        dragmode=False)
    return fig


def circuit_point_to_node(point: Mapping, names: Sequence[str] = (),
                          node_curve: int | None = None) -> str | None:
    """The node name of one selected point of ``circuit_graph`` (a Streamlit point dict):
    its customdata, else its index into ``names`` when it is on the node trace (the
    figure's meta "nodes" and "node_curve"). Points of edges give None."""
    custom = point.get("customdata")
    if isinstance(custom, (list, tuple)):
        custom = custom[0] if custom else None
    if isinstance(custom, str) and custom:
        return custom
    curve = point.get("curve_number", point.get("curveNumber"))
    index = point.get("point_index", point.get("pointIndex", point.get("point_number")))
    if node_curve is not None and curve == node_curve and index is not None \
            and 0 <= int(index) < len(names):
        return names[int(index)]
    return None


def node_to_head(name: str) -> tuple[int, int] | None:
    """"L3.H1" -> (3, 1); MLPs, the embeddings and the logits -> None."""
    if not name.startswith("L") or ".H" not in name:
        return None
    layer, head = name[1:].split(".H", 1)
    if not (layer.isdigit() and head.isdigit()):
        return None
    return int(layer), int(head)
