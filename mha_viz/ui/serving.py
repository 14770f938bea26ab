"""What app.py runs before the library is imported: the server's lifespan, which starts the
warm start in a thread, and a new session's early, hidden chart. app.py imports this module by
its path, under its own name (the ui package's import would import torch first, before the
server answers), so it imports nothing of the library at its top."""

from __future__ import annotations

import gc
import threading
from contextlib import asynccontextmanager

import plotly.graph_objects as go
import streamlit as st


def _warm_start() -> None:
    gc.disable()  # off until the first page is drawn: mha_viz.server.startup
    try:
        from mha_viz.ui import warm  # here: the server answers before the library loads
        warm.prepare_default()
    finally:
        gc.enable()


@asynccontextmanager
async def prepare_on_start(_app):
    """st.App's lifespan. Streamlit (1.67) as a server: pages under st.navigation from the
    first visitor on (else a link to a page ran alone, then again: a whole run before the
    figure), and no REPL check once a process (its inspect.stack() read every frame's source:
    0.2-0.5 s of a first page); the warm start in a thread of its own."""
    st.runtime.pages_manager.PagesManager.uses_pages_directory = False
    st.delta_generator._use_warning_has_been_displayed = True
    threading.Thread(target=_warm_start, daemon=True, name="mha-viz warm start").start()
    yield


def charts_code_early():
    """A new session's first run, before the library's import: an empty chart, hidden, so the
    tab compiles plotly.js (a second) while the library and model load. -> what removes it."""
    holder = st.sidebar.empty()  # in every run: the sidebar's elements keep their places
    if "_mv_run_start" in st.session_state:  # set by every page's first call (ui.page_setup)
        return lambda: None
    with holder.container(key="_mv_charts_early"):
        st.html("<style>.st-key-_mv_charts_early {display: none;}</style>")
        st.plotly_chart(go.Figure(layout=dict(height=10, template="none")),  # no 6.5 kB template
                        theme=None, key="_mv_charts_early_c", config={"staticPlot": True})
    return holder.empty
