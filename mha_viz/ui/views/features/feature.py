"""The Features page's sections about the feature it follows: where it fires on the text (a
click or a tap on a token asks it there), its pre-activation at that query by head x source
token with the sum stated (direct feature attribution, Kissane et al. 2024), and the next
tokens its decoder row raises and lowers where the model has an unembedding."""

from __future__ import annotations

from functools import partial

import numpy as np
import streamlit as st

from .... import analysis as A
from .... import plots, ui
from ....core.errors import InputError
from ...words import features as words
from .context import Features, follow_click

OUTPUT_TOKENS = 8  # raised, and as many lowered


def firing_section(c: Features) -> None:
    """The text, each token coloured by the feature's activation, the query outlined."""
    st.subheader(f"Feature f{c.feature}")
    fig = plots.feature_strip(c.firing.tokens, c.firing.of(c.feature),
                              words.firing_title(c.feature), words.firing_note(c.query),
                              per_row=c.per_row, marked=c.query)
    ui.show_figure(fig, key="feature_strip", alt="Where the feature fires on the text",
                   on_select=partial(follow_click, "feature_strip", "fq"))


def sources_section(c: Features) -> None:
    """The feature's pre-activation at the query by head x source token, and its sum."""
    found = ui.memo(A.feature_sources, c.model, c.sae, c.text, c.query, c.feature)
    seen = c.query + 1 if c.trace.causal else len(found.tokens)  # the sources it reads
    token = found.tokens[c.query]
    fig = plots.feature_sources_map(found.terms[:, :seen], found.heads, found.tokens[:seen],
                                    words.sources_title(c.feature, c.query, token),
                                    words.sources_note(c.narrow), sources_down=c.narrow)
    ui.show_figure(fig, key="feature_sources", alt="The feature's sources by head and token")
    st.markdown(words.sources_sentence(found, token, seen))
    st.caption(words.strongest_sentence(found))


def output_section(c: Features) -> None:
    """Folded below the first screen: the next tokens the feature raises and lowers."""
    ui.drawn_when_opened(words.output_title(c.feature), "output_tokens",
                         partial(draw_output, c))


def draw_output(c: Features) -> None:
    """The next tokens the feature's decoder row raises and lowers (the logit lens of the
    row), where the model has an unembedding."""
    try:
        out = ui.memo(A.feature_output_tokens, c.model, c.sae, c.feature, k=OUTPUT_TOKENS)
    except InputError as error:
        st.caption(words.no_output(ui.md_escape(str(error))))
        return
    shown = [*out.top, *out.bottom]
    fig = plots.signed_bars(words.unique_labels([t for t, _ in shown]),
                            np.array([v for _, v in shown]), words.output_title(c.feature),
                            words.OUTPUT_NOTE, value_name=words.OUTPUT_VALUE)
    ui.show_figure(fig, key="feature_output", alt="The next tokens the feature raises")
