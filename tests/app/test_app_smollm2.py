"""Every page with the bundled real causal model, SmolLM2-135M (Llama family, grouped-query
attention, RoPE), through Streamlit's AppTest."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")

from tests.support.app_pages import run_page, texts  # noqa: E402

PAGES = ["app.py", "pages/1_Attention_Maps.py", "pages/2_Entropy.py",
         "pages/3_Head_Similarity.py", "pages/4_Pruning_Impact.py", "pages/5_Inside_One_Head.py",
         "pages/6_Predictions.py", "pages/7_Head_Roles.py"]
TEXT = "The cat sat on the mat because it was warm."


@pytest.fixture(autouse=True)
def _raise_in_pages(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_RAISE", "1")


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_smollm2_pages_render(page):
    at = run_page(page, {"model": "smollm2", "text": TEXT})
    assert not at.exception, texts(at.exception)
    assert not at.error, texts(at.error)
    shown = " ".join(texts(at.markdown) + texts(at.caption))
    if page == "app.py":
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["Layers"] == "30" and metrics["Heads per layer"] == "9"
        assert metrics["d_head"] == "64"
        # W_Q, W_O: 576 x 576; W_K, W_V: 576 x 192 (3 key/value heads of 64)
        assert metrics["Attention parameters per layer"] == f"{576 * (2 * 576 + 2 * 192):,}"
        assert "Heads that share keys and values" in shown and "H0, H1, H2 (K/V head 0)" in shown
        assert "rotary positions (RoPE, theta 100000)" in shown
    else:
        assert at.get("plotly_chart"), "no figure"
    if page == "pages/1_Attention_Maps.py":
        assert "Grouped-query attention: 9 query heads read 3 key/value head(s)" in shown
    if page == "pages/4_Pruning_Impact.py":
        assert "next-token cross-entropy" in shown
    if page == "pages/5_Inside_One_Head.py":
        assert any("Rotary positions (RoPE)" in t for t in texts(at.markdown))
    if page == "pages/6_Predictions.py":
        assert len(at.get("plotly_chart")) == 3  # loss strip, attribution, ablation
        assert "perplexity" in shown and "Metric:" in shown
        assert "the model's logit difference" in shown


@pytest.mark.slow
def test_predictions_page_with_a_chosen_target_and_contrast():
    text = "When Mary and John went to the store, John gave a drink to"
    at = run_page("pages/6_Predictions.py", {"model": "smollm2", "text": text,
                                             "target": " Mary", "contrast": " John"})
    assert not at.exception and not at.error, texts(at.exception) + texts(at.error)
    shown = " ".join(texts(at.markdown))
    assert "logit('␣Mary') − logit('␣John')" in shown


def test_predictions_page_for_encoders_and_masked_lms(bert_folder):
    at = run_page("pages/6_Predictions.py", {"model": "minilm"})
    assert not at.exception and any("no language-model head" in t for t in texts(at.info))
    at = run_page("pages/6_Predictions.py", {"model": "folder", "folder": str(bert_folder),
                                             "text": "The cat sat on the mat."})
    assert not at.exception and not at.error, texts(at.exception) + texts(at.error)
    assert at.dataframe and any("pre-norm" in t for t in texts(at.info))


@pytest.mark.slow
def test_the_app_opens_on_smollm2_with_predictions_one_click_away(monkeypatch):
    monkeypatch.delenv("MHA_VIZ_DEFAULT_MODEL", raising=False)
    at = run_page("app.py")
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Layers"] == "30" and metrics["Heads per layer"] == "9"
    assert [b.label for b in at.button if "IOI" in b.label]  # an example where a role shows
    monkeypatch.setenv("MHA_VIZ_DEFAULT_MODEL", "no-such-model")  # ignored, not obeyed
    at = run_page("app.py")
    assert {m.label: m.value for m in at.metric}["Layers"] == "30"
