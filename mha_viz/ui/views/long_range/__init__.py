"""The Long range page's view: which heads need the whole context. A context (the needles and
their study, the long text, its sink and window) built once, then its sections in order:
the needle grid, every head's retrieval score, the retrieval heads switched off, the sinks,
StreamingLLM's table and the per-head cost of a sink + window with the cache it saves."""

from __future__ import annotations

import streamlit as st

from .... import ui
from ...words import long_range as words
from . import context, retrieval, windows

INTRO = words.INTRO

# the page, top to bottom: adding a section is one function and one line here
SECTIONS = (retrieval.needle_grid_section, retrieval.retrieval_section,
            retrieval.masking_section, windows.sink_section, windows.table_section,
            windows.costs_section)


def show() -> None:
    selection = ui.sidebar(shows_saved_traces=False, encoder_decoders=False)
    ctx = None
    with ui.guard():
        ctx = context.build(selection)
    if ctx is None:
        return
    for section in SECTIONS:
        with ui.guard():  # a section's refusal (a window over the whole text) is its own
            section(ctx)
    st.markdown(words.PUBLISHED)
    st.caption(ui.NUMBERING)
    ui.caveat()
