"""The Circuits page through Streamlit's AppTest, on the bundled SmolLM2: the indirect-object
pair it opens on, every result view read against the library's own numbers, prompt pairs,
links, and each kind of bad input as a message with the rest of the page still there."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("streamlit")

from tests.support.app_pages import array, run_page, texts  # noqa: E402
from tests.support.circuits_page import CLEAN, CORRUPTED, PAGE, PAIR, clean_run  # noqa: E402

from mha_viz import load_model  # noqa: E402
from mha_viz.analysis import (activation_patching, attribution_patching, circuit,  # noqa: E402
                              path_patching)
from mha_viz.analysis.patching import estimate_error  # noqa: E402
from mha_viz.analysis.prompts import ioi_pairs  # noqa: E402


@pytest.fixture(autouse=True)
def _raise_in_pages(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_RAISE", "1")


@pytest.fixture(scope="module")
def smollm2():
    return load_model("smollm2")


def charts(at) -> list[dict]:
    return [json.loads(e.proto.spec) for e in at.get("plotly_chart")]


@pytest.mark.slow
def test_opens_on_the_indirect_object_pair_with_every_head_patched(smollm2):
    at = clean_run({})
    shown = " ".join(texts(at.markdown))
    assert "Clean: 14 tokens" in shown and "Corrupted: 14 tokens" in shown
    assert ":orange-background[**9:␣John**]" in shown  # the differing position, marked
    expected = activation_patching(smollm2, PAIR, None, "logit_diff", "head", "denoise")
    figure = charts(at)[0]
    # 30 layers of 9 heads: the layers run along x
    z = array(figure["data"][0]["z"])
    np.testing.assert_allclose(z, expected.normalized.T, atol=1e-9)
    np.testing.assert_allclose(array(figure["data"][0]["customdata"]),
                               expected.values.T, atol=1e-9)
    # the GQA groups: a line between H2|H3 and H5|H6 (3 key/value heads of 3 query heads)
    assert sorted(s["y0"] for s in figure["layout"]["shapes"]) == [2.5, 5.5]
    table = at.table[0].value
    order = np.argsort(np.abs(expected.normalized).ravel())[::-1][:len(table)]
    names = [f"L{i // 9}.H{i % 9}" for i in order]
    assert list(table["head"]) == names
    assert names[0] == "L23.H3"  # the strongest name mover of docs/ioi.md
    for row, flat in enumerate(order):
        assert table["normalized effect"].iloc[row] == f"{expected.normalized.ravel()[flat]:+.3f}"
        assert table["patched metric"].iloc[row] == f"{expected.values.ravel()[flat]:.3f}"
    assert [b.label for b in at.get("download_button")]  # CSV and npz


@pytest.mark.slow
def test_positions_view_reads_the_library(smollm2):
    at = clean_run({"c_view": "positions", "c_stream": "attn_out", "c_dir": "noise"})
    expected = activation_patching(smollm2, PAIR, None, "logit_diff", "attn_out", "noise")
    figure = charts(at)[0]
    # noising: the change from the clean run, normalized (0 = none, -1 = to the corrupted)
    np.testing.assert_allclose(array(figure["data"][0]["z"]),
                               expected.normalized - 1, atol=1e-9)
    assert "★9: ␣John" in figure["layout"]["xaxis"]["ticktext"]


@pytest.mark.slow
def test_attribution_view_compares_with_exact(smollm2):
    at = clean_run({"c_view": "attribution"})
    estimate = attribution_patching(smollm2, PAIR, None, "logit_diff", "head", "denoise")
    exact = activation_patching(smollm2, PAIR, None, "logit_diff", "head", "denoise")
    error = estimate_error(estimate, exact)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Correlation r (every head and pair)"] == f"{error['r']:.3f}"
    assert float(metrics["Correlation r (every head and pair)"]) > 0.9
    assert list(at.table[0].value["worst-estimated head"]) == error["worst"]


@pytest.mark.slow
def test_path_patching_into_a_receiver_heads_keys(smollm2):
    """The receiver comes from the link here; a click in the head map sets it in the browser
    test (tests/browser/test_circuits_browser.py)."""
    at = clean_run({"c_view": "paths", "c_recv": "L20.H0", "c_part": "k"})
    assert at.selectbox(key="_mv_w_c_recv").value == "L20.H0"
    assert not charts(at)  # path patching waits for its button
    [b for b in at.button if b.label.startswith("Run path patching into L20.H0 (k)")][0] \
        .click().run()
    assert not at.exception and not at.error, texts(at.error)
    expected = path_patching(smollm2, PAIR, None, "logit_diff", [(20, 0, "k")], "noise")
    figure = charts(at)[0]
    assert "senders → L20.H0.k" in figure["layout"]["title"]["text"]
    np.testing.assert_allclose(array(figure["data"][0]["z"]),
                               (expected.normalized - 1).T, atol=1e-9)
    # a sender at or above the receiver's layer cannot reach it: the clean run's metric
    np.testing.assert_allclose(expected.normalized[20:], 1.0, atol=1e-9)


@pytest.mark.slow
def test_circuit_view_draws_the_graph_and_its_faithfulness(smollm2):
    at = clean_run({"c_view": "circuit", "c_edges": "40"})
    expected = circuit(smollm2, PAIR, None, "logit_diff", top_k=40)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Recovered by the kept edges"] == f"{expected.faithfulness:.0%}"
    assert metrics["Edges kept"] == f"40 of {expected.scores.n_edges:,}"
    figure = charts(at)[0]
    nodes = [t for t in figure["data"] if t.get("name") == "nodes"][0]
    assert sorted(nodes["customdata"]) == sorted(
        {e.upstream for e in expected.edges} | {e.downstream.rsplit(".", 1)[0]
                                                if e.downstream.count(".") == 2
                                                else e.downstream for e in expected.edges})
    table = at.table[0].value
    assert list(table["edge"]) == [f"{e.upstream} → {e.downstream}"
                                   for e in expected.edges[:10]]


def test_a_node_click_opens_that_heads_attention_map():
    at = clean_run({"c_view": "circuit"})
    at.session_state["_mv_circuits_open_head"] = (23, 3, CLEAN)
    at.run()
    assert not at.exception, texts(at.exception)
    assert at.session_state["_mv_state_layer"] == 23 and at.session_state["_mv_state_head"] == 3
    assert at.session_state["_mv_state_text"] == CLEAN
    assert any("Attention" in t for t in texts(at.title))


@pytest.mark.slow
def test_generated_ioi_pairs_give_the_mean_and_each_pair(smollm2):
    at = clean_run({"c_pairs": "ioi", "c_n": "3", "c_seed": "1"})
    pairs = ioi_pairs(smollm2, 3, seed=1)
    assert not charts(at)  # three pairs wait for the button
    [b for b in at.button if b.label.startswith("Patch every head")][0].click().run()
    assert not at.exception and not at.error, texts(at.error)
    expected = activation_patching(smollm2, pairs, None, "logit_diff", "head", "denoise")
    np.testing.assert_allclose(array(charts(at)[0]["data"][0]["z"]),
                               expected.normalized.T, atol=1e-9)
    at.selectbox(key="_mv_circuit_show").set_value("pair 2").run()
    np.testing.assert_allclose(array(charts(at)[0]["data"][0]["z"]),
                               expected.per_pair_normalized[2].T, atol=1e-9)
    at.selectbox(key="_mv_circuit_show").set_value("std").run()
    np.testing.assert_allclose(array(charts(at)[0]["data"][0]["z"]),
                               expected.std.T, atol=1e-9)


def test_the_swap_helper_makes_a_corrupted_prompt():
    at = clean_run({"corrupted": "When Mary and John went to the store, Paul gave a drink to"})
    at.selectbox(key="_mv_swap_pos").set_value((9, "␣John"))
    at.text_input(key="_mv_swap_with").set_value(" Mary")
    [b for b in at.button if b.label == "Swap"][0].click().run()
    assert not at.exception and not at.error, texts(at.error)
    assert at.text_input(key="_mv_w_corrupted").value == CORRUPTED


@pytest.mark.slow
@pytest.mark.parametrize("params, message", [
    ({"corrupted": "When Mary and John went to the big store, Mary gave a drink to"},
     "the clean prompt is 14 tokens and the corrupted prompt 15"),
    ({"corrupted": CLEAN}, "the clean and corrupted prompts are the same tokens"),
    ({"clean": " "}, "The text is empty"),
    ({"c_target": " Maryland Mary"}, "target"),
    ({"c_target": "Mary"}, "use ' Mary'"),
])
def test_bad_pairs_say_what_is_wrong_and_keep_the_inputs(params, message):
    at = run_page(PAGE, {"model": "smollm2", **params})
    assert not at.exception, texts(at.exception)
    errors = texts(at.error)
    assert len(errors) == 1 and message in errors[0], errors
    assert "Traceback" not in errors[0] and "/work" not in errors[0]
    assert not at.get("plotly_chart")
    # nothing else on the page is lost: the prompts, the target and the options are there
    keys = {w.key for w in at.text_input}
    assert {"_mv_w_clean", "_mv_w_corrupted", "_mv_w_c_target", "_mv_w_c_contrast"} <= keys
    assert at.radio(key="_mv_w_c_metric") and at.radio(key="_mv_w_c_dir")


def test_a_model_with_no_lm_head_gets_a_message():
    at = run_page(PAGE, {"model": "minilm"})
    assert not at.exception
    assert any("not a causal language model" in t for t in texts(at.warning))
    assert not at.get("plotly_chart")


@pytest.mark.slow
@pytest.mark.parametrize("params", [
    {"c_view": "<script>", "c_edges": "99999", "c_n": "-5", "c_metric": "evil",
     "c_dir": "sideways", "c_recv": "L99.H99", "c_pairs": "../etc", "c_stream": "x"},
    {"clean": "$x$ <b>bold</b> *md* 🙂", "corrupted": "$y$ <b>bold</b> *md* 🙂",
     "c_target": " the"},
])
def test_hostile_links_fall_back_or_explain(params):
    at = run_page(PAGE, {"model": "smollm2", **params})
    assert not at.exception, texts(at.exception)
    for error in texts(at.error):
        assert "Traceback" not in error


def test_a_link_reproduces_the_view():
    at = clean_run({"c_dir": "noise", "c_metric": "logprob", "c_view": "heads"})
    assert at.radio(key="_mv_w_c_dir").value == "noise"
    assert at.radio(key="_mv_w_c_metric").value == "logprob"
    title = charts(at)[0]["layout"]["title"]["text"]
    assert title.startswith("Noising")
    assert at.query_params["c_dir"] in ("noise", ["noise"])
