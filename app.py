"""mha-viz: the app's entry point and its home page (what the app is, the model card, the
tokens of the current text).

Run: streamlit run app.py

Streamlit's navigation lists the home page (home() below, at the site's root) and every
pages/*.py in the order of their numbers (mha_viz.ui.app_pages); each page is its title and
one call to its view (mha_viz/ui/views/), which reads the library.

`streamlit run app.py` first imports this file to find ``app`` (an st.App), whose lifespan
starts the warm start in a thread: it imports the library (torch, transformers: seconds) and
prepares the default model and the example text while the server already answers, so a
visitor's browser loads the page meanwhile. Each visitor's script run then executes this file
as __main__ and draws the pages (its imports wait for the warm start's, if still running).
"""

import threading
from contextlib import asynccontextmanager

import streamlit as st


def _warm_start() -> None:
    from mha_viz.ui import warm  # here, not above: the server answers before the library loads

    warm.prepare_default()


@asynccontextmanager
async def prepare_on_start(_app):
    threading.Thread(target=_warm_start, daemon=True, name="mha-viz warm start").start()
    yield


if __name__ == "__main__":  # a visitor's script run
    from mha_viz import ui
    from mha_viz.ui.views import home as home_view

    def home() -> None:
        ui.page_setup("mha-viz: look inside multi-head attention", home_view.INTRO)
        home_view.show()

    try:  # every page listed: Streamlit folds a list past 12 pages behind "View N more"
        with ui.profiled_run():  # MHA_VIZ_PROFILE=FOLDER: a profile of each run, else nothing
            st.navigation(ui.app_pages(home), expanded=True).run()
    finally:
        ui.page_run_over()  # the warm start's longer work waits for the first page's run
else:  # imported by `streamlit run app.py`, which serves this app
    app = st.App("app.py", lifespan=prepare_on_start)
