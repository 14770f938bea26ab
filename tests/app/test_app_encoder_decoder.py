"""The pages on an encoder-decoder (issue 27), in Streamlit's AppTest: the bundled toy T5
with a source and a target. Attention maps shows cross-attention (every head, one head, the
alignment) and each stack's self-attention; Entropy and Head similarity read the stack the
sidebar picks; Pruning impact, Predictions, Head roles and Circuits run the model on it;
Corpus reads the encoder over its texts. No page raises."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("streamlit")
from tests.support.app_pages import (array, chart, folder_params, home_tokens, run_page,  # noqa: E402
                                     texts)
from tests.support.seq2seq_pages import SOURCE, TARGET, params  # noqa: E402

from mha_viz.ui import page_files  # noqa: E402


@pytest.fixture(autouse=True)
def _raise(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_RAISE", "1")


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


def test_cross_attention_entropy_over_the_source():
    import numpy as np

    from mha_viz import load_model
    from mha_viz.maps.streaming import MapsSource

    query, session = params("cross")
    query["scale"] = "normalized"
    at = run_page("pages/2_Entropy.py", query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    specs = [json.loads(e.proto.spec) for e in at.get("plotly_chart")]
    assert len(specs) == 2
    shown = array(specs[0]["data"][0]["z"]).astype(float)
    maps = load_model("t5-toy").trace(SOURCE, target=TARGET).cross_attentions
    formula = -(maps.astype(np.float64) * np.log(np.maximum(maps, 1e-45))).sum(-1)
    expected = (formula / np.log(maps.shape[-1])).mean(-1)  # normalized by ln S
    np.testing.assert_allclose(shown, expected, atol=1e-5)
    assert MapsSource(maps, False).n_keys == maps.shape[-1]


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
        if page == "app.py":
            rows = [[token for token, _ in row] for row in home_tokens(at)]
            assert rows[0][:2] == ["red", "car"] and rows[1][:2] == ["<pad>", "voiture"], rows
            assert "encoder 2 + decoder 2" in " ".join(texts(at.sidebar.caption))
        if page == "pages/8_Corpus.py":  # the texts are sources: the encoder is read
            assert "encoder's self-attention" in " ".join(texts(at.info)), page
        if page == "pages/7_Head_Roles.py":  # roles are of one stack's self-attention
            assert "reads the self-attention of one stack" in " ".join(texts(at.info))
        assert "/work/" not in shown and "/tmp/" not in shown, page


@pytest.mark.parametrize("kind", ["encoder", "decoder", "cross"])
def test_inside_one_head_of_each_kind(kind):
    """Every step of one head; T5's self-attention heads get the relative position bias as a
    step (buckets, the head's table, the bias, the map without and with it); the weights
    are the trace's."""
    query, session = params(kind)
    query.update(layer="1", head="2")
    at = run_page("pages/5_Inside_One_Head.py", query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    shown = " ".join(texts(at.markdown) + texts(at.caption) + texts(at.info))
    assert "largest difference 0.0e+00" in shown
    titles = chart_titles(at)
    if kind == "cross":
        assert any(t.startswith("M, the encoder's output: 9 × 128") for t in titles)
        assert any(t.startswith("K of L1.H2: 9 × 32") for t in titles)
        assert "relative position bias" not in shown
    else:
        assert "5b. relative position bias" in shown
        for title in ("the bucket of each pair", "L1.H2's learned bias per bucket",
                      "the bias added to the scores", "the map without the bias"):
            assert any(t.startswith(title) for t in titles), (title, titles)


@pytest.mark.parametrize("kind", ["encoder", "cross"])
def test_pruning_impact_switches_off_each_head_of_the_kind(kind):
    """Ablation and gradient maps of the sidebar's kind, and the pruning curve over every
    kind, equal the library's numbers for the same pair."""
    from mha_viz import load_model
    from mha_viz.analysis import (ablation_effects_seq2seq, gradient_importance_seq2seq,
                                  pruning_curve_seq2seq)

    query, session = params(kind)
    at = run_page("pages/4_Pruning_Impact.py", query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    specs = [json.loads(e.proto.spec) for e in at.get("plotly_chart")]
    assert len(specs) == 4, chart_titles(at)
    model = load_model("t5-toy")
    expected = ablation_effects_seq2seq(model, SOURCE, TARGET)[kind]
    np.testing.assert_allclose(array(specs[0]["data"][0]["z"]).astype(float), expected,
                               atol=1e-6)
    gradient = gradient_importance_seq2seq(model, SOURCE, TARGET)[kind]
    np.testing.assert_allclose(array(specs[1]["data"][0]["z"]).astype(float), gradient,
                               rtol=1e-4, atol=1e-7)
    curve = pruning_curve_seq2seq(model, SOURCE, TARGET, step=0.1)
    np.testing.assert_allclose(array(specs[2]["data"][0]["y"]).astype(float), curve.scores,
                               atol=1e-6)
    assert [trace["name"] for trace in specs[3]["data"]] == [
        "encoder self-attention", "decoder self-attention", "cross-attention"]
    assert "teacher-forced" in " ".join(texts(at.caption))


def test_pruning_impact_on_one_target_token():
    """Measured by one target position's logit difference (the URL's position, target and
    contrast, as on the Predictions page)."""
    from mha_viz import TargetMetric, load_model
    from mha_viz.analysis import ablation_effects_seq2seq

    query, session = params("cross")
    query.update(measure="target", position="0", token="voiture", contrast="chien")
    at = run_page("pages/4_Pruning_Impact.py", query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    expected = ablation_effects_seq2seq(load_model("t5-toy"), SOURCE, TARGET,
                                        metric=TargetMetric(0, "voiture", "chien"))
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    # drawn as the metric lost (issue 51: red = a head that helps the target)
    np.testing.assert_allclose(array(spec["data"][0]["z"]).astype(float), -expected["cross"],
                               atol=1e-6)
    assert expected["cross"].min() < -0.5  # the cross heads carry 'voiture' over 'chien'
    assert any("logit('voiture') − logit('chien') at target position 0" in t
               for t in texts(at.caption))


def test_predictions_of_the_decoder():
    from mha_viz import load_model

    query, session = params("decoder")
    at = run_page("pages/6_Predictions.py", query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    specs = [json.loads(e.proto.spec) for e in at.get("plotly_chart")]
    assert len(specs) == 3
    model = load_model("t5-toy")
    pred = model.predict(SOURCE, target=TARGET)
    shown = array(specs[0]["data"][0]["z"]).astype(float).ravel()
    np.testing.assert_allclose(shown[:len(pred.loss)], pred.loss, atol=1e-6)
    assert "teacher-forced" in " ".join(texts(at.caption))
    # the first target token against the decoder's runner-up there, by default
    from mha_viz.analysis import direct_logit_attribution_seq2seq

    expected = direct_logit_attribution_seq2seq(model, SOURCE, TARGET, 0,
                                                contrast=pred.runner_up(0))
    assert chart_titles(at)[1:] == ["Decoder self-attention heads", "Cross-attention heads"]
    for spec, heads in zip(specs[1:], (expected.heads, expected.cross_heads)):
        np.testing.assert_allclose(array(spec["data"][0]["z"]).astype(float), heads,
                                   atol=1e-6)
    assert f"decoder's own {expected.total:.3f}" in " ".join(texts(at.caption))


def test_predictions_on_a_post_norm_decoder_say_why_there_is_no_attribution(tmp_path):
    from mha_viz.testing import make_seq2seq_checkpoint

    folder = make_seq2seq_checkpoint(tmp_path / "bart", family="bart")
    at = run_page("pages/6_Predictions.py", {**folder_params(folder), "kind": "decoder"},
                  {"_mv_state_text": SOURCE, "_mv_state_target": TARGET})
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    assert "needs a pre-norm model" in " ".join(texts(at.info))  # the library's reason


def test_head_similarity_of_cross_attention_heads():
    from mha_viz import analysis as A
    from mha_viz import load_model

    query, session = params("cross")
    at = run_page("pages/3_Head_Similarity.py", query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    specs = [json.loads(e.proto.spec) for e in at.get("plotly_chart")]
    assert len(specs) == 2  # the matrix and the 2-D map
    trace = load_model("t5-toy").trace(SOURCE, target=TARGET)
    expected = A.head_distances(trace.source("cross"))
    order = A.cluster_order(expected)
    shown = array(specs[0]["data"][0]["z"]).astype(float)
    np.testing.assert_allclose(shown, expected[np.ix_(order, order)], atol=1e-6)
    assert "between cross-attention heads" in " ".join(texts(at.info))


def test_an_encoder_decoder_opens_on_its_example_and_names_unknown_source_words():
    at = run_page("pages/1_Attention_Maps.py", {"model": "t5-toy"}, {})
    assert not at.exception and not at.error
    assert at.sidebar.text_area[0].value == SOURCE and not at.warning
    query, session = params("cross")
    session["_mv_state_text"] = "The animal didn't cross the street"
    at = run_page("pages/6_Predictions.py", query, session)
    assert not at.exception and not at.error
    assert any("unknown to this model's tokenizer" in w for w in texts(at.warning))


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_head_roles_of_each_stack(kind):
    """Head roles on one stack's self-attention: the text's scores are those of that stack's
    maps, and the induction probe runs through the same stack."""
    from mha_viz import analysis as A
    from mha_viz import load_model

    query, session = params(kind)
    at = run_page("pages/7_Head_Roles.py", query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    model = load_model("t5-toy")
    trace = model.trace(SOURCE, target=TARGET).as_trace(kind)
    expected = A.role_scores(trace)["previous token"]
    np.testing.assert_allclose(array(chart(at, "Previous token")["data"][0]["z"]).astype(float),
                               expected, atol=1e-6)
    caption = " ".join(texts(at.caption))
    assert ("R R </s>" if kind == "encoder" else "<pad> R R") in caption, caption


@pytest.mark.parametrize("kind", ["encoder", "cross"])
def test_head_similarity_by_outputs_across_kinds(kind):
    """Compared by what they write: the encoder's heads among themselves, or the decoder's
    self-attention and cross-attention heads in one matrix, equal to the library's."""
    from mha_viz import load_model
    from mha_viz.analysis import head_outputs_seq2seq, output_similarity, outputs_of_kinds

    query, session = params(kind)
    query["compare"] = "outputs"
    at = run_page("pages/3_Head_Similarity.py", query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    outputs = head_outputs_seq2seq(load_model("t5-toy"), SOURCE, TARGET)
    heads, names = outputs_of_kinds(outputs, ["encoder"] if kind == "encoder"
                                    else ["decoder", "cross"])
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    np.testing.assert_allclose(array(spec["data"][0]["z"]).astype(float),
                               output_similarity(heads), atol=1e-6)
    assert spec["data"][0]["y"] == names
    frames = at.dataframe
    if kind == "encoder":
        assert names[0] == "enc L0.H0" and not frames
    else:
        assert len(names) == 16 and names[8] == "cross L0.H0"
        table = frames[0].value
        assert list(table["self-attention head"])[0].startswith("self ")
        assert list(table["cross-attention head"])[0].startswith("cross ")


def test_the_digit_reader_on_every_page():
    """Cross-modal attention in the app: the reader's image with each written digit's
    attention over its strips (equal to the library's mean of the last layer), and every
    page opens on it without an error."""
    from mha_viz import load_model

    query = {"model": "reader-toy", "kind": "cross"}
    session = {"_mv_state_text": "40721", "_mv_state_target": ""}
    at = run_page("pages/1_Attention_Maps.py", query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    titles = chart_titles(at)
    assert titles[0].startswith("Last layer (L1), mean of its heads")
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    trace = load_model("reader-toy").trace("40721")
    image, weights = spec["data"][0], spec["data"][1]
    np.testing.assert_allclose(array(image["z"]).astype(float), trace.image, atol=1e-6)
    last = trace.cross_attentions[-1].mean(0)
    np.testing.assert_allclose(array(weights["z"]).astype(float),
                               np.repeat(last, trace.patch_width, axis=1), atol=1e-6)
    assert weights["y"][:5] == ["0 '4'", "1 '0'", "2 '7'", "3 '2'", "4 '1'"]
    for page in ["app.py", *(p.path for p in page_files()[1:])]:
        for kind in ("encoder", "cross"):
            at = run_page(page, {**query, "kind": kind}, session)
            assert not at.exception and not at.error, (page, kind, texts(at.exception),
                                                       texts(at.error))
    at = run_page("pages/7_Head_Roles.py", {**query, "kind": "encoder"}, session)
    assert any("reads an image, not tokens" in t for t in texts(at.info))
    session["_mv_state_text"] = "forty"
    at = run_page("pages/1_Attention_Maps.py", query, session)
    assert not at.exception
    assert any("only the digits 0-9" in t for t in texts(at.error) + texts(at.info))


def test_circuits_patches_every_head_of_every_kind():
    """The sidebar's source is clean, the example's corrupted source (one word swapped) is
    the page's default; the metric is the first target token the corruption changes, and
    the three maps equal the library's normalized effects."""
    from mha_viz import TargetMetric, load_model
    from mha_viz.analysis import activation_patching_seq2seq, first_divergence

    query, session = params("cross", target="")
    at = run_page("pages/9_Circuits.py", query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    corrupted = "red car follows small cat near old house"
    model = load_model("t5-toy")
    position, clean_token, corrupted_token = first_divergence(model, SOURCE, corrupted)
    assert model.display_tokens([clean_token, corrupted_token]) == ["chien", "chat"]
    expected = activation_patching_seq2seq(model, SOURCE, corrupted, None,
                                           TargetMetric(position, clean_token,
                                                        corrupted_token))
    specs = [json.loads(e.proto.spec) for e in at.get("plotly_chart")]
    assert len(specs) == 3
    for spec, kind in zip(specs, ("encoder", "decoder", "cross")):
        np.testing.assert_allclose(array(spec["data"][0]["z"]).astype(float),
                                   expected.normalized[kind], atol=1e-6)
    assert any("logit('chien') − logit('chat') at target position 3" in t
               for t in texts(at.markdown))
    strongest = at.dataframe[0].value
    assert list(strongest["kind"])[0] == "Cross-attention"


def test_every_page_reads_a_long_sources_encoder_on_demand(monkeypatch):
    """Past the size of maps held whole, the encoder's maps are rebuilt when a page asks:
    every page opens on such a trace (here forced by a tiny threshold), and the Attention
    maps page takes the long-input view for the encoder."""
    import mha_viz.maps.trace

    monkeypatch.setattr(mha_viz.maps.trace, "AUTO_FULL_MAPS_BYTES", 1000)
    source = "old dog sees red car near house"  # a text no other test traces (the store)
    session = {"_mv_state_text": source, "_mv_state_target": ""}
    for page in [p.path for p in page_files()[1:]]:
        at = run_page(page, {"model": "t5-toy", "kind": "encoder"}, session)
        assert not at.exception and not at.error, (page, texts(at.exception), texts(at.error))
    at = run_page("pages/1_Attention_Maps.py", {"model": "t5-toy", "kind": "encoder"}, session)
    from mha_viz import load_model

    assert load_model("t5-toy").trace(source).on_demand("encoder")
    assert at.get("plotly_chart")  # drawn from maps computed on request


def test_corpus_reads_the_encoder_over_the_texts():
    from mha_viz import corpus, load_model

    query, session = params("encoder")
    query.update(maxseg="20", seglen="32")
    at = run_page("pages/8_Corpus.py", query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    at = [b for b in at.button if b.label.startswith("Run over")][0].click().run()
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    model = load_model("t5-toy")
    segments = corpus.segment(model, corpus.demo_texts(), 32, max_segments=20)
    expected = corpus.run(model, segments).mean("entropy")
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    np.testing.assert_allclose(array(spec["data"][0]["z"]).astype(float), expected,
                               atol=1e-4)
    assert expected.shape == (2, 4)


def test_head_similarity_by_cosine_of_the_maps():
    """The cosine choice (head diversity as the texts define it) on the cross-attention
    heads: the matrix is 1 − cos of the maps, as the library computes it."""
    from mha_viz import load_model
    from mha_viz.analysis import map_cosine_distances

    query, session = params("cross")
    query["dist"] = "cosine"
    at = run_page("pages/3_Head_Similarity.py", query, session)
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    expected = map_cosine_distances(load_model("t5-toy").trace(SOURCE, TARGET).cross_attentions)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    shown = array(spec["data"][0]["z"]).astype(float)
    assert shown.shape == expected.shape
    np.testing.assert_allclose(np.sort(shown.ravel()), np.sort(expected.ravel()), atol=1e-6)
    assert any("cosine distance" in t for t in texts(at.info))
