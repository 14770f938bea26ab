"""Attention maps' figures built once for every session asking the same figure (ui.show_built):
a second visitor on the same text gets the same charts without a figure being built again, a
visitor on another text gets its own, and each chart's input (layout.meta) is its own text's."""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("streamlit")
from tests.support.app_pages import charts, run_page, texts  # noqa: E402

from mha_viz import plots  # noqa: E402

BUILDS = ("head_heatmap", "line_view", "model_view_grid")


@pytest.fixture
def counted(monkeypatch):
    """Every call of the maps page's figure builders, by name."""
    calls = {name: 0 for name in BUILDS}
    for name in BUILDS:
        original = getattr(plots, name)

        @functools.wraps(original)
        def counting(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)
        monkeypatch.setattr(plots, name, counting)
    return calls


def test_a_second_visitor_on_the_same_text_reuses_the_figures(counted, monkeypatch):
    monkeypatch.setenv("MHA_VIZ_RAISE", "1")
    params = {"model": "minilm", "open": ""}
    text = "Shared figures: the cat sat on the mat."
    first = run_page("pages/1_Attention_Maps.py", {**params, "text": text})
    assert not first.exception, texts(first.exception)
    built = dict(counted)
    assert all(built[name] >= 1 for name in BUILDS), built
    second = run_page("pages/1_Attention_Maps.py", {**params, "text": text})
    assert not second.exception, texts(second.exception)
    assert counted == built  # nothing built again
    mine, yours = charts(first), charts(second)
    assert mine == yours and len(mine) >= 3
    other = run_page("pages/1_Attention_Maps.py", {**params, "text": "Another text, its own."})
    assert all(counted[name] > built[name] for name in BUILDS), counted
    theirs = charts(other)
    shown = {c["layout"]["meta"]["input"] for c in mine if "input" in c["layout"].get("meta", {})}
    others = {c["layout"]["meta"]["input"] for c in theirs
              if "input" in c["layout"].get("meta", {})}
    assert len(shown) == 1 and len(others) == 1 and shown != others


def _both_sent():  # an AppTest script: the figure sent by Streamlit as it is, and as shared
    import numpy as np
    import plotly.graph_objects as go
    import streamlit as st

    from mha_viz.ui import output

    z = np.linspace(0, 1, 64, dtype=np.float32).reshape(8, 8)
    fig = go.Figure(go.Heatmap(z=z, x=list("abcdefgh")), layout=dict(meta={"input": "x"}))
    st.plotly_chart(fig, theme=None, key="own")
    st.plotly_chart(output._SentFigure(fig), theme=None, key="shared")


def test_a_shared_figure_is_sent_as_streamlit_sends_the_figure_itself():
    """ui.show_built hands st.plotly_chart a figure whose dict was made once; Streamlit's
    own serialization of the figure itself is the reference (spec and element alike)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_both_sent).run()
    assert not at.exception, texts(at.exception)
    own, shared = at.get("plotly_chart")
    assert own.proto.spec == shared.proto.spec and '"bdata"' in own.proto.spec
    assert own.proto.config == shared.proto.config
