"""Value-weighted maps (issue 49; Kobayashi et al. 2020): ||alpha_ij (x_j W_V^h + b_V^h)
W_O^h|| for every head, against a plain numpy loop over layers, heads, queries and keys,
written here from each checkpoint's own weights, with the weights alpha and the heads' input
x read from transformers' own model (output_attentions, and a hook on each attention
module's input written here). The statistics read the normalized maps as they read the
weights (one argument, weights="value"); Kobayashi et al. 2021's context-mixing ratios
against a loop over every (query, key) vector of the layer's output."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from mha_viz import InputError, load_model
from mha_viz.analysis import (context_mixing, entropy, head_distances,
                              mean_attention_distance, role_scores, token_class_mass, value_norms,
                              value_weighted_maps)
from mha_viz.maps.trace import AttentionTrace
from tests.support.value_weighted import (as_numpy, bert_parts, check_close, gpt2_parts, hf_run,
                                          llama_parts, loop_value_weighted)

TEXT = "the cat sat on the mat and the dog ran to the"


@pytest.fixture(scope="module")
def references(gpt2_folder, bert_folder, patch_models):
    """name -> (our model, transformers' model, where it keeps its parts)."""
    from transformers import BertForMaskedLM, GPT2LMHeadModel

    found = {
        "gpt2": (load_model(gpt2_folder), GPT2LMHeadModel.from_pretrained(
            gpt2_folder, attn_implementation="eager").eval(), gpt2_parts),
        "bert": (load_model(bert_folder), BertForMaskedLM.from_pretrained(
            bert_folder, attn_implementation="eager").eval(), bert_parts),
    }
    for name in ("llama", "gemma2"):  # grouped-query; Gemma 2 with windows and soft-caps
        model, hf, _ = patch_models[name]
        found[name] = (model, hf, llama_parts)
    return found


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "gemma2"])
def test_value_weighted_maps_equal_a_loop_over_transformers_weights(references, name):
    model, hf, parts = references[name]
    ids = model.encode(TEXT).input_ids
    alpha, x, layers = hf_run(hf, parts, ids)
    expected = loop_value_weighted(alpha, x, layers)
    ours = value_weighted_maps(model, TEXT)
    assert ours.dtype == np.float32 and ours.shape == expected.shape
    check_close(ours, expected)
    np.testing.assert_allclose(value_norms(model, TEXT), (expected / np.where(
        alpha > 0, alpha, np.inf)).max(axis=2), rtol=1e-5)  # ||f_h(x_j)||, from any query
    normalized = expected / expected.sum(-1, keepdims=True)
    check_close(value_weighted_maps(model, TEXT, normalized=True), normalized)
    # the trace every statistic reads: whole, and rebuilt on demand
    trace = model.trace(TEXT, weights="value")
    assert trace.value_weighted and not model.trace(TEXT).value_weighted
    check_close(trace.attentions, normalized)
    check_close(model.trace(TEXT, weights="value", maps="on_demand").attentions, normalized)
    # the weights themselves differ (else the check above says nothing)
    assert np.abs(normalized - alpha).max() > 0.05


