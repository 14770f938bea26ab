"""Pages 3-5 (head similarity, pruning impact, inside one head) through Streamlit's AppTest.

Each page renders for the bundled MiniLM and for random-weight GPT-2 and BERT checkpoints,
bad input shows a clear message, and the numbers the pages show are the library's: the
"switch heads off" score is model.score with that mask, the nearest heads are the smallest
entries of head_distances, and the inside-one-head weights are the trace's.
"""

from __future__ import annotations

import numpy as np
import pytest
from tests.support.app_pages import array, chart, charts, texts
from tests.support.similarity_pruning_inside import (INSIDE, PRUNE, SIM, TEXT,  # noqa: F401
                                                     _fresh_results, _raise_errors, assert_clean,
                                                     folder, run_page)

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

PAGES = [SIM, PRUNE, INSIDE]


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


# --------------------------------------------------------------------------- good input

# charts on each page: similarity (matrix, map, nearest maps); pruning for MiniLM (ablation;
# gradient importance and the curve wait for a button), for GPT-2 / MLM-BERT (ablation,
# gradient, curve); inside (X, Q, K, V, scores, [masked scores for GPT-2], weights, context,
# W_O, contribution)
MINILM_CHARTS = {SIM: 3, PRUNE: 1, INSIDE: 9}
GPT2_CHARTS = {SIM: 3, PRUNE: 3, INSIDE: 10}
BERT_CHARTS = {SIM: 3, PRUNE: 3, INSIDE: 9}


@pytest.mark.parametrize("page", PAGES)
def test_minilm_pages_render(page):
    at = run_page(page)
    assert_clean(at, MINILM_CHARTS[page])
    body = " ".join(texts(at.markdown) + texts(at.caption) + texts(at.info))
    assert "Jain & Wallace 2019" in body  # the caveat
    if page == PRUNE:
        assert "embedding shift" in body
        assert metrics(at)["Score with every head on"] == "0"
        labels = [b.label for b in at.button]
        assert any(l.startswith("Compute gradient importance") for l in labels)
        assert any(l.startswith("Run the pruning curve") for l in labels)
    if page == SIM:
        assert "Jensen-Shannon divergence" in " ".join(texts(at.info))
        assert "Clark et al. count layers from 1" in body


@pytest.mark.parametrize("page", PAGES)
def test_gpt2_checkpoint_pages_render(page, gpt2_folder):
    at = run_page(page, folder(gpt2_folder) | {"text": TEXT})
    assert_clean(at, GPT2_CHARTS[page])
    body = " ".join(texts(at.markdown) + texts(at.caption))
    if page == PRUNE:
        assert "next-token cross-entropy" in body
        assert chart(at, "as heads are removed")  # the gradient curve runs by itself
    if page == INSIDE:
        masked = chart(at, "scores + mask")
        z = array(masked["data"][0]["z"])
        assert np.isnan(z[np.triu_indices(z.shape[0], 1)]).all()  # -inf drawn as gaps
        assert "grey = masked" in masked["layout"]["title"]["text"]
        assert any("X = LN₁(h)" in t for t in texts(at.markdown))


@pytest.mark.parametrize("page", PAGES)
def test_bert_checkpoint_sentence_pair_pages_render(page, bert_folder):
    params = folder(bert_folder) | {"text": "Where is the cat?", "pair": "The cat is on the mat."}
    at = run_page(page, params)
    assert_clean(at, BERT_CHARTS[page])
    if page == PRUNE:
        body = " ".join(texts(at.markdown) + texts(at.caption))
        assert "masked-LM cross-entropy" in body
        assert "read sentence A only" in body
    if page == INSIDE:
        assert any("S' = S" in t for t in texts(at.caption))  # BERT masks nothing


# --------------------------------------------------------------------------- similarity


def test_similarity_nearest_heads_are_the_smallest_distances(gpt2_folder, gpt2_model):
    from mha_viz.analysis import head_distances

    at = run_page(SIM, folder(gpt2_folder) | {"text": TEXT, "layer": "1", "head": "2",
                                              "near": "2"})
    assert_clean(at, 3)
    trace = gpt2_model.trace(TEXT)
    d = head_distances(trace.attentions)
    row = d[1 * 4 + 2].copy()
    row[6] = np.inf
    expected = [f"L{i // 4}.H{i % 4}" for i in np.argsort(row, kind="stable")[:2]]
    table = at.dataframe[0].value
    assert list(table["head"]) == expected
    np.testing.assert_allclose(table.iloc[:, 2], np.round(row[np.argsort(row)[:2]], 4))
    maps = [c for c in charts(at) if any(t.get("name", "").startswith("L1.H2")
                                         for t in c["data"])][0]
    names = [t["name"] for t in maps["data"]]
    assert names[0] == "L1.H2 (chosen)" and [n.split(":")[0] for n in names[1:]] == expected
    z = array(maps["data"][0]["z"])
    lower = np.tril_indices(trace.n_tokens)
    np.testing.assert_allclose(z[lower], trace.attentions[1, 2][lower], atol=1e-6)


