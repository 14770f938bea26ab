"""Why a head attends where it does and what heads move, on the pages (issues 48 and 49), in
Streamlit's AppTest on a random GPT-2: the cell asked about (as a click leaves it: the
query and key in the link, the section open) shows its score split by source, whose entries
add up to the pre-softmax score transformers' own GPT-2 computes (read with a hook here, the
score written in numpy), and its key side against the mean key; a masked cell, a padded
cell, a decoder's scores, an image encoder and a saved trace get a message, never a
traceback. The "what moves" switch draws the value-weighted map the definition gives
(Kobayashi et al. 2020, a loop written in tests/support), and the first token both ways; the
lesson's textbook screen runs on the bundled induction toy and names the previous-token head
a plain loop over its layer-0 maps finds."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("streamlit")
from tests.support.app_pages import array, chart, folder_params, run_page, texts  # noqa: E402
from tests.support.hf_reference import gpt2_head_scores as hf_scores  # noqa: E402
from tests.support.seq2seq_pages import params as seq2seq_params  # noqa: E402
from tests.support.value_weighted import gpt2_parts, hf_run, loop_value_weighted  # noqa: E402

MAPS = "pages/1_Attention_Maps.py"
INSIDE = "pages/5_Inside_One_Head.py"
TEXT = "The cat sat on the mat because it was warm."
LAYER, HEAD, QUERY, KEY = 1, 2, 8, 3


@pytest.fixture(autouse=True)
def _raise(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_RAISE", "1")


def why_page(folder, **extra):
    return run_page(MAPS, {**folder_params(folder), "text": TEXT, "layer": str(LAYER),
                           "head": str(HEAD), "open": "why", **extra})


def infos(at) -> str:
    return " ".join(texts(at.info))


def test_a_cell_shows_its_score_by_source_and_against_the_mean_key(gpt2_folder, gpt2_model,
                                                                  hf_gpt2):
    at = why_page(gpt2_folder, wq=str(QUERY), wk=str(KEY))
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    ids = gpt2_model.encode(TEXT).input_ids
    scores = hf_scores(hf_gpt2, ids, LAYER, HEAD)
    matrix = chart(at, "by source")
    cells = array(matrix["data"][0]["z"])
    assert cells.shape[0] <= 7 and cells.shape[1] <= 7  # six sources a side, the rest one
    np.testing.assert_allclose(cells.sum(), scores[QUERY, KEY], rtol=1e-4)
    said = " ".join(texts(at.markdown))
    assert f"Its score is {scores[QUERY, KEY]:+.2f}" in said
    # the key side against the mean key: 8 sources here (embed, positions, 4 heads, the
    # MLP, biases), all drawn: they add up to s_ij - mean_j' s_ij' over the keys i sees
    bars = chart(at, "against the mean key")["data"][0]
    against = scores[QUERY, KEY] - scores[QUERY, :QUERY + 1].mean()
    np.testing.assert_allclose(np.sum(array(bars["x"])), against, rtol=1e-4, atol=1e-6)
    # who composes into L1.H2: layer 0's four heads, on the text and in the weights
    for title in ("on this text", "in the weights"):
        assert array(chart(at, title)["data"][0]["z"]).shape == (1, 4)
    assert "Random heads of these shapes score about" in " ".join(texts(at.caption))


def test_cells_that_cannot_be_explained_say_why(gpt2_folder, bert_folder):
    masked = why_page(gpt2_folder, wq="2", wk="5")
    assert not masked.exception and "cannot see key 5" in infos(masked)
    padded = run_page(MAPS, {**folder_params(bert_folder), "text": "a cat [PAD] sat",
                             "layer": "1", "head": "0", "wq": "1", "wk": "3", "open": "why"})
    assert not padded.exception and "is padding ([PAD])" in infos(padded)
    query, session = seq2seq_params("decoder")
    decoder = run_page(MAPS, {**query, "open": "why", "wq": "2", "wk": "1"}, session)
    assert not decoder.exception and "The decoder's self-attention reads" in infos(decoder)
    image = run_page(MAPS, {"model": "reader-toy", "kind": "encoder", "open": "why",
                            "wq": "2", "wk": "1"})
    assert not image.exception
    assert "cannot be split by source. This encoder reads an image" in infos(image)
    assert any(i.rstrip().endswith("token inputs.") for i in texts(image.info)), infos(image)


def test_a_saved_trace_has_no_model_to_split(gpt2_model):
    from mha_viz.ui.selection import Selection
    from mha_viz.ui.why import _refused

    trace = gpt2_model.trace(TEXT)
    opened = Selection(gpt2_model.info.name, TEXT, None, None, model=gpt2_model, uploaded=trace,
                       upload_digest="abc")
    assert "A saved trace holds maps, not its model" in _refused(opened, trace, 3, 1)


def test_what_moves_is_the_value_weighted_map_and_the_first_token_both_ways(
        gpt2_folder, gpt2_model, hf_gpt2):
    at = run_page(MAPS, {**folder_params(gpt2_folder), "text": TEXT, "layer": str(LAYER),
                         "head": str(HEAD), "weights": "value", "open": "sink"})
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    ids = gpt2_model.encode(TEXT).input_ids
    alpha, x, layers = hf_run(hf_gpt2, gpt2_parts, ids)
    moved = loop_value_weighted(alpha, x, layers)
    rows = moved / moved.sum(-1, keepdims=True)
    shown = array(chart(at, "what moves from each key")["data"][0]["z"])
    seen = np.isfinite(shown)  # the causal mask's cells are gaps
    np.testing.assert_allclose(shown[seen], rows[LAYER, HEAD][seen], rtol=1e-4, atol=1e-6)
    said = " ".join(texts(at.markdown))
    took, sent = alpha[..., 0].mean(), rows[..., 0].mean()
    assert f"takes **{took:.2f}** of the attention weights and **{sent:.2f}**" in said
    both = [array(chart(at, title)["data"][0]["z"]) for title in
            ("First token's share of the weights", "First token's share of what moves")]
    np.testing.assert_allclose(both[0], alpha[..., 0].mean(-1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(both[1], rows[..., 0].mean(-1), rtol=1e-4, atol=1e-6)


def test_the_lesson_shows_the_textbook_case_on_the_induction_toy(gpt2_folder):
    from mha_viz import load_model

    lesson = {**folder_params(gpt2_folder), "text": TEXT, "lesson": "1"}
    titles = run_page(INSIDE, lesson).selectbox(key="_mv_w_lstep").options
    number = next(k for k, title in enumerate(titles, 1) if "induction head attends" in title)
    at = run_page(INSIDE, {**lesson, "lstep": str(number)})
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    # the previous-token head of the toy's layer 0, by a plain loop over its maps
    toy = load_model("induction-toy").trace("the cat sat on the mat. the cat sat on the mat.")
    maps = toy.layer_maps(0)
    previous = [np.mean([maps[h, i, i - 1] for i in range(1, toy.n_tokens)])
                for h in range(toy.n_head)]
    before = f"L0.H{int(np.argmax(previous))}"
    said = " ".join(texts(at.markdown))
    # the key side of that head first (near-equal writers of layer 0 named with it)
    assert "induction toy" in said and re.search(
        rf"of it comes from the key sides? of {before} \(", said), said
    bars = chart(at, "by source")["data"][0]  # key side first ("K: ..."), then query side
    assert bars["y"][0] == f"K: {before}" and array(bars["x"])[0] > 0
