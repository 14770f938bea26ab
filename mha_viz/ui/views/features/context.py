"""The Features page's context, built once a run: the sidebar's model and text, the head (as
every page picks it), the page's own sidebar section (a dictionary of the head's layer: a
bundled one of the model, or a SAELens folder of the server), where its features fire on
the text, the head's strongest of them, and the feature and query the page follows (kept in
the URL: sae, saedir, feature, fq; a link's value the page cannot use gets its line)."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from .... import analysis as A
from .... import plots, ui
from ....analysis.features import FeatureFiring, HeadFeatures
from ....core.errors import MhaVizError
from ....maps.trace import AttentionTrace
from ... import dictionaries
from ...dictionaries import CHOICE_NAME, FOLDER, FOLDER_NAME, Dictionary
from ...settings import as_sentence
from ...words import features as words

TOP = 10  # the head's features shown
OWNERS = "_mv_features_owner_"  # what a picked feature or query was picked for


@dataclass(frozen=True)
class Missing:
    """The page has no dictionary of the head's layer to read: why (words), and the layers
    this model's bundled dictionaries read (a button each)."""
    selection: ui.Selection
    message: str
    layers: tuple[int, ...]
    refused: bool = False  # a folder given that cannot be read as a dictionary of the model


@dataclass(frozen=True)
class Features:
    """What every section reads: the input, the head, the dictionary of its layer, the
    feature's firing on the text, the head's strongest features, the feature and query
    followed, and whether the screen is a phone's."""
    selection: ui.Selection
    trace: AttentionTrace
    text: object  # what the analyses read: the text, or its ids when Max tokens cut it
    layer: int
    head: int
    dictionary: Dictionary
    firing: FeatureFiring
    top: HeadFeatures
    feature: int
    query: int
    narrow: bool  # a phone's screen: a strip of six tokens a row, the sources down the map

    @property
    def per_row(self) -> int:
        """Tokens per row of the strip: 6 on a phone, 12 elsewhere."""
        return 6 if self.narrow else 12

    @property
    def model(self):
        return self.selection.model

    @property
    def sae(self):
        return self.dictionary.sae


def read(selection: ui.Selection) -> Features | Missing:
    """The page's context (see the module docstring)."""
    trace = ui.get_trace(selection)
    heads = [d for d in dictionaries.bundled_for(selection) if d.sae.site == "hook_z"]
    layers = sorted({d.sae.layer for d in heads})
    left, right = st.columns(2)
    layer, head = ui.head_picker(trace, where=left, default=default_head(trace, layers))
    chosen, problem = dictionary_sidebar(selection, layer, heads, layers)
    if chosen is None:
        return Missing(selection, problem[0], tuple(layers), refused=problem[1])
    text = trace.token_ids if trace.truncated else selection.text
    firing = ui.memo(A.feature_firing, selection.model, chosen.sae, text)
    shares = ui.memo(A.feature_heads, chosen.sae, selection.model)
    top = A.head_features(firing, shares, head, k=TOP)
    pick_feature, pick_query = right.columns(2)
    forget_when_changed("feature", (selection.key, layer, head, chosen.name))
    feature = int(ui.synced(
        pick_feature.number_input, "feature", "Feature",
        top.features[0] if top.features else 0, min_value=0, max_value=chosen.sae.d_sae - 1,
        step=1, valid=lambda f: isinstance(f, int) and 0 <= f < chosen.sae.d_sae,
        help=f"A feature of the dictionary, 0 to {chosen.sae.d_sae - 1:,}; a click on a bar "
             f"below picks one."))
    forget_when_changed("fq", (selection.key, layer, chosen.name, feature))
    labels = firing.tokens
    query = int(ui.synced(pick_query.selectbox, "fq", "Query (the token read at)",
                          firing.peak(feature)[0], options=list(range(len(labels))),
                          format_func=lambda i: f"{i}: {labels[i]}",
                          help="Where the feature's pre-activation is split by head and "
                               "source token; a click on a token of the strip picks it."))
    return Features(selection, trace, text, layer, head, chosen, firing, top, feature, query,
                    ui.narrow_screen())


@ui.callback
def follow_click(chart: str, name: str) -> None:
    """A click or a tap on a chart's token or bar: the page follows what it picked (the
    marker's customdata, plots.index_of_point) as the synced value `name`."""
    points = ((st.session_state.get(chart) or {}).get("selection") or {}).get("points")
    found = [plots.index_of_point(point) for point in points or []]
    index = next((index for index in found if index is not None), None)
    if index is not None:
        ui.set_value(name, index)


def default_head(trace: AttentionTrace, layers: list[int]) -> tuple[int, int]:
    """The head the page opens on: the one the pages open on, when a dictionary reads its
    layer; else head 0 of the last layer a dictionary reads."""
    layer, head = ui.opening(trace)[2:]
    if not layers or layer in layers:
        return layer, head
    return layers[-1], 0


def forget_when_changed(name: str, owner: tuple) -> None:
    """A feature picked belongs to the head it was picked on, a query to its feature: when
    that changes, the value goes back to its default (the head's strongest feature, where
    the feature fires most). A link's own value is left to its widget on the first run."""
    before = st.session_state.get(OWNERS + name)
    st.session_state[OWNERS + name] = owner
    if before is not None and before != owner:
        ui.set_value(name, None)


def dictionary_sidebar(selection: ui.Selection, layer: int, heads: list[Dictionary],
                       layers: list[int]) -> tuple[Dictionary | None, tuple | None]:
    """The page's own sidebar section: a dictionary of this layer's heads (the bundled ones
    that fit the model, or a SAELens folder of this server) -> (it, None), or (None, (why
    there is none, in words; whether a folder given was refused))."""
    bar = st.sidebar
    bar.header("Dictionary")
    here = [d for d in heads if d.sae.layer == layer]
    names = [d.name for d in here]
    choice = ui.synced(bar.selectbox, CHOICE_NAME, "Dictionary of the head's layer",
                       names[0] if names else FOLDER, options=[*names, FOLDER],
                       format_func=lambda name: words.choice_label(name, FOLDER),
                       help="A sparse dictionary (sparse autoencoder) of the heads' outputs "
                            "before W_O (SAELens's hook_z), in SAELens's format.")
    if choice != FOLDER:
        found = here[names.index(choice)]
        bar.caption(words.describe(found.sae))
        return found, None
    folder = ui.synced(bar.text_input, FOLDER_NAME, "SAELens folder", "",
                       placeholder="/path/to/dictionary",
                       help="A folder holding cfg.json and sae_weights.safetensors (SAELens's "
                            "save_model, or mha-viz train-sae), inside the folders this "
                            "server allows (MHA_VIZ_ALLOWED_DIRS). Read without pickle.").strip()
    if not folder:
        return None, (words.none_at_layer(layer, layers, selection.model_name) if layers
                      else words.none_for_model(selection.model_name, layer), False)
    try:
        sae = dictionaries.load_dictionary(folder, selection.model)
    except MhaVizError as error:
        said = ui.md_escape(as_sentence(ui.without_server_paths(str(error))))
        return None, (words.refused_folder(said), True)
    bar.caption(words.describe(sae))
    if not Dictionary(FOLDER, sae).reads("hook_z", layer):
        return None, (words.not_heads(sae, layer), False)
    return Dictionary(FOLDER, sae), None
