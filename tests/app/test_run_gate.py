"""app.py holds server.startup.PAGE_RUNS for the whole of a visitor's script run, from the
early chart on, so the pandas import that the server's start puts off never overlaps a figure
being built (plotly reads a half-imported pandas; tests/unit/test_startup.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")
from plotly.basedatatypes import BaseFigure  # noqa: E402

from mha_viz.server import startup  # noqa: E402
from tests.support.app_pages import run_page  # noqa: E402


def test_every_figure_of_a_run_is_built_while_the_run_holds_the_gate(monkeypatch):
    """A new session's first run of app.py (Home): its early chart, built before the library's
    import, and the page's own figures. (AppTest runs another page's file alone, where a
    server runs it under app.py's navigation: app.py's lifespan, tests/app/test_warm.py.)"""
    held = []
    build = BaseFigure.__init__

    def recording(self, *args, **kwargs):
        held.append(startup.PAGE_RUNS.in_flight)
        build(self, *args, **kwargs)

    monkeypatch.setattr(BaseFigure, "__init__", recording)
    at = run_page("app.py", {"model": "minilm", "text": "The cat sat."})
    assert not at.exception
    # the early chart (a new session's), and the chart standing while a model first loads
    # when this process has not loaded it yet
    assert len(held) >= 1 and min(held) >= 1, held
    assert startup.PAGE_RUNS.in_flight == 0
