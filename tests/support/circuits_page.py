"""The Circuits page on the bundled SmolLM2: the indirect-object pair it opens on, and a run
of the page that must show no error."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")
from tests.support.app_pages import run_page, texts  # noqa: E402

from mha_viz.analysis.prompts import PromptPair  # noqa: E402


PAGE = "pages/9_Circuits.py"
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
PAIR = [PromptPair(CLEAN, CORRUPTED, " Mary", " John")]


def clean_run(params: dict):
    at = run_page(PAGE, {"model": "smollm2", **params})
    assert not at.exception, texts(at.exception)
    assert not at.error, texts(at.error)
    return at
