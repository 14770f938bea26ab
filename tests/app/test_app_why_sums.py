"""The why panel's arithmetic and links (issue 57 items 8, 10, 11, 14), in Streamlit's AppTest:
the score's matrix carries its row and column totals, the sentence states the named cells,
"others" and the total, signed, and they are score_attribution's (named + others = the score,
1e-6) and the score transformers' own GPT-2 computes (read with a hook, the score written in
numpy); the contrast with a key that wins says this key loses to it, names its largest parts
on both signs and draws the gap; RoPE is said with the score before the rotation (a random
Llama); T5's position bias is a part of its own, on neither side; a link that holds a cell
opens the section on it and marks the cell on the map; the weights' composition map is
coloured from the random baseline up; a long input's window says where a click asks why."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("streamlit")
from tests.support.app_pages import array, chart, charts, folder_params, run_page, texts  # noqa: E402
from tests.support.hf_reference import gpt2_head_scores  # noqa: E402

from mha_viz import analysis  # noqa: E402

MAPS = "pages/1_Attention_Maps.py"
TEXT = "The cat sat on the mat because it was warm."
LAYER, HEAD, QUERY, KEY = 1, 2, 8, 3
EXACT = 1e-6


@pytest.fixture(autouse=True)
def _raise(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_RAISE", "1")


def clean(at) -> None:
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))


def said(at) -> str:
    return " ".join(texts(at.markdown) + texts(at.caption))


def numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"[+-]\d+\.\d\d", text)]


def test_the_matrix_and_the_sentence_state_sums_that_are_the_score(gpt2_folder, gpt2_model,
                                                                    hf_gpt2):
    at = run_page(MAPS, {**folder_params(gpt2_folder), "text": TEXT, "layer": str(LAYER),
                         "head": str(HEAD), "wq": str(QUERY), "wk": str(KEY), "open": "why"})
    clean(at)
    ids = gpt2_model.encode(TEXT).input_ids
    score = gpt2_head_scores(hf_gpt2, ids, LAYER, HEAD)[QUERY, KEY]
    parts = analysis.score_attribution(gpt2_model, TEXT, LAYER, HEAD, QUERY).parts(KEY, 6)
    matrix = chart(at, "by source")
    cells, totals = array(matrix["data"][0]["z"]), array(matrix["data"][1]["z"])
    n_rows, n_cols = cells.shape
    # the cells are the parts, the totals their sums, the corner the score
    np.testing.assert_allclose(cells, parts.cells, atol=EXACT)
    np.testing.assert_allclose(totals[:n_rows, n_cols], parts.row_totals, atol=EXACT)
    np.testing.assert_allclose(totals[n_rows, :n_cols], parts.col_totals, atol=EXACT)
    assert abs(totals[n_rows, n_cols] - parts.total) <= EXACT
    assert abs(parts.named + parts.others - parts.total) <= EXACT
    np.testing.assert_allclose(totals[n_rows, n_cols], score, rtol=1e-4)
    assert matrix["layout"]["yaxis"]["ticktext"][-1] == "total"
    assert matrix["data"][0]["texttemplate"] == "%{z:+.2f}"  # signed numbers in the cells
    # the sentence: named cells, others, the total, and each side's named and rest
    sums = next(t for t in texts(at.markdown) if "The sums:" in t)
    for value in (parts.named, parts.others, parts.total, parts.query_named,
                  parts.query_others, parts.key_named, parts.key_others):
        assert f"{value:+.2f}" in sums or (abs(value) < 0.005 and "0.00" in sums), (value, sums)
    assert f"{parts.total:+.2f} in all, the score" in sums
    # GPT-2's learned positions are a source of their own, said with their two shares
    assert "enter as a source of their own, the position embeddings" in said(at)


def test_a_key_that_loses_says_so_and_names_both_signs(gpt2_folder, gpt2_model, hf_gpt2):
    ids = gpt2_model.encode(TEXT).input_ids
    scores = gpt2_head_scores(hf_gpt2, ids, LAYER, HEAD)[QUERY, :QUERY + 1]
    weakest, strongest = int(np.argmin(scores)), int(np.argmax(scores))
    at = run_page(MAPS, {**folder_params(gpt2_folder), "text": TEXT, "layer": str(LAYER),
                         "head": str(HEAD), "wq": str(QUERY), "wk": str(weakest),
                         "wref": str(strongest), "open": "why"})
    clean(at)
    gap = scores[weakest] - scores[strongest]
    caption = next(c for c in texts(at.caption) if c.startswith(f"Key {weakest} "))
    assert f"loses to key {strongest}" in caption and "wins" not in caption, caption
    assert f"by {-gap:.2f} (gap {gap:+.2f})" in caption, caption
    # the bars: each named source's part, others, then the gap in a bar of its own
    bars = chart(at, f"against key {strongest}")["data"]
    np.testing.assert_allclose(np.sum(array(bars[0]["x"])), gap, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(array(bars[1]["x"])[0], gap, rtol=1e-4, atol=1e-6)
    # the largest part with the gap's sign leads, the largest against it follows
    parts = dict(zip(bars[0]["y"], array(bars[0]["x"])))
    named = {k: v for k, v in parts.items() if k not in ("others", "pos bias")}
    down = min(named, key=named.get)
    assert named[down] < 0 and f"({named[down]:+.2f})" in caption.split("loses most")[1]
    up = max(named, key=named.get)
    if named[up] > 0:
        assert f"pulling the other way" in caption and f"({named[up]:+.2f})" in caption


def test_rope_is_said_with_the_score_before_the_rotation(tmp_path_factory):
    from transformers import LlamaForCausalLM

    from mha_viz import load_model
    from mha_viz.testing import make_llama_checkpoint
    import torch

    folder = make_llama_checkpoint(tmp_path_factory.mktemp("why_rope"), n_layer=2, n_head=4,
                                   n_kv_head=2, d_model=64)
    model = load_model(folder)
    ids = model.encode(TEXT).input_ids
    query, key = len(ids) - 1, 2
    at = run_page(MAPS, {**folder_params(folder), "text": TEXT, "layer": "1", "head": "3",
                         "wq": str(query), "wk": str(key), "open": "why"})
    clean(at)
    # the reference: transformers' q_proj and k_proj outputs (before its rotation), by hooks
    hf = LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    attn, seen = hf.model.layers[1].self_attn, {}
    hooks = [attn.q_proj.register_forward_hook(lambda m, a, o: seen.setdefault("q", o)),
             attn.k_proj.register_forward_hook(lambda m, a, o: seen.setdefault("k", o))]
    with torch.no_grad():
        hf(torch.tensor([ids]))
    for hook in hooks:
        hook.remove()
    d_k = hf.config.head_dim
    q = seen["q"][0, query, 3 * d_k:4 * d_k].double().numpy()
    k = seen["k"][0, key, 1 * d_k:2 * d_k].double().numpy()  # head 3 reads key/value head 1
    unturned = float(q @ k / np.sqrt(d_k))
    sentence = next(t for t in texts(at.markdown) if "Positions** enter" in t)
    assert "RoPE" in sentence and f"({query - key})" in sentence
    assert f"would score {unturned:+.2f} instead of" in sentence, (unturned, sentence)


def test_t5s_position_bias_is_named_once_as_a_part_of_its_own():
    from tests.support.seq2seq_pages import params

    query, session = params("encoder")
    at = run_page(MAPS, {**query, "layer": "1", "head": "1", "wq": "7", "wk": "5",
                         "open": "why"}, session)
    clean(at)
    lead = next(t for t in texts(at.markdown) if "Its score is" in t)
    assert "position bias" not in lead  # on neither side: not the largest of either
    sums = next(t for t in texts(at.markdown) if "The sums:" in t)
    assert "the relative position bias" in sums and "a part of its own" in sums
    matrix = chart(at, "by source")
    assert matrix["layout"]["yaxis"]["ticktext"][-2] == "pos bias"
    assert matrix["layout"]["xaxis"]["ticktext"][-2] == "pos bias"


def test_a_link_holding_a_cell_opens_the_section_on_it_and_marks_it(gpt2_folder):
    at = run_page(MAPS, {**folder_params(gpt2_folder), "text": TEXT, "layer": str(LAYER),
                         "head": str(HEAD), "wq": str(QUERY), "wk": str(KEY), "open": ""})
    clean(at)
    assert any(f"query {QUERY} → key {KEY}" in c["layout"]["title"]["text"]
               for c in charts(at)), "the why section stayed folded"
    head_map = chart(at, "who attends to whom")
    [marked] = [s for s in head_map["layout"]["shapes"] if s.get("name") == "marked cell"]
    assert (marked["x0"], marked["y0"]) == (KEY - 0.5, QUERY - 0.5)
    at.run()  # and it stays open on the next run, the link's values taken
    assert any("by source" in c["layout"]["title"]["text"] for c in charts(at))
    # a page opened without a cell in its link marks nothing until the section opens
    plain = run_page(MAPS, {**folder_params(gpt2_folder), "text": TEXT, "open": ""})
    assert not [s for s in chart(plain, "who attends to whom")["layout"].get("shapes", [])
                if s.get("name") == "marked cell"]


def test_composition_in_the_weights_is_coloured_from_the_random_baseline(gpt2_folder,
                                                                        gpt2_model):
    at = run_page(MAPS, {**folder_params(gpt2_folder), "text": TEXT, "layer": str(LAYER),
                         "head": str(HEAD), "open": "why"})
    clean(at)
    baseline = analysis.composition_scores(gpt2_model).baseline
    weights = chart(at, "in the weights")["data"][0]
    assert baseline > 0 and weights["zmin"] == pytest.approx(baseline)
    assert any(f"about {baseline:.2f}" in c and "the colours start there" in c
               for c in texts(at.caption))


def test_a_long_inputs_window_says_where_a_click_asks_why():
    text = " ".join(["the animal did not cross the street because it was too tired"] * 40)
    link = {"model": "minilm", "text": text, "max_tokens": "300", "open": ""}
    wide = run_page(MAPS, link)
    clean(wide)
    caption = next(c for c in texts(wide.caption) if c.startswith("These 128 queries"))
    assert "in a window of 64 tokens only" in caption, caption
    assert not [d for d in chart(wide, "who attends to whom")["data"] if d.get("customdata")]
    small = run_page(MAPS, {**link, "wsize": "64"})
    clean(small)
    caption = next(c for c in texts(small.caption) if c.startswith("These 64 queries"))
    assert "click it for why the head attends there" in caption, caption
    assert [d for d in chart(small, "who attends to whom")["data"] if d.get("customdata")]
