"""Why a head attends where it does, for the cell (query, key) a person clicked on a head's map
(Attention maps, Inside one head): the score split into query-side x key-side sources
(analysis.score_attribution), the key-side sources against another key or the mean key, and
who composes into the head, on the text and in the weights (analysis.composition_scores).

A cell that cannot be explained gets a message: a masked key, a padding token, a model or a
stack whose scores cannot be split exactly (the library's error names the step), a saved
trace without its model."""

from __future__ import annotations

import numpy as np
import streamlit as st

from .. import analysis, plots
from ..core.errors import MhaVizError
from .selection import Selection
from .stores import memo
from .traces import get_trace
from .gestures import ask_scroll, scroll_anchor
from .messages import callback, without_server_paths
from .output import (column_share, drawn_when_opened, figure_columns, figure_screen,
                     section_open_key, section_opens, show_figure)
from .settings import as_sentence, md_escape
from .state import get_value, incoming_value, set_value, synced
from .why_features import features_view
from .words import why as words

WHY = "why"  # the folded section's key, and where a click scrolls to
TITLE = "Why this head attends there: its score split by source"
TOP_SOURCES = 6  # sources on each side of the matrix shown (the rest are one "others")
TOP_SOURCES_NARROW = 4  # ... on a phone, where six columns and their totals leave no room
NARROW_MATRIX_PX = 420  # a column narrower than this is a phone's (six need ~410 px)
BARS = 8  # key-side sources in the contrast's bars


@callback
def pick_cell(chart: str, query_name: str, key_name: str, positions=None) -> None:
    """A click on a pickable map (plots.cell_of_point) -> the cell asked about: the synced
    query and key (positions: the text's position of each drawn row, when hidden tokens
    are left out of the map), the section opened and brought into view."""
    state = st.session_state.get(chart) or {}
    for point in (state.get("selection") or {}).get("points") or []:
        cell = plots.cell_of_point(point)
        if cell is None:
            continue
        query, key = cell if positions is None else (positions[cell[0]], positions[cell[1]])
        set_value(query_name, int(query))
        set_value(key_name, int(key))
        st.session_state[section_open_key(WHY)] = True
        ask_scroll(WHY)
        return


CROSS_REFUSED = ("Cross-attention's keys are the encoder's output, not sources of the "
                 "decoder's stream: its split by source is not built (the encoder's is: pick "
                 "encoder self-attention in the sidebar).")
_CROSS_CELL = "_mv_why_cross"  # the cell last clicked on a cross-attention map


@callback
def pick_cross_cell(chart: str) -> None:
    """A click on a cross-attention map (plots.cross_attention_heatmap, pickable): the cell,
    which cross_cell_note answers under the map."""
    state = st.session_state.get(chart) or {}
    for point in (state.get("selection") or {}).get("points") or []:
        cell = plots.cell_of_point(point)
        if cell is not None:
            st.session_state[_CROSS_CELL] = cell
            return


def cross_cell_note(weights: np.ndarray, rows: list[str], source: list[str]) -> None:
    """Under a cross-attention map: the clicked cell's weight, and why its score is not split
    by source (a click gets an answer, never nothing)."""
    cell = st.session_state.get(_CROSS_CELL)
    if cell is None or not (0 <= cell[0] < weights.shape[0] and 0 <= cell[1] < weights.shape[1]):
        return
    row, col = cell
    st.info(f"Target {row} '{md_escape(rows[row])}' reads source {col} "
            f"'{md_escape(source[col])}' with weight {float(weights[row, col]):.3f}. Why it "
            f"attends there is asked of self-attention only. {CROSS_REFUSED}")


def _position_picker(name: str, label: str, labels: list[str], default: int) -> int:
    n = len(labels)
    return int(synced(st.selectbox, name, label, int(default), options=list(range(n)),
                      valid=lambda i: 0 <= int(i) < n, format_func=lambda i: f"{i}: {labels[i]}"))


def why_body(selection: Selection, trace, layer: int, head: int, default: tuple[int, int],
             query: int | None = None, query_name: str = "wq", key_name: str = "wk") -> None:
    """The query and key pickers and why_panel, where a click (pick_cell) scrolls to.
    query: the page's own query when it already picks one (its selector is not drawn
    twice)."""
    labels = list(trace.display_tokens)
    with scroll_anchor(WHY):
        pick_q, pick_k = st.columns(2)
    with pick_q:
        if query is None:
            query = _position_picker(query_name, "Query (the token that reads)", labels,
                                     default[0])
        else:
            st.caption(f"Query {query} '{md_escape(labels[query])}': the one the page follows")
    with pick_k:
        key = _position_picker(key_name, "Key (the token read from)", labels, default[1])
    why_panel(selection, trace, layer, head, query, key)


def _linked(names: tuple[str, str]) -> bool:
    """Whether the link holds a cell (one copied after a click): its section opens."""
    return any(incoming_value(name) is not None for name in names)


