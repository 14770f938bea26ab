"""The Features page's sections about the head: its strongest features on the text (bars a
click picks from, a table with where each fires most), where they fire most over a corpus
(a job with progress and Cancel), and what the page says when it has no dictionary."""

from __future__ import annotations

from functools import partial
from math import isfinite

import streamlit as st

from .... import corpus, plots, ui
from ....analysis.heads import head_name
from ...words import features as words
from .context import Features, Missing, follow_click

SNIPPET_SEGMENTS = 64  # segments of the demo corpus read
SNIPPET_TEXTS = 64  # its first paragraphs
SNIPPET_SEG_LEN = 128  # tokens a segment (the model's context, when shorter)
SNIPPETS_PER_FEATURE = 3


def missing_section(m: Missing) -> None:
    """Why there is nothing to show, and a way to a layer that has a dictionary."""
    (st.error if m.refused else st.info)(m.message)
    for layer in m.layers:
        st.button(f"Show layer {layer}", key=f"features_layer_{layer}",
                  on_click=ui.callback(ui.set_value), args=("layer", layer))


def head_features_section(c: Features) -> None:
    """The head's strongest features on the text, as bars and as a table."""
    st.subheader("The head's features")
    top = c.top
    if not top.features:
        st.info(f"No feature of this dictionary fires on this text with a share on "
                f"{head_name(c.layer, c.head)}.")
        return
    fig = plots.head_features_bars(top.features, top.weight, top.summed, top.share,
                                   head_name(c.layer, c.head),
                                   words.head_features_title(c.layer, c.head),
                                   words.HEAD_FEATURES_NOTE, picked=c.feature)
    ui.show_figure(fig, key="feature_bars", alt="The head's strongest features",
                   on_select=partial(follow_click, "feature_bars", "feature"))
    st.caption(words.head_features_caption(top.skipped, c.layer, c.head))
    column = words.TABLE_COLUMNS
    windows = [c.firing.window(p) for p in top.peak]
    # a static table: ten rows need no grid (st.dataframe's costs a new tab its script)
    st.table({column["feature"]: [f"f{f}" for f in top.features],
              column["summed"]: [words.number(v) for v in top.summed],
              column["share"]: [words.number(v) for v in top.share],
              column["peak"]: [f"{p}: {c.firing.tokens[p]}" for p in top.peak],
              column["text"]: [words.snippet(*w) for w in windows]},
             border="horizontal", hide_index=True)


def snippets_section(c: Features) -> None:
    """Folded: where the head's features fire most over the demo corpus."""
    if c.top.features:
        ui.drawn_when_opened(words.SNIPPETS_TITLE, "snippets", partial(draw_snippets, c))


def draw_snippets(c: Features) -> None:
    seg_len = min(SNIPPET_SEG_LEN, c.model.info.max_positions)
    st.caption(words.snippets_intro(len(c.top.features), SNIPPET_TEXTS, SNIPPET_SEGMENTS,
                                    seg_len))
    texts = ui.memo(corpus.demo_texts, SNIPPET_TEXTS)
    found = ui.run_or_wait(
        corpus.feature_snippets_job, c.model, c.sae, texts, features=list(c.top.features),
        k=SNIPPETS_PER_FEATURE, seg_len=seg_len, max_segments=SNIPPET_SEGMENTS,
        label="Reading the corpus", name="feature_snippets", unit=("segments", seg_len),
        auto=ui.runs_on_open("features.snippets", SNIPPET_SEGMENTS * seg_len * (c.layer + 1)),
        button=words.snippets_button(SNIPPET_SEGMENTS))
    if found is None:
        st.info(words.SNIPPETS_WAIT)
        return
    rows = {"feature": [], "activation": [], "snippet": []}
    for feature in found.features:
        for rank in range(SNIPPETS_PER_FEATURE):
            tokens, at, value = found.snippet(c.model, feature, rank)
            if isfinite(value):
                rows["feature"].append(f"f{feature}")
                rows["activation"].append(words.number(value))
                rows["snippet"].append(words.snippet(tokens, at))
    st.dataframe(rows, hide_index=True, width="stretch")
    st.caption(words.snippets_done(found.n_segments, found.n_tokens))
