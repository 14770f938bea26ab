"""mha-viz's entry point: `streamlit run app.py` imports it for ``app`` (an st.App whose lifespan
starts ui.warm in a thread); each visitor's run executes it as __main__: the pages' navigation."""

import runpy
import sys
import threading
from contextlib import asynccontextmanager
from pathlib import Path

import plotly.graph_objects as go  # Streamlit has imported it already
import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException


def _warm_start() -> None:
    from mha_viz.ui import warm  # here, not above: the server answers before the library loads
    warm.prepare_default()


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
    import pandas  # noqa: F401  plotly reads it if imported: this waits for the warm start's import
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
    try:  # every page listed: Streamlit folds a list past 12 pages behind "View N more"
        with ui.profiled_run():  # MHA_VIZ_PROFILE=FOLDER: a profile of each run, else nothing
            st.navigation(ui.app_pages(home_view.home), expanded=True).run()
    finally:  # a run cut short by a rerun drew no page, the next does (st.stop() ends one drawn)
        if not isinstance(sys.exc_info()[1], RerunException):
            ui.page_run_over()  # the warm start's longer work waits for a drawn page
else:  # imported by `streamlit run app.py`, which serves this app. Streamlit's own files from
    # memory: mha_viz/server/static_assets.py run alone (its package would import torch first)
    assets = runpy.run_path(str(Path(__file__).parent / "mha_viz/server/static_assets.py"))
    app = st.App("app.py", lifespan=prepare_on_start, middleware=[assets["middleware"](
        st.__path__[0], st.get_option("server.baseUrlPath"))])