def why_section(selection: Selection, trace, layer: int, head: int, default: tuple[int, int],
                **pickers) -> None:
    """why_body in a folded section, which a click on the map (pick_cell) opens, and so does
    a link that holds a cell."""
    if _linked((pickers.get("query_name", "wq"), pickers.get("key_name", "wk"))):
        # open from now on, as a click leaves it (an expander's `expanded` only sets it
        # once: the link's values are taken in this run, and the next would fold it)
        st.session_state[section_open_key(WHY)] = True
    drawn_when_opened(TITLE, WHY, lambda: why_body(selection, trace, layer, head, default,
                                                   **pickers))


def marked_cell(n_tokens: int, default: tuple[int, int], positions=None,
                query_name: str = "wq", key_name: str = "wk") -> tuple[int, int] | None:
    """The cell why_section explains, as (row, column) of the map drawn above it, while the
    section is open (None when it is folded, or the cell is not drawn): the map marks it.
    positions: the text's position of each drawn row (hidden tokens left out), as
    pick_cell reads them; n_tokens: the text's tokens, which the pickers offer."""
    names = (query_name, key_name)
    if not section_opens(WHY, expanded=_linked(names)):
        return None
    cell = []
    for name, fallback in zip(names, default):
        value = get_value(name)
        if value is None:  # not drawn yet: the link's value, as its picker will read it
            raw = incoming_value(name)
            value = int(raw) if raw is not None and raw.lstrip("-").isdigit() else fallback
        cell.append(int(value) if 0 <= int(value) < n_tokens else int(fallback))
    if positions is None:
        return cell[0], cell[1]
    drawn = {int(p): i for i, p in enumerate(positions)}
    if cell[0] not in drawn or cell[1] not in drawn:
        return None
    return drawn[cell[0]], drawn[cell[1]]


def _refused(selection: Selection, trace, query: int, key: int) -> str | None:
    """Why this cell cannot be explained, or None."""
    if selection.uploaded is not None:
        return ("A saved trace holds maps, not its model: trace the text in the sidebar to "
                "split a score by source.")
    if selection.kind == "cross":
        return CROSS_REFUSED
    if selection.kind == "decoder":
        return ("The decoder's self-attention reads the encoder's output through "
                "cross-attention too: its scores' split by source is not built (the "
                "encoder's is: pick encoder self-attention in the sidebar).")
    cannot = None if selection.model is None else analysis.why_no_split(selection.model)
    if cannot:
        return f"This score cannot be split by source. {_message(cannot)}"
    if trace.truncated and trace.is_pair:
        return ("This sentence pair was cut to Max tokens: widen it in the sidebar to split "
                "a score by source.")
    if trace.causal and key > query:
        return (f"Query {query} cannot see key {key}: a causal model's token reads only "
                f"itself and earlier tokens, so this score is −∞ after the mask and its "
                f"weight 0. Click a cell on or below the diagonal.")
    pad = trace.special_tokens.get("pad")
    others = {trace.special_tokens.get(r) for r in ("bos", "eos", "cls", "sep")}
    if pad is not None and pad not in others:
        padded = [p for p in (query, key) if trace.tokens[p] == pad]
        if padded:
            return (f"Token {padded[0]} is padding ({md_escape(pad)}): it stands for no text, "
                    f"so there is nothing to explain. Click a cell of two real tokens.")
    return None


def _message(error: MhaVizError | str) -> str:
    """The library's message as a sentence of its own: capitalized, ending with a stop."""
    said = as_sentence(without_server_paths(str(error)))
    return md_escape(said if said.endswith((".", "!", "?", ")")) else said + ".")


