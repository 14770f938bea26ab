"""mha-viz's entry point: `streamlit run app.py` imports it for ``app`` (an st.App whose lifespan
starts ui.warm in a thread); each visitor's run executes it as __main__: the pages' navigation."""

import importlib.util
import sys
from pathlib import Path

import streamlit as st


def _alone(*parts: str):
    """mha_viz.<parts> imported by its path, under its own name (the library's import then finds
    this one): its package's import would import torch first, before the server answers."""
    full = ".".join(("mha_viz", *parts))
    if full not in sys.modules:  # the server's import of app.py, before any script run
        path = Path(__file__).parent.joinpath("mha_viz", *parts).with_suffix(".py")
        spec = importlib.util.spec_from_file_location(full, path)
        sys.modules[full] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[full])
    return sys.modules[full]


if __name__ == "__main__":  # a visitor's script run, kept apart from what the start put off
    with _alone("server", "startup").PAGE_RUNS.running():
        remove_early_chart = _alone("ui", "serving").charts_code_early()
        from mha_viz import ui
        from mha_viz.ui.views import home as home_view
        remove_early_chart()
        with ui.page_run():  # every page listed: Streamlit folds past 12 under "View N more"
            st.navigation(ui.app_pages(home_view.home), expanded=True).run()
else:  # imported by `streamlit run app.py`, which serves this app (Streamlit's files from memory)
    _alone("server", "startup").skip_installed_components()
    prepare_on_start = _alone("ui", "serving").prepare_on_start
    app = st.App("app.py", lifespan=prepare_on_start, middleware=[_alone(
        "server", "static_assets").middleware(st.__path__[0], st.get_option("server.baseUrlPath"))])