def test_similarity_says_which_distance_it_shows():
    at = run_page(SIM, {"dist": "js_distance", "order": "layer"})
    assert_clean(at, 3)
    info = " ".join(texts(at.info))
    assert "Jensen-Shannon distance" in info and "√" in info
    matrix = chart(at, "Head-to-head")
    assert "Jensen-Shannon distance" in matrix["layout"]["title"]["text"]
    assert "white lines separate layers" in matrix["layout"]["title"]["text"]


def test_similarity_long_input_compares_sampled_rows():
    text = " ".join(["the animal did not cross the street because it was too tired"] * 20)
    at = run_page(SIM, {"text": text})
    assert_clean(at, 3)
    info = " ".join(texts(at.info))
    assert "128 evenly spaced query rows" in info
    assert [t.label for t in at.main.toggle] == ["Compare every query row (slower)"]


# --------------------------------------------------------------------------- pruning


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_switch_heads_off_shows_model_score_with_that_mask(gpt2_folder, gpt2_model, mode):
    from mha_viz.analysis.heads import names_to_mask

    at = run_page(PRUNE, folder(gpt2_folder) | {"text": TEXT, "ablation": mode})
    assert_clean(at, 3)
    baseline = gpt2_model.score(TEXT)
    shown = metrics(at)
    assert float(shown["Score with every head on"]) == pytest.approx(baseline, rel=1e-5)
    assert shown["Score with those heads off"] == shown["Score with every head on"]

    off = ["L0.H1", "L0.H3"]
    at.multiselect(key="_mv_w_off").set_value(off).run()
    assert_clean(at, 6)  # + map changes, before/after maps, their difference
    mask = np.ones((2, 4), dtype=np.float32)
    mask[0, 1] = mask[0, 3] = 0
    assert np.array_equal(names_to_mask(off, 2, 4), mask)
    expected = gpt2_model.score(TEXT, head_mask=mask, ablation=mode)
    shown = metrics(at)
    assert shown["Score with those heads off"] == f"{expected:.6g}"
    assert float(shown["Score with those heads off"]) == pytest.approx(expected, rel=1e-5)
    assert expected != pytest.approx(baseline)
    assert shown["Heads switched off"] == "2 of 8"
    assert at.query_params["off"] == "L0.H1,L0.H3"

    # layer 0 cannot change; layer 1 reads a different input and its maps move
    change = array(chart(at, "Change of each head's attention map")["data"][0]["z"])
    masked = gpt2_model.trace(TEXT, head_mask=mask, ablation=mode)
    unmasked = gpt2_model.trace(TEXT)
    assert np.all(change[0] == 0) and np.all(change[1] > 0)
    expected_change = 0.5 * np.abs(masked.attentions - unmasked.attentions).sum(-1).mean(-1)
    np.testing.assert_allclose(change, expected_change, atol=1e-5)
    # the picked head (L0.H0) cannot change, so the page shows the head that moved most
    pair = chart(at, "before and after")
    layer, head = np.unravel_index(np.argmax(expected_change), expected_change.shape)
    assert pair["layout"]["title"]["text"].startswith(f"L{layer}.H{head}")
    np.testing.assert_allclose(array(pair["data"][1]["z"])[np.tril_indices(unmasked.n_tokens)],
                               masked.attentions[layer, head][np.tril_indices(unmasked.n_tokens)],
                               atol=1e-6)
    assert any("sits at or below the lowest switched-off layer" in c for c in texts(at.caption))
    difference = array(chart(at, "after − before")["data"][0]["z"])
    lower = np.tril_indices(unmasked.n_tokens)
    np.testing.assert_allclose(
        difference[lower], (masked.attentions - unmasked.attentions)[layer, head][lower],
        atol=1e-6)


def test_switch_heads_off_minilm_and_presets(minilm):
    at = run_page(PRUNE)
    assert_clean(at, 1)
    at.button(key="preset_top").click().run()
    off = at.multiselect(key="_mv_w_off").value
    assert len(off) == 3
    from mha_viz.analysis.heads import names_to_mask
    from mha_viz.analysis.pruning import ablation_effects

    effects = ablation_effects(minilm, TEXT)
    top = np.argsort(-effects.ravel(), kind="stable")[:3]
    assert sorted(off) == sorted(f"L{i // 12}.H{i % 12}" for i in top)
    expected = minilm.score(TEXT, head_mask=names_to_mask(off, 6, 12))
    assert float(metrics(at)["Score with those heads off"]) == pytest.approx(
        expected, rel=1e-5, abs=1e-6)
    at.button(key="preset_clear").click().run()
    assert at.multiselect(key="_mv_w_off").value == []
    assert_clean(at, 1)


