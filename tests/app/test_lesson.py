"""Inside one head's lesson mode (AppTest) and the library numbers its steps show, each
against an independent computation."""

import io

import numpy as np
import pytest

from mha_viz import load_model
from mha_viz.analysis.one_head.steps import inside_one_head
from mha_viz.ui.words.one_head import head_steps, layout_step

TEXT = "The cat sat on the mat because it was warm."
PAGE = "pages/5_Inside_One_Head.py"


@pytest.fixture(scope="module")
def inside(gpt2_model):
    return inside_one_head(gpt2_model, TEXT, 1, 2)


def test_a_followed_query_is_its_row_of_the_scores_and_weights(inside, gpt2_model):
    query = 5
    followed = inside.followed_query(query)
    row = inside.weights[query]
    np.testing.assert_allclose(followed.table["weight"], np.round(row, 4))
    np.testing.assert_allclose(followed.table["score q·k × scale"],
                               np.round(inside.Q[query] @ inside.K.T * inside.scale, 4),
                               atol=2e-4)
    masked = followed.table["after the mask"]
    assert masked[query + 1:] == ["−∞"] * (inside.n_tokens - query - 1)  # causal: the future
    assert all(v != "−∞" for v in masked[:query + 1])
    order = sorted(range(inside.n_tokens), key=lambda j: -row[j])[:3]
    assert [j for j, _ in followed.strongest] == order
    assert [w for _, w in followed.strongest] == pytest.approx([row[j] for j in order])
    with pytest.raises(Exception, match="outside"):
        inside.followed_query(inside.n_tokens)


def test_the_walk_through_equals_the_traces_map_and_its_arrays_download(inside, gpt2_model):
    trace = gpt2_model.trace(TEXT)
    assert inside.largest_difference(trace.attentions[1, 2]) < 1e-5
    assert inside.largest_difference(trace.attentions[1, 3]) > 1e-3  # another head differs
    assert inside.scaled_by_sqrt_d_k  # GPT-2 divides by sqrt(d_k)
    saved = np.load(io.BytesIO(inside.npz_bytes(list(trace.display_tokens))),
                    allow_pickle=False)
    np.testing.assert_array_equal(saved["weights"], inside.weights)
    assert list(saved["tokens"]) == list(trace.display_tokens)


def test_the_layout_step_is_the_checkpoints_and_the_einsum(inside):
    step = layout_step(inside)
    assert "c_attn" in step.explanation and "einsum" in step.explanation
    assert step.shape_text == f"(batch, heads, seq, d_k) = (1, 4, {inside.n_tokens}, 16)"
    assert inside.einsum_difference < 1e-5
    q_step = [s for s in head_steps(inside) if s.key == "Q"][0]
    assert "einsum" not in q_step.explanation  # a step of its own, not inside Q's


def lesson_page(params: dict):
    from tests.support.app_pages import run_page, texts

    at = run_page(PAGE, {"model": "minilm", "lesson": "1", "layer": "1", "head": "2",
                         **params}, {})
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    return at


def progress_text(at) -> str:
    return at.get("progress")[0].proto.text


def test_lesson_mode_shows_one_step_and_moves_with_next_and_back():
    from tests.support.app_pages import run_page

    whole = run_page(PAGE, {"model": "minilm", "layer": "1", "head": "2"}, {})
    at = lesson_page({"lstep": "3"})
    text = progress_text(at)
    n = int(text.split(" of ")[1].split(":")[0])
    assert text.startswith("Step 3 of ") and "Q, K, V" in text and n >= 12
    assert 0 < len(at.get("plotly_chart")) == 3 < len(whole.get("plotly_chart"))  # Q, K, V
    assert not [b for b in at.get("download_button")]  # the whole page has the downloads
    next_button = [b for b in at.button if b.label == "Next →"][0]
    at = next_button.click().run()
    assert progress_text(at).startswith("Step 4 of ")
    at = [b for b in at.button if b.label == "← Back"][0].click().run()
    at = [b for b in at.button if b.label == "← Back"][0].click().run()
    assert progress_text(at).startswith("Step 2 of ")
    assert at.query_params["lstep"] == "2"  # the link keeps the step


@pytest.mark.parametrize("step", ["99", "0", "-3", "abc", "1e9"])
def test_a_hostile_step_in_the_link_opens_the_first(step):
    at = lesson_page({"lstep": step})
    assert progress_text(at).startswith("Step 1 of ")
    back = [b for b in at.button if b.label == "← Back"][0]
    assert back.disabled


