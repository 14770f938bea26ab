"""What the tests of pages 3-5 (head similarity, pruning impact, inside one head) and of the
pruning page share: the pages, a run of one (a longer timeout than app_pages.run_page: these
pages sweep every head), its clean state, and two fixtures a module imports to use (every
page error raised; the pruning results shared between sessions emptied first)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402
from tests.support.app_pages import OPENED, charts, texts  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
SIM, PRUNE, INSIDE = ("pages/3_Head_Similarity.py", "pages/4_Pruning_Impact.py",
                      "pages/5_Inside_One_Head.py")
TIMEOUT = 300
TEXT = "The animal didn't cross the street because it was too tired."


@pytest.fixture(autouse=True)
def _raise_errors(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_RAISE", "1")


@pytest.fixture(autouse=True)
def _fresh_results():
    """Pruning results are shared between sessions (and so between tests): start empty."""
    from mha_viz import ui

    ui.clear()


def run_page(page: str, params: dict | None = None, session: dict | None = None) -> AppTest:
    """One run of page, with the sections in OPENED open (?open=)."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update({"open": OPENED, **(params or {})})
    for key, value in (session or {}).items():
        at.session_state[key] = value
    at.run()
    at.switch_page(page)
    return at.run()


def assert_clean(at: AppTest, n_charts: int | None = None) -> None:
    assert not at.exception, texts(at.exception)
    assert not at.error, texts(at.error)
    if n_charts is not None:
        assert len(at.get("plotly_chart")) == n_charts, [
            c["layout"].get("title", {}).get("text") for c in charts(at)]
    for spec in charts(at):  # every figure is tagged with the input it shows
        assert spec["layout"]["meta"]["input"]


def folder(path) -> dict:
    return {"model": "folder", "folder": str(path)}