def test_statistics_read_the_value_weighted_maps(references):
    """One argument: a value-weighted trace, whole or on demand, gives the entropy and the
    first token's mass of the normalized maps (computed here from the loop)."""
    model, hf, parts = references["llama"]
    ids = model.encode(TEXT).input_ids
    alpha, x, layers = hf_run(hf, parts, ids)
    maps = loop_value_weighted(alpha, x, layers)
    maps /= maps.sum(-1, keepdims=True)
    logs = np.log(np.where(maps > 0, maps, 1.0))
    expected_entropy = -(maps * logs).sum(-1).mean(-1)
    expected_first = maps[..., 0].mean(-1)
    for held in ("full", "on_demand"):
        trace = model.trace(TEXT, weights="value", maps=held)
        np.testing.assert_allclose(entropy(trace), expected_entropy, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(token_class_mass(trace)["first token"], expected_first,
                                   rtol=1e-5, atol=1e-6)
    # and the attention weights give other numbers
    assert np.abs(entropy(model.trace(TEXT)) - expected_entropy).max() > 0.01
    # distance, head similarity and the role scores: the trace (whole, or rebuilt on demand)
    # gives what the loop's maps give, read as an array or as a trace holding them
    loop = maps.astype(np.float32)
    for held in ("full", "on_demand"):
        trace = model.trace(TEXT, weights="value", maps=held)
        np.testing.assert_allclose(mean_attention_distance(trace),
                                   mean_attention_distance(loop), rtol=1e-5)
        np.testing.assert_allclose(head_distances(trace), head_distances(loop), atol=1e-5)
        held_loop = replace(trace, attentions=loop)
        for name, scores in role_scores(trace).items():
            np.testing.assert_allclose(scores, role_scores(held_loop)[name], atol=1e-5,
                                       err_msg=name)
    assert model.run(TEXT, weights="value").trace.value_weighted
    np.testing.assert_allclose(model.run(TEXT, weights="value").trace.attentions, loop,
                               atol=1e-6)


def test_a_saved_value_weighted_trace_opens_as_it_was(references):
    model, _, _ = references["gemma2"]
    for held in ("full", "on_demand"):
        trace = model.trace(TEXT, weights="value", maps=held)
        opened = AttentionTrace.load(trace.to_bytes())
        assert opened.value_weighted and opened.on_demand == (held == "on_demand")
        np.testing.assert_array_equal(opened.attentions, trace.attentions)


def test_long_inputs_and_batches_weigh_blocks_of_rows(long_models, monkeypatch):
    """On-demand rows (several blocks of query rows) and a padded corpus batch give the maps
    of a whole value-weighted trace."""
    from mha_viz.maps import ondemand

    model = long_models["llama"]
    text = " ".join(["the cat sat on the mat and the dog ran to the door"] * 30)
    whole = model.trace(text, weights="value", maps="full")
    monkeypatch.setattr(ondemand, "BLOCK_ELEMENTS", 4 * 64 * 100)  # blocks of 64 rows
    rebuilt = value_weighted_maps(model, text, normalized=True, maps="on_demand")
    assert rebuilt.n_tokens > 300
    for layer, start, stop, rows in rebuilt.row_blocks():
        np.testing.assert_allclose(rows, whole.attentions[layer, :, start:stop], atol=1e-6)
    ids = whole.token_ids
    batch = [ids[:40], ids[:25]]
    for layer, weights in model.attention_by_layer(batch, weights="value"):
        for row, segment in enumerate(batch):
            n = len(segment)
            expected = model.trace_ids(segment, weights="value").attentions[layer]
            np.testing.assert_allclose(weights[row, :, :n, :n], expected, atol=1e-6)


def test_half_precision_computes_the_norms_in_float32(gpt2_folder):
    """bfloat16 weights: the values are rounded as the model rounds them, the norms are not
    (they stay within bfloat16's rounding of the float32 model's, and finite)."""
    exact = value_weighted_maps(load_model(gpt2_folder), TEXT)
    half = value_weighted_maps(load_model(gpt2_folder, dtype="bfloat16"), TEXT)
    assert half.dtype == np.float32 and np.isfinite(half).all()
    np.testing.assert_allclose(half, exact, rtol=0.1, atol=0.02 * exact.max())


def test_a_changed_output_projection_changes_the_norms(gpt2_folder):
    """The factors of W_O are kept between calls, and follow the weight when it changes."""
    model = load_model(gpt2_folder)
    before = value_weighted_maps(model, TEXT)
    with torch.no_grad():
        model.network.blocks[1].attn.out.weight.mul_(2.0)
    after = value_weighted_maps(model, TEXT)
    np.testing.assert_allclose(after[1], 2 * before[1], rtol=1e-5)
    np.testing.assert_array_equal(after[0], before[0])


def test_bad_requests_get_a_message(references, patch_models):
    model, _, _ = references["gpt2"]
    with pytest.raises(InputError, match="weights must be"):
        model.trace(TEXT, weights="values")
    with pytest.raises(InputError, match="side by side"):
        context_mixing(patch_models["neox"][0], TEXT)


# --- Kobayashi et al. 2021: attention + residual (+ norm) -----------------------------------


def _norm_of(vector, norm):
    """||D(z) / s||: a norm's linear part on z, with its scale s frozen (norm: (gain,
    centred, scale))."""
    gain, centred, scale = norm
    z = vector - vector.mean() if centred else vector
    return np.sqrt(np.sum((gain * z / scale) ** 2))


def loop_mixing(alpha, x, layers, streams, after, outer):
    """Each query's share from the other tokens [L, T] at the stages attention, residual,
    residual_norm, one (query, key) vector at a time. streams [L, T, d]: each layer's input;
    after(layer, query) / outer(layer, query): the frozen norm after the sum (post-norm) and
    on the attention's output (post_norms), or None."""
    n_layer, n_head, n_tokens, _ = alpha.shape
    out = {stage: np.zeros((n_layer, n_tokens))
           for stage in ("attention", "residual", "residual_norm")}
    for layer in range(n_layer):
        _, w_v, b_v, w_o, _ = layers[layer]
        d_k = w_v.shape[1]
        for query in range(n_tokens):
            sums = {stage: [0.0, 0.0] for stage in out}  # [others, own]
            for key in range(n_tokens):
                vector = 0.0
                for head in range(n_head):
                    kv = head // (n_head // w_v.shape[0])
                    vector = vector + alpha[layer, head, query, key] * (
                        w_o[:, head * d_k:(head + 1) * d_k] @ (w_v[kv] @ x[layer, key]
                                                               + b_v[kv]))
                norm = outer(layer, query)
                if norm is not None:
                    gain, centred, scale = norm
                    vector_out = gain * (vector - vector.mean() if centred else vector) / scale
                else:
                    vector_out = vector
                own = key == query
                residual = vector_out + (streams[layer, query] if own else 0.0)
                sums["attention"][own] += np.sqrt(np.sum(vector * vector))
                sums["residual"][own] += np.sqrt(np.sum(residual * residual))
                if after(layer, query) is not None:
                    sums["residual_norm"][own] += _norm_of(residual, after(layer, query))
            for stage, (others, own) in sums.items():
                out[stage][layer, query] = others / (others + own) if others + own else 0.0
    return out


def test_context_mixing_equals_a_loop_over_every_token_vector(references):
    """BERT (post-norm: attention, residual, then the LayerNorm), GPT-2 (pre-norm: attention
    and residual) and Gemma 2 (each sub-layer's output normalized before it joins the
    stream), from transformers' own streams and norms' inputs."""
    for name in ("bert", "gpt2", "gemma2"):
        model, hf, parts = references[name]
        ids = model.encode(TEXT).input_ids
        norm_inputs = {}
        hooks = []

        def capture(module, key):
            hooks.append(module.register_forward_pre_hook(
                lambda m, args: norm_inputs.__setitem__(key, args[0][0].detach().double())))

        for layer in range(hf.config.num_hidden_layers):
            if name == "bert":  # LayerNorm(attention output + stream)
                capture(hf.bert.encoder.layer[layer].attention.output.LayerNorm, layer)
            elif name == "gemma2":  # the RMSNorm of the attention's output
                capture(hf.model.layers[layer].post_attention_layernorm, layer)
        try:
            alpha, x, layers = hf_run(hf, parts, ids)
            with torch.no_grad():
                streams = np.stack([as_numpy(h[0]) for h in hf(
                    torch.tensor([ids]), output_hidden_states=True).hidden_states[:-1]])
        finally:
            for handle in hooks:
                handle.remove()

        def frozen(module, actual, centred):
            spread = actual - actual.mean() if centred else actual
            gain = as_numpy(module.weight) + (1.0 if name == "gemma2" else 0.0)  # (1 + w)
            return gain, centred, np.sqrt(np.mean(spread.numpy() ** 2) + module.eps)

        def after(layer, query):
            if name != "bert":
                return None
            norm = hf.bert.encoder.layer[layer].attention.output.LayerNorm
            return frozen(norm, norm_inputs[layer][query], True)

        def outer(layer, query):
            if name != "gemma2":
                return None
            norm = hf.model.layers[layer].post_attention_layernorm
            return frozen(norm, norm_inputs[layer][query], False)

        expected = loop_mixing(alpha, x, layers, streams, after, outer)
        ours = context_mixing(model, TEXT)
        np.testing.assert_allclose(ours.attention, expected["attention"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours.residual, expected["residual"], rtol=1e-5, atol=1e-6)
        if name == "bert":
            np.testing.assert_allclose(ours.residual_norm, expected["residual_norm"],
                                       rtol=1e-5, atol=1e-6)
        else:
            assert ours.residual_norm is None
        own = alpha[:, :, np.arange(len(ids)), np.arange(len(ids))].mean(1)
        np.testing.assert_allclose(ours.weights, 1 - own, rtol=1e-5, atol=1e-6)
        # the residual changes the share (else the loop's residual term is not checked)
        assert np.abs(ours.residual - ours.attention).max() > 0.05