def test_the_step_before_the_last_is_the_cost_of_attention():
    n = int(progress_text(lesson_page({})).split(" of ")[1].split(":")[0])
    at = lesson_page({"lstep": str(n - 1)})
    assert "What attention costs" in progress_text(at)
    shown = " ".join(str(m.value) for m in at.markdown)
    info = load_model("minilm").info
    assert "4 × d_model²" in shown
    assert f"{info.attention_params_per_layer:,}" in shown


def test_terms_in_finds_each_word_as_a_word():
    from mha_viz.ui.settings import TERMS, terms_in

    assert terms_in("entropy in nats/token") == TERMS["nats"]
    assert terms_in("an aggregate of heads") is None  # "gate" inside a word is not the term
    both = terms_in("pre-norm RMSNorm; the logit difference")
    assert TERMS["RMSNorm"] in both and TERMS["logit difference"] in both
    assert terms_in("") is None and terms_in(None) is None


def helps(at) -> str:
    return " ".join(e.proto.help for kind in ("markdown", "caption")
                    for e in at.get(kind) if getattr(e.proto, "help", ""))


@pytest.mark.slow
@pytest.mark.parametrize("page, params, word", [
    ("pages/2_Entropy.py", {}, "nats"),
    ("pages/3_Head_Similarity.py", {}, "Jensen-Shannon"),
    ("pages/3_Head_Similarity.py", {}, "MDS"),
    ("pages/5_Inside_One_Head.py", {"model": "smollm2"}, "RMSNorm"),
    ("app.py", {"model": "smollm2"}, "RMSNorm"),
    ("pages/6_Predictions.py", {"model": "smollm2"}, "logit difference"),
    ("pages/4_Pruning_Impact.py", {}, "gate"),
])
def test_each_technical_word_has_its_help_icon_where_it_is_used(page, params, word):
    from tests.support.app_pages import run_page, texts

    from mha_viz.ui.settings import TERMS

    at = run_page(page, params, {})
    assert not at.exception and not at.error, (texts(at.exception), texts(at.error))
    assert TERMS[word] in helps(at)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_parameter_count_is_the_checkpoints_own_tensors(tmp_path, family, gpt2_folder):
    """The lesson's 'what attention costs' step: W_Q, W_K, W_V, W_O of one layer, counted
    from transformers' own modules of the checkpoint (grouped-query: narrower W_K, W_V)."""
    from transformers import AutoModelForCausalLM

    from mha_viz.testing import make_llama_checkpoint

    folder = gpt2_folder if family == "gpt2" else make_llama_checkpoint(
        tmp_path, n_layer=2, n_head=4, n_kv_head=2, d_model=64)
    hf = AutoModelForCausalLM.from_pretrained(folder)
    if family == "gpt2":
        attn = hf.transformer.h[0].attn
        weights = [attn.c_attn.weight, attn.c_proj.weight]
    else:
        attn = hf.model.layers[0].self_attn
        weights = [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight,
                   attn.o_proj.weight]
    info = load_model(folder).info
    assert info.attention_params_per_layer == sum(w.numel() for w in weights)
    assert info.plain_attention_params == 4 * hf.config.hidden_size ** 2
    if family == "gpt2":
        assert info.attention_params_per_layer == info.plain_attention_params
        assert info.query_width == info.key_value_width == attn.c_attn.weight.shape[1] // 3
    else:
        assert info.attention_params_per_layer < info.plain_attention_params  # shared K, V
        assert info.query_width == attn.q_proj.weight.shape[0]
        assert info.key_value_width == attn.k_proj.weight.shape[0] == attn.v_proj.weight.shape[0]


def test_the_numbers_pages_show_come_from_the_library(gpt2_model):
    """What Pruning impact and Predictions used to compute in the page: the curve's step
    count, the sign of harm, the mean loss and the perplexity."""
    from mha_viz.analysis.pruning import curve_steps, harm_sign, pruning_curve

    assert curve_steps(270, 0.1) == (27, 10) and curve_steps(72, 0.05) == (4, 18)
    assert curve_steps(5, 0.1) == (1, 5) and curve_steps(7, 0.5) == (4, 2)
    curve = pruning_curve(gpt2_model, TEXT, step=0.3)
    per_step, steps = curve_steps(8, 0.3)
    assert len(curve.scores) == steps + 1  # the unpruned model, then one point per step
    assert harm_sign(None) == 1.0 and harm_sign(object()) == -1.0
    pred = gpt2_model.predict(TEXT)
    assert pred.mean_loss == pytest.approx(gpt2_model.score(TEXT), abs=1e-5)
    assert pred.perplexity == pytest.approx(np.exp(gpt2_model.score(TEXT)), rel=1e-5)