def why_panel(selection: Selection, trace, layer: int, head: int, query: int, key: int) -> None:
    """The score of (query, key) split by source, its contrast and the head's composition."""
    refused = _refused(selection, trace, query, key)
    if refused:
        st.info(refused)
        return
    model, pair = selection.model, selection.text_pair
    attention = get_trace(selection)  # the softmax's weights, whatever the page's maps show
    # the tokens the map shows: the text, or its ids when Max tokens cut it
    text = trace.token_ids if trace.truncated else selection.text
    labels = list(trace.display_tokens)
    name = plots.head_name(layer, head)
    visible = [j for j in range(trace.n_tokens) if j != key and (j <= query or not trace.causal)]
    sentence = st.container()
    matrix_col, contrast_col = figure_columns([3, 2], gap="medium")
    with contrast_col:
        # a link's key comes as text: "mean" or a position (it had been refused as "7")
        reference = synced(st.selectbox, "wref", "Against", "mean", options=["mean", *visible],
                           parse=lambda text: text if text == "mean" else int(text),
                           format_func=lambda j: "the mean key" if j == "mean"
                           else f"key {j}: {labels[j]}",
                           help="The softmax only compares keys: which key-side sources make "
                                "this key win over the one chosen here (Kamath et al. 2025).")
    try:
        found = memo(analysis.score_attribution, model, text, layer, head, query,
                     contrast=reference, text_pair=pair)
        column = found.column(key)
    except MhaVizError as error:
        st.info(f"This score cannot be split by source. {_message(error)}")
        return
    if found.masked[column]:
        st.info(f"Query {query} cannot see key {key} in this layer (its window or mask "
                f"hides it): the score does not reach the softmax.")
        return
    roles = _roles(attention)
    screen = figure_screen(column_share(0.6))
    narrow = screen is not None and screen.width < NARROW_MATRIX_PX
    parts = found.parts(key, TOP_SOURCES_NARROW if narrow else TOP_SOURCES)
    sides = {"key": words.named_parts(parts, "key"), "query": words.named_parts(parts, "query")}
    sentence.markdown(f"**{name}, query {query} '{md_escape(labels[query])}' → key {key} "
                      f"'{md_escape(labels[key])}'.** " + words.why_sentence(
                          float(found.capped_scores[column]),
                          float(attention.head_map(layer, head)[query, key]), sides, roles))
    sentence.markdown(words.arithmetic_sentence(parts, softcap=bool(found.softcap)))
    positions = words.positions_sentence(found, key, roles)
    if positions:
        sentence.markdown(positions)
    with matrix_col:
        fig = plots.source_matrix(parts.cells, [words.source_label(r) for r in parts.rows],
                                  [words.source_label(c) for c in parts.cols],
                                  f"{name}'s score, query {query} → key {key}, by source")
        show_figure(fig, key="why_matrix", alt="The score split by query and key source",
                    share=column_share(0.6))
        st.caption(words.COLOURS + (" The soft-cap bends the sum afterwards."
                                    if found.softcap else ""))
    with contrast_col:
        against = "the mean key" if reference == "mean" else f"key {reference}"
        gap = found.parts(key, BARS, contrasted=True)
        bars = [(words.source_label(c), float(v)) for c, v in zip(gap.cols, gap.col_totals)]
        show_figure(plots.source_bars([label for label, _ in bars],
                                      np.array([v for _, v in bars]),
                                      f"Key {key} against {against}",
                                      "key-side sources, strongest first; the gap last",
                                      total=gap.total, total_label="gap"),
                    key="why_contrast", alt="Key-side sources against another key",
                    share=column_share(0.4))
        st.caption(words.contrast_sentence(gap, against, key, float(found.scores[column]),
                                           roles))
    features_view(selection, trace, layer, head, query, key)
    composition(selection, text, layer, head)


def _roles(attention) -> dict[str, str]:
    """Each head's clear role on the text (pattern roles only: previous token, induction,
    ...), read from the attention weights."""
    scores = memo(analysis.role_scores, attention)
    return {r.name: r.role for r in analysis.strongest_roles(scores) if r.tier == 0}


def composition(selection: Selection, text, layer: int, head: int) -> None:
    """Who composes into the head: each earlier head's share on this text beside Elhage et
    al.'s weight-based score, through the queries, keys or values."""
    name = plots.head_name(layer, head)
    st.markdown(f"**Who composes into {name}**")
    if layer == 0:
        st.caption(words.nothing_composes(layer))
        return
    kind = synced(st.radio, "comp", "Through its", "k", options=list(words.KINDS),
                  format_func=words.KINDS.get, horizontal=True,
                  help="Elhage et al. 2021: an earlier head can feed this one's queries, its "
                       "keys or its values.")
    try:
        on_text = memo(analysis.composition_scores, selection.model, text, layer, head,
                       text_pair=selection.text_pair)
        in_weights = memo(analysis.composition_scores, selection.model, layer=layer, head=head)
    except MhaVizError as error:
        st.info(f"Composition cannot be measured here. {_message(error)}")
        return
    text_col, weights_col = figure_columns(2)
    with text_col:
        values = on_text.of(kind)[:layer]
        show_figure(_read_only(plots.layer_head_heatmap(
                        values, f"Into {name}'s {kind.upper()}, on this text", "share",
                        colorscale="Blues", zmin=0.0)),
                    key="why_text_composition", alt="Composition on the text",
                    share=column_share(0.5))
        st.caption(words.composition_caption(kind, layer, name, on_text.other[kind]))
    with weights_col:
        values = in_weights.of(kind)[:layer]
        ranked = analysis.rank_heads(values)
        strongest = (plots.head_name(*ranked[0]), float(values[ranked[0]])) if ranked else None
        # white up to the random baseline: only a head above it is coloured as composing
        show_figure(_read_only(plots.layer_head_heatmap(
                        values, f"Into {name}'s {kind.upper()}, in the weights", "score",
                        colorscale="Blues", zmin=float(in_weights.baseline),
                        zmax=_top_above(values, in_weights.baseline))),
                    key="why_weight_composition", alt="Composition in the weights",
                    share=column_share(0.5))
        st.caption(words.baseline_caption(kind, in_weights.baseline, strongest))


def _top_above(values: np.ndarray, baseline: float) -> float | None:
    """The top of a colour scale that starts at baseline: the values' own (None) unless
    none is above it (then all of them are drawn white)."""
    top = float(np.nanmax(values)) if np.isfinite(values).any() else baseline
    return None if top > baseline else baseline + max(abs(baseline), 1e-3)


def _read_only(fig):
    """A composition map as the panel shows it: the camera alone in its toolbar (a phone's
    row of zoom buttons covered the title) and a few colour-bar ticks (they overlapped)."""
    fig.update_traces(colorbar=dict(nticks=4))
    return plots.camera_only(fig)
