"""The Corpus page in Streamlit's AppTest: a small run over the demo corpus gives every
figure and a download; bad files get a message; the page says what it used."""

from __future__ import annotations

import numpy as np
import pytest
from tests.support.app_pages import array, chart, run_page, texts

from mha_viz import corpus

PAGE = "pages/8_Corpus.py"


@pytest.fixture(autouse=True)
def _fresh():
    from mha_viz import ui

    ui.clear()


def test_a_small_demo_run_shows_every_statistic(minilm):
    at = run_page(PAGE, {"model": "minilm", "seglen": "32", "maxseg": "6"})
    assert not at.exception, texts(at.exception)
    caption = " ".join(texts(at.caption))
    assert "6 segments" in caption and "the demo corpus" in caption
    run = [b for b in at.button if b.label.startswith("Run over 6 segments")]
    assert run, [b.label for b in at.button]
    at = run[0].click().run()
    assert not at.exception and not at.error, texts(at.exception) + texts(at.error)
    charts = at.get("plotly_chart")
    assert len(charts) == 8  # entropy, mass, role: mean and std; distances and 2-D map
    assert [m.value for m in at.metric][:1] == ["6"]
    assert "each on 4 query rows, one drawn at random from each of 4 equal stretches" in \
        " ".join(texts(at.caption))  # which rows the distances compared, as the run did
    # the same numbers as the library's own run
    segments = corpus.segment(minilm, corpus.demo_texts(), 32, max_segments=6)
    expected = corpus.run(minilm, segments)
    for title, name in (("Entropy: mean", "entropy"), ("Entropy: spread", "entropy")):
        shown = array(chart(at, title)["data"][0]["z"])
        wanted = expected.mean(name) if "mean" in title else expected.std(name)
        np.testing.assert_allclose(shown, wanted, atol=1e-6)


def test_pasted_texts_and_the_run_is_kept(minilm):
    at = run_page(PAGE, {"model": "minilm", "csrc": "paste", "seglen": "16"})
    assert "Paste some texts" in " ".join(texts(at.info))
    at.text_area(key="corpus_pasted").input(
        "The cat sat on the mat and looked at the door.\n\nA dog slept in the warm sun all "
        "afternoon long.").run()
    run = [b for b in at.button if b.label.startswith("Run over")]
    at = run[0].click().run()
    assert not at.exception and len(at.get("plotly_chart")) == 8
    # a widget change keeps the result: no button again, the figures stay
    at = at.toggle(key="_mv_w_cnorm").set_value(True).run()
    assert not [b for b in at.button if b.label.startswith("Run over")]
    assert len(at.get("plotly_chart")) == 8


def test_head_importance_over_a_corpus(minilm):
    at = run_page(PAGE, {"model": "minilm", "seglen": "12", "maxseg": "3",
                         "cstats": "ablation,gradient,pruning"})
    run = [b for b in at.button if b.label.startswith("Run over 3 segments")]
    at = run[0].click().run()
    assert not at.exception and not at.error, texts(at.exception) + texts(at.error)
    assert len(at.get("plotly_chart")) == 5  # ablation and gradient mean/std, the curve
    subheaders = texts(at.subheader)
    assert "Pruning curve over the corpus" in subheaders


def test_the_ray_cluster_is_offered_only_where_the_owner_configured_it(minilm, monkeypatch):
    import socket

    query = {"model": "minilm", "seglen": "32", "maxseg": "4", "cluster": "1"}
    at = run_page(PAGE, query)
    assert not at.exception and not any(t.label == "Run on the Ray cluster" for t in at.toggle)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("MHA_VIZ_RAY_ADDRESS", f"127.0.0.1:{port}")
    at = run_page(PAGE, query)
    toggle = [t for t in at.toggle if t.label == "Run on the Ray cluster"]
    assert toggle and toggle[0].value  # the link's choice, on the owner's cluster
    run = [b for b in at.button if b.label.startswith("Run over 4 segments")]
    at = run[0].click().run()
    assert not at.exception, texts(at.exception)
    shown = " ".join(texts(at.error) + texts(at.warning) + texts(at.info))
    assert f"No Ray cluster answers at 127.0.0.1:{port}" in shown, shown
    assert "The Ray cluster could not run this" in shown and "Change the text" not in shown