def test_the_weight_between_two_tokens_in_every_head(gpt2_model):
    from mha_viz.analysis import max_row_entropy, mean_over_rows

    trace = gpt2_model.trace(TEXT)
    np.testing.assert_array_equal(trace.weights_between(5, 2), trace.attentions[:, :, 5, 2])
    on_demand = gpt2_model.trace(TEXT, maps="on_demand")
    np.testing.assert_allclose(on_demand.weights_between(5, 2), trace.attentions[:, :, 5, 2],
                               atol=1e-6)
    row_max = max_row_entropy(4, causal=True)  # ln 1, ln 2, ln 3, ln 4
    assert float(mean_over_rows(row_max)) == pytest.approx(np.log([1, 2, 3, 4]).mean())


def test_each_tokens_loss_and_probability_line_up_with_the_tokens(gpt2_model):
    pred = gpt2_model.predict(TEXT)
    assert np.isnan(pred.token_loss[0]) and len(pred.token_loss) == len(pred.tokens)
    np.testing.assert_allclose(pred.token_loss[1:], -pred.next_logprob)
    np.testing.assert_allclose(pred.token_probability[1:], np.exp(pred.next_logprob), rtol=1e-6)
    assert pred.max_loss == pytest.approx(float(np.max(-pred.next_logprob)))


def test_the_window_mass_of_rows():
    from mha_viz.analysis import window_mass

    rows = np.array([[0.5, 0.2, 0.3, 0.0], [0.1, 0.1, 0.4, 0.4]])
    inside, first = window_mass(rows, 1, 3)
    assert inside == pytest.approx((0.5 + 0.5) / 2) and first == pytest.approx(0.3)
    with pytest.raises(Exception, match="start < stop"):
        window_mass(rows, 3, 3)


def test_positions_in_order_inverts_the_order():
    from mha_viz.analysis import positions_in_order

    order = np.array([2, 0, 3, 1])
    positions = positions_in_order(order)
    assert [int(positions[i]) for i in order] == [0, 1, 2, 3]
    with pytest.raises(Exception, match="permutation"):
        positions_in_order([0, 0, 1])


def test_the_last_step_reads_the_toys_induction_head_in_features():
    """On any model the last screen is the induction toy's head in its bundled dictionary:
    the feature its induction target builds most at the textbook case's query, its map by
    head and source token the terms of feature_sources (direct feature attribution, tested
    against transformers' hooks in tests/unit/test_features.py), its decoder share on the
    induction heads feature_heads' (the induction heads found here by their attention)."""
    from tests.support.app_pages import array, chart

    from mha_viz import load_sae
    from mha_viz.analysis import feature_heads, feature_sources

    n = progress_text(lesson_page({})).split(" of ")[1].split(":")[0]
    at = lesson_page({"lstep": n})
    assert "the induction feature" in progress_text(at)
    said = " ".join(str(m.value) for m in at.markdown)
    feature = int(said.split("builds most is **f")[1].split("**")[0])
    toy = load_model("induction-toy")
    text = "the cat sat on the mat. the cat sat on the mat."
    trace = toy.trace(text)
    ids = np.asarray(trace.token_ids)
    query = len(ids) - 10  # 'n' of the second "on"; its earlier copy is followed by key 15
    assert trace.display_tokens[query] == "n" and f"At query {query} 'n'" in said
    source = [j + 1 for j in range(query - 1) if ids[j] == ids[query]][-1]
    sae = load_sae("induction-toy/L1.hook_z", model=toy)
    terms = feature_sources(toy, sae, text, query, feature).terms
    assert int(np.argmax(terms.sum(0))) == source  # what the page claims of this feature
    shown = array(chart(at, f"f{feature} at query {query}")["data"][0]["z"])
    np.testing.assert_allclose(shown[:terms.shape[0], :query + 1], terms[:, :query + 1],
                               atol=1e-6)
    on_target = np.array([trace.head_map(1, h)[query, source]  # the heads reading the target
                          for h in range(trace.maps_shape[1])])
    induction = np.flatnonzero(on_target > 0.3)
    share = feature_heads(sae)[feature, induction].sum()
    assert f"{share:.0%} of its decoder sits on the induction heads" in said
    assert f"key {source} gives {terms[:, source].sum():+.2f}" in said
