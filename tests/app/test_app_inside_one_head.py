"""Inside one head's folded sections and the model card through AppTest: the blockwise softmax,
the gradients on request, the KV cache's size (their numbers are tested in tests/unit)."""

import pytest

from mha_viz import load_model
from mha_viz.analysis.one_head.gradients import head_gradients
from mha_viz.analysis.one_head.kv_cache_size import bytes_text, kv_cache_by_sharing


def test_inside_one_head_shows_the_blockwise_softmax():
    pytest.importorskip("streamlit")
    from tests.support.app_pages import run_page, texts

    folded = run_page("pages/5_Inside_One_Head.py", {"model": "minilm", "fblock": "2"}, {})
    assert not folded.exception and not folded.error
    # a folded section is drawn only once it is opened (it is computed then, too)
    assert "the largest difference from the plain softmax here is" not in " ".join(
        texts(folded.markdown))
    at = run_page("pages/5_Inside_One_Head.py", {"model": "minilm", "fblock": "2"},
                  {"_mv_open_flash": True})
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    shown = " ".join(texts(at.markdown))
    assert "the largest difference from the plain softmax here is" in shown
    tables = [d.value for d in at.dataframe]
    running = [t for t in tables if "running max m" in t.columns]
    assert running and list(running[0]["block"])[:2] == [1, 2]


def test_inside_one_head_shows_them_on_request():
    pytest.importorskip("streamlit")
    from tests.support.app_pages import run_page, texts

    query = {"model": "minilm", "layer": "1", "head": "2"}
    opened = {"_mv_open_gradients": True}  # the folded section, opened
    at = run_page("pages/5_Inside_One_Head.py", query, dict(opened))
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    n_charts = len(at.get("plotly_chart"))
    at = run_page("pages/5_Inside_One_Head.py", {**query, "grads": "1"}, dict(opened))
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    assert len(at.get("plotly_chart")) == n_charts + 2  # dL/dW_Q and dL/dW_O
    shown = " ".join(texts(at.markdown))
    assert "Largest difference between autograd and the two formulas" in shown
    expected = head_gradients(load_model("minilm"), at.session_state["_mv_state_text"]
                              if "_mv_state_text" in at.session_state else
                              "The animal didn't cross the street because it was too tired.",
                              1, 2, "output_norm")
    assert f"Loss L = {expected.loss:.4f}" in shown


@pytest.mark.slow
def test_the_model_card_shows_it():
    pytest.importorskip("streamlit")
    from tests.support.app_pages import run_page, texts

    at = run_page("app.py", {"model": "smollm2", "kvlen": "8192"}, {})
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    shown = " ".join(texts(at.markdown))
    info = load_model("smollm2").info
    sizes = kv_cache_by_sharing(info, 8192)
    for name, size in sizes.items():
        assert f"{name}: **{bytes_text(size)}**" in shown, (name, shown)
    assert "Attention parameters per layer" in [m.label for m in at.metric]
