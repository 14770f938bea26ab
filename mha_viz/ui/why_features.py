"""The why panel "in features" (ui/why.py): when a dictionary of the stream entering the
head's layer exists for the model (a bundled one, or the folder this session opened on the
Features page), the same score split into query-feature x key-feature pairs
(analysis.feature_score_attribution, Kamath et al. 2025): the strongest pairs, the
dictionary's error and decoder-bias terms and the model's biases, and the other pairs,
summing to the score as the panel's matrix does; each feature named with its activation
and where it fires most on the text. Off until asked for (a toggle, kept in the URL)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from .. import analysis, plots
from ..analysis.features import feature_index
from ..core.errors import MhaVizError
from .selection import Selection
from .stores import memo
from .dictionaries import residual_for
from .messages import without_server_paths
from .output import show_figure
from .settings import as_sentence, md_escape
from .state import synced
from .words import features as words

PAIRS = 8  # feature pairs named
FEATURES_LISTED = 6  # features described under the bars


def features_view(selection: Selection, trace, layer: int, head: int, query: int,
                  key: int) -> None:
    """The toggle, and while it is on the score of (query, key) in features (see the module
    docstring); nothing when no residual dictionary reads the layer's input."""
    found = residual_for(selection, layer)
    if found is None or selection.model is None:
        return
    shown = synced(st.toggle, "wfeat", words.PAIRS_TOGGLE, False, help=words.PAIRS_HELP)
    if not shown:
        return
    ids = trace.token_ids  # the tokens the map shows, a sentence pair's too
    try:
        split = memo(analysis.feature_score_attribution, selection.model, ids, layer, head,
                     query, sae=found.sae)
        pairs = split.pairs(key, PAIRS)
        firing = memo(analysis.feature_firing, selection.model, found.sae, ids)
    except MhaVizError as error:
        st.info(f"This score cannot be split into features. "
                f"{md_escape(as_sentence(without_server_paths(str(error))))}")
        return
    named = [words.pair_label(q, k) for q, k, _ in pairs.pairs]
    values = [term for _, _, term in pairs.pairs]
    for part, value in pairs.parts.items():
        named.append(words.PART_LABELS[part])
        values.append(value)
    named.append(f"others ({pairs.n_others:,})")
    values.append(pairs.others)
    show_figure(plots.signed_bars(named, np.array(values),
                                  words.pairs_title(layer, head, query, key), words.PAIRS_NOTE,
                                  total=pairs.total, total_label="score"),
                key="why_features", alt="The score split into feature pairs")
    st.markdown(words.pairs_sentence(pairs, found.name))
    listed = []
    for q, k, _ in pairs.pairs:
        for name, side, position in ((q, "query", query), (k, "key", key)):
            if (name, side) not in listed and len(listed) < FEATURES_LISTED:
                listed.append((name, side))
                peak = firing.peak(feature_index(name))[0]
                st.markdown("- " + words.feature_line(name, side,
                                                      split.activation(position, name),
                                                      *firing.window(peak)))
