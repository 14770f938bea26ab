"""The Features page (issue 55 item 5) in Streamlit's AppTest, on the bundled induction toy
with its bundled dictionaries: it shows the library's numbers (feature_firing, feature_heads,
feature_sources and feature_output_tokens called here; the head's ranking worked out here
from the first two), to the digit it prints; a link's hostile values each get their line;
a folder that is not a dictionary, a dictionary of another model, a truncated file, a folder
outside the server's allowed ones and a residual dictionary each get a clear message, never
a traceback or a path of the server; a model with no dictionary says how to train one; and
the why panel's "in features" view shows feature_score_attribution's pairs, summing to the
score."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

pytest.importorskip("streamlit")
from tests.support.app_pages import (array, chart, charts, folder_params, run_page,  # noqa: E402
                                     texts)

from mha_viz import load_model, load_sae  # noqa: E402
from mha_viz.analysis import (feature_firing, feature_heads, feature_output_tokens,  # noqa: E402
                              feature_score_attribution, feature_sources)
from mha_viz.dictionaries import bundled_saes  # noqa: E402

PAGE = "pages/12_Features.py"
TEXT = "the cat sat on the mat. the cat sat on the mat."
TOY = {"model": "induction-toy", "text": TEXT, "layer": "1", "head": "0", "open": ""}
HEAD = 3  # the toy's other induction head (not the first: a share read off head 0 shows)


@pytest.fixture(autouse=True)
def _raise(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_RAISE", "1")


@pytest.fixture(scope="module")
def toy():
    model = load_model("induction-toy")
    return model, load_sae("induction-toy/L1.hook_z", model=model)


def shown(at) -> str:
    return " ".join(texts(at.markdown) + texts(at.caption) + texts(at.info) + texts(at.error))


def table(at, column: str) -> list:
    return list(at.table[0].value[column])


def test_the_page_shows_the_librarys_numbers_on_the_toy(toy):
    model, sae = toy
    at = run_page(PAGE, {**TOY, "head": str(HEAD)})
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    # the head's features: activation summed over the text (position 0 left out) x share
    acts = feature_firing(model, sae, TEXT).acts.astype(np.float64)
    shares = feature_heads(sae, model)[:, HEAD]
    weight = acts[1:].sum(0) * shares
    top = [int(f) for f in np.argsort(-weight, kind="stable")[:10]]
    bars = chart(at, f"L1.H{HEAD}'s strongest features")["data"][0]
    assert list(bars["customdata"]) == top
    np.testing.assert_allclose(array(bars["x"]), weight[top], rtol=1e-5)
    assert table(at, "feature") == [f"f{f}" for f in top]
    assert table(at, "share on the head") == [f"{shares[f]:.3f}" for f in top]
    assert table(at, "summed activation") == [f"{acts[1:, f].sum():.3f}" for f in top]
    # the strongest feature, at the position it fires most, by head x source token
    feature, query = top[0], int(np.argmax(acts[1:, top[0]])) + 1
    found = feature_sources(model, sae, TEXT, query, feature)
    grid = chart(at, f"f{feature} at query {query}")
    np.testing.assert_allclose(array(grid["data"][0]["z"]), found.terms[:, :query + 1],
                               atol=1e-6)
    said = shown(at)
    assert (f"the 4 heads × {query + 1} source tokens give {found.terms.sum():+.3f}" in said
            and f"the bias {found.bias:+.3f}: {found.terms.sum() + found.bias:+.3f} in all"
            in said and f"activation there is {found.activation:.3f}" in said), said
    strip = chart(at, f"Where f{feature} fires")["data"][0]
    np.testing.assert_allclose(array(strip["z"]).ravel()[:len(acts)], acts[:, feature],
                               atol=1e-6)
    assert not [c for c in charts(at) if "The next tokens" in str(c["layout"].get("title"))]
    at = run_page(PAGE, {**TOY, "head": str(HEAD), "open": "output_tokens"})  # folded
    out = feature_output_tokens(model, sae, feature, k=8)
    bars = chart(at, f"The next tokens f{feature} raises")["data"][0]
    np.testing.assert_allclose(array(bars["x"]), [v for _, v in out.top + out.bottom],
                               rtol=1e-5)


def test_a_links_feature_and_query_are_followed(toy):
    model, sae = toy
    at = run_page(PAGE, {**TOY, "feature": "388", "fq": "34"})
    assert not at.exception and not at.error and not at.info, texts(at.info)
    found = feature_sources(model, sae, TEXT, 34, 388)
    np.testing.assert_allclose(array(chart(at, "f388 at query 34")["data"][0]["z"]),
                               found.terms[:, :35], atol=1e-6)
    assert f"({found.pre_activation:+.3f} as the dictionary computes it)" in shown(at)


HOSTILE = {"feature": "99999", "fq": "-3", "sae": "../../etc/passwd",
           "layer": "<script>alert(1)</script>"}


def test_a_links_hostile_values_each_get_their_line():
    at = run_page(PAGE, {**TOY, **HOSTILE})
    assert not at.exception and not at.error, texts(at.error)
    lines = texts(at.info)
    for name in HOSTILE:
        assert any(line.startswith(f"The link's {name}=") for line in lines), (name, lines)
    assert "/etc/passwd" not in " ".join(texts(at.markdown))
    assert chart(at, "strongest features")  # the page still shows the head's defaults
    for value in ("abc", "1e9", "-1"):
        at = run_page(PAGE, {**TOY, "feature": value})
        assert not at.exception and any("The link's feature=" in line
                                        for line in texts(at.info)), value


def folder_page(folder) -> object:
    return run_page(PAGE, {**TOY, "sae": "folder", "saedir": str(folder)})


def test_folders_that_are_not_a_dictionary_of_this_model_say_why(tmp_path, monkeypatch):
    # this test's folder is the one the server allows, wherever the checkout lies (one cloned
    # under the system's temporary folder is inside the tests' default allowed folder)
    monkeypatch.setenv("MHA_VIZ_ALLOWED_DIRS", str(tmp_path))
    bundled = bundled_saes()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a dictionary")
    # a bundled dictionary of the other bundled model (its file only: that model is not loaded)
    other = next(folder for name, folder in bundled.items()
                 if not name.startswith("induction-toy") and name.endswith("hook_z"))
    shutil.copytree(other, tmp_path / "another-models")
    shutil.copytree(bundled["induction-toy/L1.hook_z"], tmp_path / "truncated")
    weights = tmp_path / "truncated" / "sae_weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    cases = {"notes": "no cfg.json",
             "another-models": "it is a dictionary of another model",
             "truncated": "truncated or damaged"}
    for name, reason in cases.items():
        at = folder_page(tmp_path / name)
        assert not at.exception, texts(at.exception)
        (error,) = [e.replace("**", "") for e in texts(at.error)]
        assert error.startswith("This folder cannot be opened as a dictionary.") and \
            reason in error and str(tmp_path) not in error, error
        assert not at.get("plotly_chart")
    # outside the server's allowed folders (this test's folder only)
    at = folder_page(bundled["induction-toy/L1.hook_z"])
    (error,) = texts(at.error)
    assert "not a dictionary folder this server offers" in error
    assert str(bundled["induction-toy/L1.hook_z"].parent) not in error
    # a residual dictionary is not one of the heads: the page says where it serves
    shutil.copytree(bundled["induction-toy/L1.resid_pre"], tmp_path / "residual")
    at = folder_page(tmp_path / "residual")
    assert not at.error and "needs a hook_z dictionary" in " ".join(texts(at.info))
    # a good folder is read like a bundled one
    shutil.copytree(bundled["induction-toy/L1.hook_z"], tmp_path / "mine")
    at = folder_page(tmp_path / "mine")
    assert not at.error and chart(at, "L1.H0's strongest features")


def test_a_model_without_dictionaries_says_how_to_train_one(gpt2_folder):
    at = run_page(PAGE, {**folder_params(gpt2_folder), "text": TEXT, "open": ""})
    assert not at.exception and not at.error
    (said,) = texts(at.info)
    assert "No dictionary of this model is bundled" in said
    assert "mha-viz train-sae --model FOLDER --site hook_z" in said
    assert str(gpt2_folder) not in said
    # a layer without one, on a model that has some: the layers that do, and a button each
    at = run_page(PAGE, {**TOY, "layer": "0", "sae": "folder"})
    assert "its dictionaries read L0, L1" in " ".join(texts(at.info))
    assert [b.label for b in at.button if b.label.startswith("Show layer")] == [
        "Show layer 0", "Show layer 1"]


def test_the_why_panel_shows_the_score_in_features(toy):
    model, _ = toy
    resid = load_sae("induction-toy/L1.resid_pre", model=model)
    at = run_page("pages/1_Attention_Maps.py", {**TOY, "open": "why", "wq": "38", "wk": "15",
                                                "wfeat": "1"})
    assert not at.exception and not at.error, texts(at.exception)
    ids = model.encode(TEXT).input_ids
    found = feature_score_attribution(model, ids, 1, 0, 38, sae=resid)
    pairs = found.pairs(15, 8)
    bars = chart(at, "query 38 → key 15, in features")
    np.testing.assert_allclose(array(bars["data"][0]["x"]), [
        *(t for _, _, t in pairs.pairs), *pairs.parts.values(), pairs.others], atol=1e-6)
    assert array(bars["data"][1]["x"])[0] == pytest.approx(found.scores[found.column(15)],
                                                           abs=1e-4)
    said = shown(at)
    assert f"{pairs.total:+.3f} in all, the score" in said
    q, k, _ = pairs.pairs[0]
    assert f"**{q}** (query side, activation {found.activation(38, q):.3f})" in said
    # off by default, and not offered where no residual dictionary reads the layer
    plain = run_page("pages/1_Attention_Maps.py", {**TOY, "open": "why", "wq": "38",
                                                   "wk": "15"})
    assert [t.label for t in plain.toggle if t.label == "In features"] == ["In features"]
    assert "in features" not in " ".join(
        str((c["layout"].get("title") or {}).get("text")) for c in charts(plain))
    layer0 = run_page("pages/1_Attention_Maps.py", {**TOY, "layer": "0", "open": "why",
                                                    "wq": "38", "wk": "15"})
    assert not [t for t in layer0.toggle if t.label == "In features"]



def test_where_the_heads_features_fire_most_over_the_corpus(toy):
    """The folded section, opened: a job over the demo corpus's first 64 paragraphs (64
    segments of the toy's 64 tokens), each feature's three strongest activations as
    corpus.feature_snippets gives them, called here."""
    from mha_viz import corpus

    model, sae = toy
    at = run_page(PAGE, {**TOY, "open": "snippets"})
    assert not at.exception and not at.error, texts(at.exception)
    top = [int(f) for f in chart(at, "strongest features")["data"][0]["customdata"]]
    found = corpus.feature_snippets(model, sae, corpus.demo_texts(64), features=top, k=3,
                                    seg_len=64, max_segments=64)
    rows = at.dataframe[0].value
    want = [(f"f{f}", f"{v:.3f}") for f, values in zip(found.features, found.values)
            for v in values if np.isfinite(v)]
    assert list(zip(rows["feature"], rows["activation"])) == want
    tokens, at_token, _ = found.snippet(model, top[0], 0)
    assert rows["snippet"][0] == "".join(
        f"[{t}]" if i == at_token else t for i, t in enumerate(tokens)).replace("␣", " ")
    assert f"Read {found.n_segments:,} segments" in " ".join(texts(at.caption))
