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
from .output import column_share, drawn_when_opened, figure_columns, section_open_key, show_figure
from .settings import as_sentence, md_escape
from .state import set_value, synced
from .words import why as words

WHY = "why"  # the folded section's key, and where a click scrolls to
TITLE = "Why this head attends there: its score split by source"
TOP_SOURCES = 6  # sources on each side of the matrix shown (the rest are one "others")
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


def why_section(selection: Selection, trace, layer: int, head: int, default: tuple[int, int],
                **pickers) -> None:
    """why_body in a folded section, which a click on the map (pick_cell) opens."""
    drawn_when_opened(TITLE, WHY, lambda: why_body(selection, trace, layer, head, default,
                                                   **pickers))


def _refused(selection: Selection, trace, query: int, key: int) -> str | None:
    """Why this cell cannot be explained, or None."""
    if selection.uploaded is not None:
        return ("A saved trace holds maps, not its model: trace the text in the sidebar to "
                "split a score by source.")
    if selection.kind == "cross":
        return ("Cross-attention's keys are the encoder's output, not sources of the "
                "decoder's stream: its split by source is not built (the encoder's is: pick "
                "encoder self-attention in the sidebar).")
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
        reference = synced(st.selectbox, "wref", "Against", "mean", options=["mean", *visible],
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
    sentence.markdown(f"**{name}, query {query} '{md_escape(labels[query])}' → key {key} "
                      f"'{md_escape(labels[key])}'.** " + words.why_sentence(
                          float(found.capped_scores[column]),
                          float(attention.head_map(layer, head)[query, key]),
                          {side: found.strongest_sources(key, side, k=3)
                           for side in ("key", "query")}, roles))
    with matrix_col:
        rows, cols, cut = found.top_matrix(key, TOP_SOURCES)
        fig = plots.matrix_figure(cut, [words.source_label(r) for r in rows],
                                  [words.source_label(c) for c in cols],
                                  f"{name}'s score, query {query} → key {key}, by source",
                                  diverging=True, row_title="query side",
                                  col_title="key side")
        show_figure(plots.camera_only(plots.columns_at_bottom(fig)), key="why_matrix",
                    alt="The score split by query and key source", share=column_share(0.6))
        st.caption(words.COLOURS + (" The soft-cap bends the sum afterwards."
                                    if found.softcap else ""))
    with contrast_col:
        against = "the mean key" if reference == "mean" else f"key {reference}"
        bars = found.strongest_sources(key, "key", k=BARS, contrasted=True)
        show_figure(plots.source_bars([words.source_label(s) for s, _ in bars],
                                      np.array([v for _, v in bars]),
                                      f"Key {key} against {against}",
                                      "key-side sources, strongest first"),
                    key="why_contrast", alt="Key-side sources against another key",
                    share=column_share(0.4))
        st.caption(words.contrast_sentence(bars, against, roles))
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
        show_figure(plots.layer_head_heatmap(values, f"Into {name}'s {kind.upper()}, on this "
                                             f"text", "share", colorscale="Blues", zmin=0.0),
                    key="why_text_composition", alt="Composition on the text",
                    share=column_share(0.5))
        st.caption(words.composition_caption(kind, layer, name, on_text.other[kind]))
    with weights_col:
        values = in_weights.of(kind)[:layer]
        ranked = analysis.rank_heads(values)
        strongest = (plots.head_name(*ranked[0]), float(values[ranked[0]])) if ranked else None
        show_figure(plots.layer_head_heatmap(values, f"Into {name}'s {kind.upper()}, in the "
                                             f"weights", "score", colorscale="Blues",
                                             zmin=0.0),
                    key="why_weight_composition", alt="Composition in the weights",
                    share=column_share(0.5))
        st.caption(words.baseline_caption(kind, in_weights.baseline, strongest))
