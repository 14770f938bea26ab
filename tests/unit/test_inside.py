"""inside_one_head: the step-by-step tensors of one head agree with the engine's own run."""

import numpy as np
import pytest
import torch

from mha_viz.analysis.one_head.steps import inside_one_head, summarise
from mha_viz.core.errors import InputError
from mha_viz.ui.words.one_head import head_steps

TEXT = "The animal didn't cross the street because it was too tired."


@pytest.fixture(params=["gpt2", "bert"])
def model(request, gpt2_model, bert_model):
    return gpt2_model if request.param == "gpt2" else bert_model


def attention_input(model, text, layer, text_pair=None):
    """The hidden state entering `layer`, run through the full forward (layer_inputs)."""
    net = model.network
    enc = model.encode(text, text_pair)
    ids = torch.tensor([enc.input_ids])
    types = torch.tensor([enc.token_type_ids])
    inputs = []
    with torch.no_grad():
        net.run_layers(net.embed(ids, types), 0, None, net.attention_bias(ids.shape[1]),
                       layer_inputs=inputs)
    h = inputs[layer]
    block = net.blocks[layer]
    return block.ln_1(h) if block.pre_ln else h


@pytest.mark.parametrize("layer", [0, 1])
def test_shapes_and_weights_equal_trace(model, layer):
    info = model.info
    trace = model.trace(TEXT)
    t, d, dk = trace.n_tokens, info.d_model, info.d_head
    for head in range(info.n_head):
        inside = inside_one_head(model, TEXT, layer, head)
        assert inside.X.shape == (t, d)
        for name in ("Q", "K", "V", "context"):
            assert getattr(inside, name).shape == (t, dk), name
        for name in ("scores", "mask", "masked_scores", "weights"):
            assert getattr(inside, name).shape == (t, t), name
        assert inside.W_O.shape == (dk, d)
        assert inside.W_Q.shape == inside.W_K.shape == inside.W_V.shape == (d, dk)
        assert inside.contribution.shape == (t, d)
        np.testing.assert_allclose(inside.weights, trace.attentions[layer, head], atol=1e-6,
                                   rtol=0)
        np.testing.assert_allclose(inside.weights.sum(-1), 1.0, atol=1e-5)
        assert inside.tokens == trace.display_tokens


def test_causal_mask_only_for_gpt2(gpt2_model, bert_model):
    g = inside_one_head(gpt2_model, TEXT, 1, 2)
    above = np.triu(np.ones_like(g.scores, dtype=bool), 1)
    assert np.isneginf(g.masked_scores[above]).all()
    assert np.isfinite(g.masked_scores[~above]).all()
    assert (g.weights[above] == 0).all()
    np.testing.assert_array_equal(g.masked_scores[~above], g.scores[~above])
    assert np.isfinite(g.scores).all()
    b = inside_one_head(bert_model, TEXT, 1, 2)
    assert (b.mask == 0).all() and np.array_equal(b.masked_scores, b.scores)