def test_ablation_heatmap_is_the_library_result(bert_folder, bert_model):
    from mha_viz.analysis.pruning import ablation_effects

    at = run_page(PRUNE, folder(bert_folder) | {"text": TEXT})
    assert_clean(at, 3)
    z = array(chart(at, "when a head is switched off")["data"][0]["z"])
    np.testing.assert_allclose(z, ablation_effects(bert_model, TEXT), atol=1e-6)


IOI = "When Mary and John went to the store, John gave a drink to"


def test_pruning_page_measures_a_target_metric(gpt2_folder, gpt2_model):
    """Every view of the page (ablation, switch heads off, gradient, curve) on one
    prediction's logit difference: the numbers are the library's with metric=."""
    from mha_viz import TargetMetric
    from mha_viz.analysis.pruning import ablation_effects, gradient_importance

    params = folder(gpt2_folder) | {"text": IOI, "measure": "target", "target": " Mary",
                                    "contrast": " John", "off": "L1.H2"}
    at = run_page(PRUNE, params)
    assert_clean(at, 6)  # ablation, map change, before/after, difference, gradient, curve
    metric = TargetMetric(len(gpt2_model.encode(IOI).input_ids) - 1, " Mary", " John")
    shown = " ".join(texts(at.markdown))
    assert "logit('␣Mary') − logit('␣John') at position" in shown
    # the metric lost (issue 51: red = a head that helps the target)
    z = array(chart(at, "Metric lost when a head is switched off")["data"][0]["z"])
    np.testing.assert_allclose(z, -ablation_effects(gpt2_model, IOI, metric=metric), atol=1e-5)
    z = array(chart(at, "Gradient importance")["data"][0]["z"])
    np.testing.assert_allclose(z, gradient_importance(gpt2_model, IOI, metric=metric),
                               atol=1e-5)
    mask = np.ones((2, 4), dtype=np.float32)
    mask[1, 2] = 0
    values = metrics(at)
    assert float(values["Metric with every head on"]) == pytest.approx(
        gpt2_model.score(IOI, metric=metric), abs=1e-5)
    assert float(values["Metric with those heads off"]) == pytest.approx(
        gpt2_model.score(IOI, head_mask=mask, metric=metric), abs=1e-5)
    curve = chart(at, "as heads are removed")
    assert array(curve["data"][0]["y"])[0] == pytest.approx(
        gpt2_model.score(IOI, metric=metric), abs=1e-5)


def test_pruning_page_target_metric_of_a_masked_lm(bert_folder, bert_model):
    from mha_viz import TargetMetric
    from mha_viz.analysis.pruning import ablation_effects

    at = run_page(PRUNE, folder(bert_folder) | {"text": TEXT, "measure": "target",
                                                "position": "3", "metric": "logit"})
    assert_clean(at, 3)
    fillers = bert_model.predict(TEXT, k=2, masked_positions=[3]).top_ids[0]
    metric = TargetMetric(3, int(fillers[0]), None, "logit")
    z = array(chart(at, "Metric lost when a head is switched off")["data"][0]["z"])
    np.testing.assert_allclose(z, -ablation_effects(bert_model, TEXT, metric=metric),
                               atol=1e-5)


def test_encoders_offer_only_their_score():
    at = run_page(PRUNE, {"measure": "target"})
    assert_clean(at, 1)
    assert not [r for r in at.radio if r.label == "Measure each head by"]


def test_minilm_gradient_and_curve_buttons():
    at = run_page(PRUNE, {"by": "ablation"})
    assert_clean(at, 1)
    at.button(key="run_gradient").click().run()
    assert_clean(at, 2)
    assert chart(at, "Gradient importance")
    at.button(key="run_curve").click().run()
    assert_clean(at, 3)
    curve = chart(at, "as heads are removed")
    x = array(curve["data"][0]["x"])
    assert x[0] == 0 and x[-1] == pytest.approx(100) and len(x) == 12  # 72 heads, 7 a step
    assert any(b.label.startswith("Run the pruning curve (18 steps of 4 heads") for b in
               run_page(PRUNE, {"by": "ablation", "step": "0.05"}).button)
    # computed once: the next run shows both without pressing again
    at.run()
    assert_clean(at, 3)


