"""mha-viz's entry point: `streamlit run app.py` imports it for ``app`` (an st.App whose lifespan
starts ui.warm in a thread); each visitor's run executes it as __main__: the pages' navigation."""

import gc
import runpy
import threading
from contextlib import asynccontextmanager
from pathlib import Path

import plotly.graph_objects as go  # Streamlit has imported it already
import streamlit as st


def _warm_start() -> None:
    gc.disable()  # no full collections over what the start makes: mha_viz.server.startup
    try:
        from mha_viz.ui import warm  # here, not above: the server answers before it loads
        warm.prepare_default()  # which settles the collector once the first page is drawn
    finally:
        gc.enable()


@asynccontextmanager
async def prepare_on_start(_app):
    # Streamlit (1.67) as a server: pages under st.navigation from the first visitor on (else a
    # link to a page ran alone, then again: a whole run before the figure), and no REPL check
    # once a process (its inspect.stack() read every frame's source: 0.2-0.5 s of a first page)
    st.runtime.pages_manager.PagesManager.uses_pages_directory = False
    st.delta_generator._use_warning_has_been_displayed = True
    threading.Thread(target=_warm_start, daemon=True, name="mha-viz warm start").start()
    yield


def _charts_code_early():
    """A new session's first run, before the library's import: an empty chart, hidden, so the tab
    compiles plotly.js (a second) while the library and model load. -> what removes it."""
    holder = st.sidebar.empty()  # in every run: the sidebar's elements keep their places
    if "_mv_run_start" in st.session_state:  # set by every page's first call (ui.page_setup)
        return lambda: None
    with holder.container(key="_mv_charts_early"):
        st.html("<style>.st-key-_mv_charts_early {display: none;}</style>")
        st.plotly_chart(go.Figure(layout=dict(height=10, template="none")),  # no 6.5 kB template
                        theme=None, key="_mv_charts_early_c", config={"staticPlot": True})
    return holder.empty


if __name__ == "__main__":  # a visitor's script run
    remove_early_chart = _charts_code_early()
    from mha_viz import ui
    from mha_viz.ui.views import home as home_view
    remove_early_chart()
    with ui.page_run():  # every page listed: Streamlit folds a list past 12 behind "View N more"
        st.navigation(ui.app_pages(home_view.home), expanded=True).run()
else:  # imported by `streamlit run app.py`, which serves this app. Streamlit's own files from
    # memory: mha_viz/server/static_assets.py run alone (its package would import torch first)
    assets = runpy.run_path(str(Path(__file__).parent / "mha_viz/server/static_assets.py"))
    app = st.App("app.py", lifespan=prepare_on_start, middleware=[assets["middleware"](
        st.__path__[0], st.get_option("server.baseUrlPath"))])
