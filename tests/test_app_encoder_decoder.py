"""The pages on an encoder-decoder (issue 27), in Streamlit's AppTest: the bundled toy T5
with a source and a target. Attention maps shows cross-attention (every head, one head, the
alignment) and each stack's self-attention; Entropy and Head similarity read the stack the
sidebar picks; the pages that run the model themselves say they do not read encoder-decoders
yet. No page raises."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("streamlit")
from test_app_home_maps_entropy import run_page, texts  # noqa: E402

from mha_viz.ui import page_files  # noqa: E402

SOURCE = "red car follows small dog near old house"
TARGET = "voiture rouge suit chien petit près maison vieux"


@pytest.fixture(autouse=True)
def _raise(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_RAISE", "1")


def params(kind: str, target: str = TARGET) -> tuple[dict, dict]:
    return ({"model": "t5-toy", "kind": kind},
            {"_mv_state_text": SOURCE, "_mv_state_target": target})


def chart_titles(at) -> list[str]:
    return [json.loads(e.proto.spec)["layout"]["title"]["text"]
            for e in at.get("plotly_chart")]


def test_cross_attention_on_the_maps_page():
    query, session = params("cross")
    at = run_page("pages/1_Attention_Maps.py", query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    titles = chart_titles(at)
    assert len(titles) == 3, titles
    assert titles[0].startswith("All cross-attention heads")
    assert "which source tokens each target position reads" in titles[1]
    assert titles[2].startswith("Mean cross-attention of L1")
    spec = json.loads(at.get("plotly_chart")[2].proto.spec)
    heat = spec["data"][0]
    assert len(heat["y"]) == 9 and len(heat["x"]) == 9  # 8 words + </s> on each side
    assert heat["y"][0] == "0 'voiture'" and heat["x"][1] == "1 'car'"
    strongest = spec["data"][1]  # the alignment crosses: voiture <- car, rouge <- red
    assert strongest["x"][:2] == ["1 'car'", "0 'red'"]


def test_no_target_shows_the_models_own_output():
    query, session = params("cross", target="")
    at = run_page("pages/1_Attention_Maps.py", query, session)
    assert not at.exception and not at.error
    assert any("the model's own output" in t and "voiture rouge" in t for t in texts(at.info))


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_each_stacks_self_attention_on_the_trace_pages(kind):
    for page in ("pages/1_Attention_Maps.py", "pages/2_Entropy.py",
                 "pages/3_Head_Similarity.py"):
        query, session = params(kind)
        at = run_page(page, query, session)
        assert not at.exception and not at.error, (page, texts(at.exception), texts(at.error))
        assert at.get("plotly_chart"), page


def test_every_page_opens_on_an_encoder_decoder():
    """Pages that read one stack's maps say where cross-attention is; pages that run the model
    say they do not read encoder-decoders yet; none raises or shows a path."""
    for page in ["app.py", *(p.path for p in page_files()[1:])]:
        query, session = params("cross")
        at = run_page(page, query, session)
        assert not at.exception and not at.error, (page, texts(at.exception), texts(at.error))
        shown = " ".join(texts(at.info) + texts(at.markdown) + texts(at.caption))
        if page in ("pages/2_Entropy.py", "pages/3_Head_Similarity.py"):
            assert "pick *encoder self-attention*" in " ".join(texts(at.info)), page
        elif page not in ("app.py", "pages/1_Attention_Maps.py"):
            assert "is an encoder-decoder model" in " ".join(texts(at.info)), page
        assert "/work/" not in shown and "/tmp/" not in shown, page
