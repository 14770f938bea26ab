"""The Circuits page's view: which heads cause a prediction. Patch activations between a
clean and a corrupted prompt (one pair, generated indirect-object pairs or a file of them),
trace paths between heads, estimate every head by attribution patching, and draw the circuit
that carries the behaviour and test its heads; for an encoder-decoder, every head of every
kind patched between two sources.

``show()`` builds the page's context once (``pairs.Patched``: the pairs, the metric, the
direction and the result chosen; ``encoder_decoder.SourcesPatched``: two sources and every
head's patch) and walks its sections, each a function of it (``results``: one per result
view; ``shown``: what each choice shows, computed; ``prompts``: one pair's fields;
``clicks``: the clickable figures). A new section is one function and one line."""

from __future__ import annotations

import streamlit as st

from .... import ui
from ...words import circuits as words
from . import clicks, encoder_decoder, results
from .pairs import patched

MAPS = ("self", "encoder", "decoder", "cross")  # the sets of maps the page reads (maps.sets)
INTRO = words.INTRO
SECTIONS = [results.result_section, results.footer]
SEQ2SEQ_SECTIONS = [encoder_decoder.maps_section, encoder_decoder.strongest_section]


def show() -> None:
    selection = ui.sidebar(shows_saved_traces=False, reads=MAPS)
    clicks.open_clicked_head()  # a node of the circuit graph was clicked
    with ui.guard():
        model = selection.model
        if model is None:
            ui.show_error(selection.model_error)
            st.stop()
        if selection.kind is not None:  # an encoder-decoder: two sources, every set's heads
            context, sections = encoder_decoder.sources_patched(selection), SEQ2SEQ_SECTIONS
        elif not (model.info.causal and model.info.has_lm_head):
            st.warning(words.not_causal(ui.md_escape(model.info.name)))
            st.stop()
        else:
            context, sections = patched(selection), SECTIONS
        if context is None:  # nothing to patch yet: the page said why
            st.stop()
        ui.show_sections(context, sections)
