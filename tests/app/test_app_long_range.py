"""The Long range page (issue 56) through AppTest, on a random grouped-query Llama: every
figure shows the library's numbers (the needle grid, the sinks, StreamingLLM's table, each
head's window cost and the cache a restriction saves); a sweep past its size waits for its
button and runs as a job; the warm start's results are read, not computed again; a model the
page cannot read gets a message, not an error."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

pytest.importorskip("streamlit")

from tests.support.app_pages import array, charts, run_page, texts  # noqa: E402

from mha_viz import analysis as A  # noqa: E402
from mha_viz import load_model  # noqa: E402

PAGE = "pages/11_Long_Range.py"
SMALL = {"lr_len": "256", "lr_depths": "3", "lr_tokens": "256", "lr_window": "32"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from mha_viz.testing import make_llama_checkpoint

    return make_llama_checkpoint(tmp_path_factory.mktemp("llama_long_range_page"), n_layer=2,
                                 n_head=4, n_kv_head=2, d_model=64, n_positions=1024)


def params(folder, **extra) -> dict:
    return {"model": "folder", "folder": str(folder), **SMALL, **extra}


def titled(at, start: str) -> dict:
    found = [c for c in charts(at) if c["layout"]["title"]["text"].startswith(start)]
    assert found, [c["layout"]["title"]["text"] for c in charts(at)]
    return found[0]


def z(chart) -> np.ndarray:
    return array(chart["data"][0]["z"]).astype(float)


def test_the_page_shows_the_librarys_numbers(folder):
    at = run_page(PAGE, params(folder))
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    model = load_model(folder)
    cases = A.needle_cases(model, lengths=[256], depths=A.needle_depths(3), seed=0)
    study = A.needle_study(model, cases)
    np.testing.assert_allclose(z(titled(at, "Copy accuracy")), study.grid.accuracy.T)
    assert study.retrieval.counted == 0  # a random model copies nothing: said, not drawn
    assert any(f"(0 of {study.retrieval.tokens} predicted right)" in t for t in texts(at.info))
    ids = A.haystack_ids(model, 256)
    sinks = A.sink_scores(model, ids)
    np.testing.assert_allclose(z(titled(at, "Python's documentation")),
                               sinks.natural.first_attention, atol=1e-6)
    np.testing.assert_allclose(z(titled(at, "one token repeated")),
                               sinks.repeated.first_attention, atol=1e-6)
    losses = A.window_losses(model, ids, sink=4, window=32)
    bars = array(titled(at, "Loss of 256 tokens")["data"][0]["x"]).astype(float)
    np.testing.assert_allclose(bars, [losses.full, losses.sink_window, losses.window_only],
                               atol=1e-6)
    costs = A.window_costs(model, ids, sink=4, window=32)
    np.testing.assert_allclose(z(titled(at, "What a sink + window costs")), costs.costs,
                               atol=1e-6)
    saving = A.kv_cache_saved(model, 1024, 4, 32, heads=A.streaming_heads(costs.costs, 1))
    metric = [m for m in at.metric if m.label.startswith("Key/value cache")][0]
    assert metric.label == "Key/value cache at 1,024 tokens"
    assert f"{saving.streaming_kv_heads} of 4 key/value heads" in " ".join(texts(at.caption))


def test_a_sweep_past_its_size_waits_for_its_button(folder):
    """1,024 tokens: past what the per-head sweep runs by itself (512): a button, then the
    job, then the map."""
    at = run_page(PAGE, params(folder, lr_tokens="1024", lr_window="256"))
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    assert not [c for c in charts(at) if c["layout"]["title"]["text"].startswith("What a sink")]
    button = [b for b in at.button if b.label.startswith("Restrict each of the 8 heads")][0]
    at = button.click().run()
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    model = load_model(folder)
    costs = A.window_costs(model, A.haystack_ids(model, 1024), sink=4, window=256)
    np.testing.assert_allclose(z(titled(at, "What a sink + window costs")), costs.costs,
                               atol=1e-6)


def test_a_window_over_the_whole_text_is_said_in_its_section(folder):
    """The sidebar's short text under a window of 32: the sections that restrict it say why
    they cannot; the needles above still show."""
    at = run_page(PAGE, params(folder, lr_text="sidebar"))
    assert not at.exception, texts(at.exception)
    assert any("cover all" in t for t in texts(at.error)), texts(at.error)
    assert titled(at, "Copy accuracy")


def test_a_model_that_is_not_causal_gets_a_message():
    at = run_page(PAGE, {"model": "minilm"})
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    assert any("not a causal language model" in t for t in texts(at.info))
    assert not at.get("plotly_chart")


def refusing(fn):
    """fn under its own name (its stored results are found), refusing to compute."""
    @functools.wraps(fn)
    def not_again(*args, **kwargs):
        raise AssertionError(f"a prepared result was computed again: {fn.__name__}")
    return not_again


def test_the_page_reads_what_was_prepared(folder, monkeypatch):
    from mha_viz.ui import compute, warm

    compute.clear()
    warm.prepare(str(folder), "The warm start reads the documentation.")
    for name in ("needle_study", "sink_scores", "window_losses", "window_costs"):
        monkeypatch.setattr(A, name, refusing(getattr(A, name)))
    at = run_page(PAGE, {"model": "folder", "folder": str(folder)})  # the default choices
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    grid = titled(at, "Copy accuracy")
    assert json.loads(json.dumps(grid["layout"]["xaxis"]["ticktext"])) == ["256", "512"]
    assert titled(at, "What a sink + window costs") and titled(at, "Loss of 512 tokens")


@pytest.mark.slow
def test_smollm2_shows_its_retrieval_heads_and_switches_them_off():
    """SmolLM2 copies some needles: the retrieval map is the library's scores, and the
    masking button runs the top heads against random draws (the long text past what runs by
    itself, so only the needles compute on opening)."""
    query = {"model": "smollm2", "lr_len": "256", "lr_depths": "3", "lr_tokens": "4096",
             "lr_draws": "2"}
    at = run_page(PAGE, query)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    model = load_model("smollm2")
    cases = A.needle_cases(model, lengths=[256], depths=A.needle_depths(3), seed=0)
    study = A.needle_study(model, cases)
    np.testing.assert_allclose(z(titled(at, "Retrieval score of each head")),
                               study.retrieval.scores, atol=1e-9)
    k = len(study.retrieval.heads_over())
    button = [b for b in at.button if b.label.startswith(f"Switch off the top {k}")][0]
    at = button.click().run()
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    result = A.retrieval_masking(model, cases, study.retrieval.scores, k=k, draws=2, seed=0,
                                 heads=())
    bars = array(titled(at, "Switching retrieval heads off")["data"][0]["x"]).astype(float)
    np.testing.assert_allclose(bars, [result.full, result.top, *result.random], atol=1e-9)