def test_steps_follow_from_each_other(model):
    """Q = X W_Q + b_Q, scores = Q K^T * scale, softmax, context = A V, contribution = C W_O."""
    inside = inside_one_head(model, TEXT, 1, 3)
    x = inside.X.astype(np.float64)
    for name in "QKV":
        w, b = getattr(inside, f"W_{name}"), getattr(inside, f"b_{name}")
        np.testing.assert_allclose(x @ w + b, getattr(inside, name), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(inside.Q @ inside.K.T * inside.scale, inside.scores,
                               atol=1e-4, rtol=1e-4)
    assert inside.scale == pytest.approx(model.info.d_head ** -0.5)
    s = inside.masked_scores.astype(np.float64)
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(e / e.sum(-1, keepdims=True), inside.weights, atol=1e-6)
    np.testing.assert_allclose(inside.weights @ inside.V, inside.context, atol=1e-5)
    np.testing.assert_allclose(inside.context @ inside.W_O, inside.contribution, atol=1e-5)
    out = model.network.blocks[1].attn.out.weight.detach().numpy()
    dk = model.info.d_head
    np.testing.assert_array_equal(inside.W_O, out[:, 3 * dk:4 * dk].T)


@pytest.mark.parametrize("layer", [0, 1])
def test_contributions_sum_to_the_layer_output(model, layer):
    x = attention_input(model, TEXT, layer)
    attn = model.network.blocks[layer].attn
    with torch.no_grad():
        bias = model.network.attention_bias(x.shape[1])
        expected = attn(x, bias)[0][0].numpy()
    heads = [inside_one_head(model, TEXT, layer, h) for h in range(model.info.n_head)]
    np.testing.assert_allclose(heads[0].X, x[0].numpy(), atol=1e-6)
    total = sum(h.contribution.astype(np.float64) for h in heads) + heads[0].output_bias
    np.testing.assert_allclose(total, expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(heads[0].layer_output, expected, atol=1e-6)
    shares = [h.share_of_output for h in heads]
    assert all(0 < s < 10 for s in shares)


def test_gpt2_input_is_after_ln1(gpt2_model):
    inside = inside_one_head(gpt2_model, TEXT, 1, 0)
    with torch.no_grad():
        ln = gpt2_model.network.blocks[1].ln_1(torch.from_numpy(inside.hidden)).numpy()
    np.testing.assert_allclose(inside.X, ln, atol=1e-6)
    assert inside.pre_ln and not np.allclose(inside.X, inside.hidden)


def test_bert_sentence_pair(bert_model):
    trace = bert_model.trace("Where is it?", text_pair="It is here.")
    inside = inside_one_head(bert_model, "Where is it?", 1, 1, text_pair="It is here.")
    np.testing.assert_allclose(inside.weights, trace.attentions[1, 1], atol=1e-6)
    assert not inside.pre_ln


def test_minilm_matches_trace(minilm):
    trace = minilm.trace(TEXT)
    inside = inside_one_head(minilm, TEXT, 5, 7)
    np.testing.assert_allclose(inside.weights, trace.attentions[5, 7], atol=1e-6)
    assert inside.X.shape == (trace.n_tokens, 384) and inside.Q.shape == (trace.n_tokens, 32)


def test_steps_describe_shapes(gpt2_model):
    inside = inside_one_head(gpt2_model, TEXT, 0, 0)
    steps = head_steps(inside)
    assert [s.key for s in steps] == ["X", "Q", "K", "V", "scores", "masked_scores", "weights",
                                      "context", "W_O", "contribution"]
    t, d = inside.n_tokens, inside.d_model
    for step in steps:
        rows, cols = getattr(inside, step.key).shape
        assert step.shape_text.endswith(f"{rows} × {cols}")
    assert steps[0].shape_text == f"T × d_model = {t} × {d}"
    assert set(inside.arrays()) >= {"X", "Q", "K", "V", "weights", "contribution", "W_O"}


@pytest.mark.parametrize("layer, head", [(-1, 0), (2, 0), (0, 4), (0, -1), (0.5, 0), (True, 0)])
def test_bad_layer_or_head(gpt2_model, layer, head):
    with pytest.raises(InputError):
        inside_one_head(gpt2_model, TEXT, layer, head)


@pytest.mark.parametrize("text", ["", "   ", None])
def test_bad_text(gpt2_model, text):
    with pytest.raises(InputError):
        inside_one_head(gpt2_model, text, 0, 0)


def test_summarise_counts_masked():
    a = np.array([[1.0, -np.inf], [2.0, 3.0]])
    s = summarise(a)
    assert s["min"] == 1.0 and s["max"] == 3.0 and s["−∞ entries"] == 1
    assert "mean row norm" in summarise(np.ones((2, 3)))


# --------------------------------------------------------------------------- figures
# The plots.py builders that pages 3-5 added: tensor_figure (inside one head),
# head_heatmap_row (nearest heads, before/after maps), columns_at_bottom.


def test_tensor_figure_small_prints_values_and_masks_gaps():
    from mha_viz import plots

    m = np.array([[1.0, -np.inf], [0.5, -0.25]])
    fig = plots.tensor_figure(m, ["the", "the"], ["k0", "k1"], "scores $x$", fmt=".2f")
    heat = fig.data[0]
    assert list(heat.y) == ["0 the", "1 the"]  # repeated labels stay two rows
    assert np.isnan(heat.z[0, 1]) and heat.z[1, 1] == np.float32(-0.25)
    assert heat.texttemplate == "%{z:.2f}" and heat.zmid == 0 and heat.zmax == 1.0
    assert "grey = masked" in fig.layout.title.text and "$" not in fig.layout.title.text
    assert fig.layout.plot_bgcolor == plots.MASK_GREY
    assert fig.layout.xaxis.side in (None, "bottom")  # never under the title


def test_tensor_figure_given_a_span_shares_its_scale():
    """Two steps drawn with one span (the scores before and after a soft-cap) share a scale."""
    from mha_viz import plots

    m = np.array([[1.0, -2.0], [0.5, 0.25]])
    heat = plots.tensor_figure(m, ["a", "b"], ["k0", "k1"], "capped", span=5.0).data[0]
    assert (heat.zmin, heat.zmid, heat.zmax) == (-5.0, 0.0, 5.0)
    assert plots.tensor_figure(m, ["a", "b"], ["k0", "k1"], "own").data[0].zmax == 2.0


def test_columns_at_bottom_moves_a_top_axis():
    from mha_viz import plots

    fig = plots.layer_head_heatmap(np.ones((2, 3)), "a long title " * 8, "Δ")
    assert fig.layout.xaxis.side == "top"
    assert plots.columns_at_bottom(fig) is fig and fig.layout.xaxis.side == "bottom"
    assert fig.layout.xaxis.title.text == "head"


def test_tensor_figure_large_has_no_per_cell_text():
    from mha_viz import plots

    m = np.random.default_rng(0).normal(size=(64, 768))
    fig = plots.tensor_figure(m, [str(i) for i in range(64)], [f"d{i}" for i in range(768)],
                              "X", show_values=False, diverging=False)
    heat = fig.data[0]
    assert heat.text is None and heat.texttemplate is None
    assert heat.z.dtype == np.float32 and heat.z.shape == (64, 768)
    assert len(fig.layout.xaxis.tickvals) <= 48
    assert len(fig.to_json()) < 400_000  # base64 float32 numbers, not 49k hover strings


def test_head_heatmap_row_shares_one_scale():
    from mha_viz import plots

    rng = np.random.default_rng(1)
    a = rng.random((3, 6, 6)).astype(np.float32)
    a /= a.sum(-1, keepdims=True)
    fig = plots.head_heatmap_row(list(a), list("abcdef"), ["L0.H0", "L1.H2", "L3.H1"],
                                 causal=True)
    assert len(fig.data) == 3 and {t.coloraxis for t in fig.data} == {"coloraxis"}
    assert fig.layout.coloraxis.cmax == pytest.approx(float(np.tril(a).max()))
    assert np.isnan(fig.data[0].z[0, 5]) and not np.isnan(fig.data[0].z[5, 0])
    assert [t.name for t in fig.data] == ["L0.H0", "L1.H2", "L3.H1"]
    assert fig.layout.yaxis2.scaleanchor == "x2"
    big = plots.head_heatmap_row([np.eye(300)] * 2, [str(i) for i in range(300)], ["a", "b"],
                                 max_size=100)
    assert big.data[0].z.shape == (100, 100) and "downsampled 3×" in big.layout.title.text
    with pytest.raises(InputError):
        plots.head_heatmap_row([np.eye(3), np.eye(4)], list("abc"), ["a", "b"])
    with pytest.raises(InputError):
        plots.head_heatmap_row([np.eye(3)], list("abc"), ["a", "b"])