def test_long_text_waits_for_the_sweep_button(checkpoint_factory):
    long_bert = checkpoint_factory("bert", n_layer=2, n_head=4, d_model=64, n_positions=512)
    text = "the cat sat on the mat and " * 45  # ~ 320 tokens: beyond the automatic limit
    at = run_page(PRUNE, folder(long_bert), session={"_mv_state_text": text})
    assert_clean(at, 0)  # every long computation waits for its button
    assert any("waits for the button" in i for i in texts(at.info))
    # a sweep nobody prepared points to Home's "Prepare every page" (issue 57 item 9)
    assert any("Prepare every page" in c for c in texts(at.caption)), texts(at.caption)
    at.button(key="run_ablation").click().run()
    assert_clean(at, 1)
    assert chart(at, "when a head is switched off")


def test_bad_head_name_in_url_is_ignored():
    at = run_page(PRUNE, {"off": "L9.H99,banana"})
    assert_clean(at, 1)
    assert at.multiselect(key="_mv_w_off").value == []


# --------------------------------------------------------------------------- inside


def test_inside_weights_are_the_trace(gpt2_folder, gpt2_model):
    at = run_page(INSIDE, folder(gpt2_folder) | {"text": TEXT, "layer": "1", "head": "3",
                                                 "query": "4"})
    assert_clean(at, 10)
    trace = gpt2_model.trace(TEXT)
    t = trace.n_tokens
    weights = array(chart(at, "softmax: the attention weights")["data"][0]["z"])
    np.testing.assert_allclose(weights, trace.attentions[1, 3], atol=1e-6)
    headers = texts(at.markdown)
    assert f"#### 1. X: T × d_model = {t} × 64" in headers
    assert f"#### 2–4. Q, K, V: T × d_k = {t} × 16 each" in headers
    assert f"#### 7. softmax: T × T = {t} × {t}" in headers
    assert f"#### 10. contribution: T × d_model = {t} × 64" in headers
    row = at.dataframe[0].value
    np.testing.assert_allclose(row["weight"], np.round(trace.attentions[1, 3, 4], 4))
    assert list(row["after the mask"])[5:] == ["−∞"] * (t - 5)
    q = chart(at, "Q of L1.H3")
    assert "texttemplate" in q["data"][0]  # small: values printed in the cells


def test_inside_minilm_summarises_large_matrices():
    at = run_page(INSIDE, {"layer": "5", "head": "7"})
    assert_clean(at, 9)
    x = chart(at, "X: 16 × 384")
    assert "texttemplate" not in x["data"][0]
    assert any("16 × 384 = 6,144 numbers" in c and "mean row norm" in c
               for c in texts(at.caption))
    weights = chart(at, "softmax")
    assert "texttemplate" in weights["data"][0]


def test_inside_long_text_cuts_the_display(gpt2_folder):
    text = "the cat sat on the mat and " * 20  # > 64 tokens
    at = run_page(INSIDE, folder(gpt2_folder), session={"_mv_state_text": text})
    assert_clean(at, 10)
    assert any("showing the first 64 rows" in c for c in texts(at.caption))
    assert any("easiest to read with a short sentence" in i for i in texts(at.info))


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("page", PAGES)
def test_folder_that_is_not_a_checkpoint(page, tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    at = run_page(page, folder(tmp_path))
    assert not at.exception, texts(at.exception)
    errors = texts(at.error)
    assert errors and "no config.json" in errors[0] and "could not be loaded" in errors[0]


@pytest.mark.parametrize("page", PAGES)
def test_odd_unicode_renders(page, gpt2_folder):
    text = "emoji 🙂 RTL שלום, $x$ <b>tags</b> *md* lone \ud800 surrogate"
    at = run_page(page, folder(gpt2_folder), session={"_mv_state_text": text})
    assert_clean(at, GPT2_CHARTS[page])


def test_one_token_text_on_gpt2(gpt2_folder):
    """GPT-2 needs two tokens for a next-token loss: the pruning page says so."""
    at = run_page(PRUNE, folder(gpt2_folder), session={"_mv_state_text": "The"})
    assert not at.exception, texts(at.exception)
    errors = texts(at.error)
    assert errors and "at least two tokens" in errors[0], errors
    at = run_page(INSIDE, folder(gpt2_folder), session={"_mv_state_text": "The"})
    assert_clean(at, 10)
    at = run_page(SIM, folder(gpt2_folder), session={"_mv_state_text": "The"})
    assert_clean(at, 3)


def test_unexpected_error_shows_a_generic_message(monkeypatch):
    from mha_viz import plots

    monkeypatch.delenv("MHA_VIZ_RAISE")

    def broken(*args, **kwargs):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(plots, "tensor_figure", broken)
    at = run_page(INSIDE)
    assert not at.exception
    errors = texts(at.error)
    assert len(errors) == 1 and "Something went wrong" in errors[0]
    assert "secret internal detail" not in errors[0]
