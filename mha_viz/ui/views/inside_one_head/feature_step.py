"""The lesson's screen on the induction toy in features: the feature its induction heads
write at the textbook case's query, split by head and source token (direct feature
attribution, Kissane et al. 2024), with the bundled dictionary of layer 1's heads."""

from __future__ import annotations

import numpy as np
import streamlit as st

from .... import analysis, plots, ui
from ... import dictionaries
from ... import lesson as lesson_mode
from ...words import feature_step as words
from .beyond import toy_case
from .head import Head

DICTIONARY = "induction-toy/L1.hook_z"  # bundled beside the toy (dictionaries.bundled_saes)
INDUCTION = 0.3  # a head scoring more than this on Training's probe is an induction head


def induction_feature(h: Head) -> None:
    """The feature the toy's induction heads write from the induction target, and how much
    of its decoder sits on them."""
    toy, trace, case, probe = toy_case(h.selection)
    sae = dictionaries.load_dictionary(DICTIONARY, toy.model)
    found = ui.memo(analysis.feature_from_source, toy.model, sae, toy.text, case.query,
                    case.key)
    shares = ui.memo(analysis.feature_heads, sae)[found.feature]
    # the induction heads as the Training page measures them (its probe)
    induction = [f"L{case.layer}.H{head}"
                 for head in np.flatnonzero(probe.scores[case.layer] > INDUCTION)]
    labels = list(trace.display_tokens)
    st.markdown(words.step_text(case, found, labels, shares, induction, DICTIONARY))
    seen = case.query + 1
    narrow = ui.narrow_screen()
    with lesson_mode.figure_place():
        ui.show_figure(plots.feature_sources_map(
            found.terms[:, :seen], found.heads, found.tokens[:seen],
            words.figure_title(found.feature, case.query, labels[case.query]),
            words.FIGURE_NOTE_DOWN if narrow else words.FIGURE_NOTE, sources_down=narrow),
            key="induction_feature", alt="The induction feature by head and source token",
            share=ui.column_share(0.6))
