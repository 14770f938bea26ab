"""Inside one head's lesson screens that look beyond the head's own arithmetic (the view
inside_one_head reads them): why an induction head attends where it does, on the bundled
induction toy (the textbook case of docs/analyses.md), and what a head moves beside where it
looks (Kobayashi et al. 2020)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from ... import analysis, plots, ui
from ...core.errors import MhaVizError
from .. import lesson
from ..words import one_head as words
from ..words import why as why_words

TOY = "induction-toy"  # the bundled run's last checkpoint (the model picker lists it)
# a passage repeated: in its second copy every query has an induction target
TOY_TEXT = "the cat sat on the mat. the cat sat on the mat."


def _toy_case(selection: ui.Selection):
    """(selection, its trace, the textbook case) on the toy: the sidebar's own model and
    text when they are a toy and repeat something, else the toy on TOY_TEXT."""
    if selection.model is not None and selection.model_name == TOY \
            and selection.uploaded is None:
        trace = ui.get_trace(selection)
        try:
            return selection, trace, ui.memo(analysis.induction_example, trace)
        except MhaVizError:  # the sidebar's text repeats nothing: the toy's own text
            pass
    toy = ui.Selection(model_name=TOY, text=TOY_TEXT, text_pair=None, max_tokens=None,
                       model=ui.get_model(TOY))
    trace = ui.get_trace(toy)
    return toy, trace, ui.memo(analysis.induction_example, trace)


def textbook_step(selection: ui.Selection) -> None:
    """The induction head's score at its target, split by source: most of it comes from the
    key side of the previous-token head (K-composition)."""
    toy, trace, case = _toy_case(selection)
    found = ui.memo(analysis.score_attribution, toy.model, toy.text, case.layer, case.head,
                    case.query, contrast="mean")
    parts = found.strongest_sources(case.key, "key", k=6)
    labels = list(trace.display_tokens)
    st.markdown(words.textbook_text(case, labels, float(found.capped_scores[
        found.column(case.key)]), parts, shown_on_toy=toy is selection))
    if toy is not selection:
        st.page_link("pages/5_Inside_One_Head.py", icon="▶",
                     label="Open the lesson on the toy",
                     query_params={"model": TOY, "text": TOY_TEXT, "lesson": "1",
                                   "layer": str(case.layer), "head": str(case.head),
                                   "query": str(case.query), "wk": str(case.key)})
    with lesson.figure_place():
        name = plots.head_name(case.layer, case.head)
        ui.show_figure(plots.source_bars(
            [why_words.source_label(s) for s, _ in parts], np.array([v for _, v in parts]),
            f"{name}'s score at query {case.query} → key {case.key}: its key side",
            "red raises the score, blue lowers it"),
            key="textbook", alt="The induction head's score by key-side source",
            share=ui.column_share(0.6))


def moves_step(selection: ui.Selection, layer: int, head: int) -> None:
    """This head's map of weights beside its map of what moves, and the first token's share
    of each."""
    model = selection.model
    if selection.kind is not None or model is None or model.info.encoder_decoder \
            or selection.uploaded is not None:
        st.info(words.MOVES_NOT_HERE)
        return
    looks = ui.get_trace(selection)
    moves = ui.get_trace(selection, weights="value")
    shares = ui.memo(analysis.sink_shares, looks, moves)
    name = plots.head_name(layer, head)
    st.markdown(words.moves_text(name, looks.display_tokens[0],
                                 float(shares.of_weights[layer, head]),
                                 float(shares.of_moved[layer, head])))
    labels = list(looks.display_tokens)
    with lesson.figure_place():
        places = st.columns(2)
    for place, trace, title, key, value_name in zip(
            places, (looks, moves),
            (f"{name}: where it looks (weights)", f"{name}: what it moves"),
            ("moves_weights", "moves_moved"), ("weight", "share moved")):
        with place:
            ui.show_figure(plots.head_heatmap(trace.head_map(layer, head), labels, title=title,
                                              causal=trace.causal, value_name=value_name),
                           key=key, alt=title, share=0.3)
