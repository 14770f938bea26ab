"""Encoder-decoder models (issue 27): T5 (ReLU, gated-GELU), BART and Marian in our engine
equal transformers' own implementations (eager, output_attentions): encoder, decoder and
cross-attention maps within 1e-5, logits within 1e-4, on our token ids, with sources long
enough that T5's relative distances pass max_distance both ways; the bucket function and
the bias table equal transformers'; bad checkpoints and inputs get clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tests.support.seq2seq_reference import SOURCE, TARGET, _hf_attention_outputs, reference

from mha_viz import EncoderDecoderModel, InputError, load_model
from mha_viz.core.errors import CorruptCheckpointError, UnsupportedModelError
from mha_viz.engine.positions import relative_position_bucket, relative_positions
from mha_viz.testing import make_seq2seq_checkpoint
from mha_viz.ui.words.one_head import head_steps

CASES = {
    "t5": dict(family="t5"),
    "t5-gated": dict(family="t5", gated=True, tie_word_embeddings=False, n_decoder_layer=3,
                     init_std=0.12),  # gate x up grows fast: float32 rounding, amplified
    "bart": dict(family="bart"),
    "marian": dict(family="marian"),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return {name: make_seq2seq_checkpoint(tmp_path_factory.mktemp(name), **kw)
            for name, kw in CASES.items()}


def close(found, expected, atol):
    np.testing.assert_allclose(np.asarray(found), np.asarray(expected), atol=atol, rtol=0)


@pytest.mark.parametrize("case", CASES)
def test_maps_and_logits_equal_transformers(checkpoints, case):
    model = load_model(str(checkpoints[case]))
    assert isinstance(model, EncoderDecoderModel) and model.info.encoder_decoder
    trace = model.trace(SOURCE, target=TARGET)
    s, t = len(trace.source_ids), len(trace.target_ids)
    assert s > 40  # T5 here: 8 buckets up to distance 20, so distances pass it both ways
    hf = reference(checkpoints[case])
    with torch.no_grad():
        out = hf(input_ids=torch.tensor([trace.source_ids]),
                 decoder_input_ids=torch.tensor([trace.target_ids]), output_attentions=True)
    expected = {"encoder": torch.cat(out.encoder_attentions).numpy(),
                "decoder": torch.cat(out.decoder_attentions).numpy(),
                "cross": torch.cat(out.cross_attentions).numpy()}
    assert trace.cross_attentions.shape == (hf.config.decoder_layers if case in ("bart", "marian")
                                            else hf.config.num_decoder_layers, 4, t, s)
    for kind, maps in expected.items():
        assert trace.attentions(kind).shape == maps.shape
        close(trace.attentions(kind), maps, 1e-5)
        assert maps.max(-1).mean() > 0.2  # sharp maps: a wrong mask or bias would show
    close(trace.cross_attentions.sum(-1), 1.0, 1e-5)
    close(model.logits(SOURCE, target=TARGET), out.logits[0].numpy(), 1e-4)
    loss = torch.nn.functional.cross_entropy(out.logits[0], torch.tensor(trace.labels))
    assert model.target_loss(SOURCE, TARGET) == pytest.approx(float(loss), abs=1e-4)
    assert trace.label_tokens[-1] == "</s>" and trace.target_ids[1:] == trace.labels[:-1]


@pytest.mark.parametrize("case", ["t5", "marian"])
def test_greedy_target_equals_transformers_generate(checkpoints, case):
    model = load_model(str(checkpoints[case]))
    trace = model.trace(SOURCE, max_new_tokens=6)
    hf = reference(checkpoints[case])
    with torch.no_grad():
        generated = hf.generate(torch.tensor([trace.source_ids]), max_new_tokens=6,
                                do_sample=False, num_beams=1, min_length=0)
    expected = generated[0].tolist()[1:]  # after the decoder start token
    assert trace.generated and trace.target_text is None and trace.max_new_tokens == 6
    assert trace.labels == expected
    assert trace.cross_attentions.shape[2] == len(expected)
    assert model.generate(SOURCE, 6) == expected  # a text, as a causal model's generate takes


@pytest.mark.parametrize("buckets,distance", [(32, 128), (8, 20), (6, 7)])
def test_relative_buckets_and_bias_equal_transformers(buckets, distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = torch.arange(-300, 301)[None, :]
    for bidirectional in (True, False):
        expected = T5Attention._relative_position_bucket(relative, bidirectional, buckets,
                                                         distance)
        found = relative_position_bucket(relative, bidirectional, buckets, distance)
        assert torch.equal(found, expected)
        assert found.min() >= 0 and found.max() == buckets - 1  # every bucket reached
    # positions as the tables use them: key position - query position
    assert relative_positions(2, 3, offset=1).tolist() == [[-1, 0, 1], [-2, -1, 0]]


def test_position_bias_tables_equal_transformers(checkpoints):
    model = load_model(str(checkpoints["t5"]))
    hf = reference(checkpoints["t5"])
    for ours, theirs in ((model.network.encoder, hf.encoder), (model.network.decoder,
                                                               hf.decoder)):
        attention = theirs.block[0].layer[0].SelfAttention
        with torch.no_grad():
            expected = attention.compute_bias(45, 45)
            found = ours.position_bias(45)
        assert torch.equal(found, expected)


def _edit_config(folder, **changes):
    path = folder / "config.json"
    raw = json.loads(path.read_text())
    raw.update(changes)
    path.write_text(json.dumps(raw))


def test_bad_checkpoints_get_clear_errors(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = make_seq2seq_checkpoint(tmp_path / "no_decoder", "t5")
    weights = load_file(str(folder / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if not k.startswith("decoder.")},
              str(folder / "model.safetensors"))
    with pytest.raises(CorruptCheckpointError, match="lack .* tensor"):
        load_model(str(folder))

    folder = make_seq2seq_checkpoint(tmp_path / "vocab", "bart")
    weights = load_file(str(folder / "model.safetensors"))
    vocab = weights["model.shared.weight"].shape[0]
    small = {k: (v[:, :100] if k == "final_logits_bias" else v[:100] if v.shape[0] == vocab
                 else v) for k, v in weights.items()}
    save_file(small, str(folder / "model.safetensors"))
    _edit_config(folder, vocab_size=100)
    with pytest.raises(CorruptCheckpointError, match="tokenizer has .* tokens"):
        load_model(str(folder))

    for changes, error, match in (
            ({"relative_attention_num_buckets": 3}, CorruptCheckpointError, "relative position"),
            ({"relative_attention_max_distance": "far"}, UnsupportedModelError, "whole number"),
            ({"feed_forward_proj": "gated-relu-x"}, UnsupportedModelError, "feed_forward_proj"),
            ({"num_heads": 5}, CorruptCheckpointError, "config implies")):
        folder = make_seq2seq_checkpoint(tmp_path / f"c{len(list(tmp_path.iterdir()))}", "t5")
        _edit_config(folder, **changes)
        with pytest.raises(error, match=match):
            load_model(str(folder))


def test_bad_inputs_get_clear_errors(checkpoints):
    model = load_model(str(checkpoints["marian"]))  # a decoder context of 128
    with pytest.raises(InputError, match="decoder reads at most 128"):
        model.trace("A short source.", target="word " * 200)
    with pytest.raises(InputError, match="empty"):
        model.trace("   ", target="x")
    for bad in (0, 10_000, "many"):
        with pytest.raises(InputError, match="max_new_tokens"):
            model.trace("A short source.", max_new_tokens=bad)
    with pytest.raises(InputError, match="kind of attention"):
        model.trace("A source.", target="A target.").attentions("self")
    long = model.trace("word " * 400, target="x")
    assert long.source_truncated and len(long.source_ids) == 128
    assert long.source_tokens[-1] == "</s>"


def test_entropy_over_the_source_equals_the_formula(checkpoints):
    """Cross-attention rows run over S source keys (S != T here): raw, normalized by ln S,
    and smoothed entropies from the streamed accumulator equal the formula."""
    from mha_viz import analysis as A

    trace = load_model(str(checkpoints["bart"])).trace(SOURCE, target="A short target.")
    maps = trace.cross_attentions.astype(np.float64)
    s = maps.shape[-1]
    assert s != maps.shape[-2]
    rows = -(maps * np.log(np.maximum(maps, 1e-300))).sum(-1)
    source = trace.source("cross")
    close(A.entropy(source), rows.mean(-1), 1e-6)
    close(A.entropy(source, normalized=True), (rows / np.log(s)).mean(-1), 1e-6)
    smoothed = maps * (1 - 1e-3) + 1e-3 / s
    close(A.entropy(source, smoothing=1e-3), -(smoothed * np.log(smoothed)).sum(-1).mean(-1),
          1e-6)
    close(A.row_entropy(source), rows, 1e-6)
    with pytest.raises(InputError, match="causal maps are square"):
        from mha_viz.maps.streaming import MapsSource

        MapsSource(trace.cross_attentions, causal=True)


@pytest.mark.parametrize("case", ["t5", "bart"])
def test_inside_one_head_of_every_kind(checkpoints, case):
    """Each step of one head of each kind: the weights are the trace's maps, K and V of a
    cross-attention head are the encoder's output through W_K and W_V, the heads'
    contributions and b_O add up to the layer's output, and T5's steps add the bias of each
    pair's bucket (the head's table looked up) before the mask."""
    from mha_viz.analysis.one_head.seq2seq_steps import inside_one_head_seq2seq
    from mha_viz.analysis.one_head.steps import inside_one_head

    model = load_model(str(checkpoints[case]))
    trace = model.trace(SOURCE, target=TARGET)
    for kind in ("encoder", "decoder", "cross"):
        heads = [inside_one_head_seq2seq(model, SOURCE, TARGET, kind, 1, h) for h in range(4)]
        one = heads[2]
        close(one.weights, trace.attentions(kind)[1, 2], 1e-6)
        # the same steps over another set of the maps: the one entry point of every head
        same = inside_one_head(model, SOURCE, 1, 3, target=TARGET, maps=kind)
        close(same.weights, trace.attentions(kind)[1, 3], 1e-6)
        assert one.columns == trace.column_tokens(kind)
        total = sum(h.contribution for h in heads)
        if one.output_bias is not None:
            total = total + one.output_bias
        close(total, one.layer_output, 1e-4)
        # the steps the page shows lead to those weights: Q K^T times the scale, the mask
        # (a decoder hides later keys), then the softmax
        close(one.scores, one.Q @ one.K.T * one.scale, 1e-5)
        rows, keys = np.indices(one.mask.shape)
        hidden = keys > rows if kind == "decoder" else np.zeros(one.mask.shape, dtype=bool)
        assert np.isneginf(one.mask[hidden]).all() and (one.mask[~hidden] == 0).all()
        e = np.exp(one.masked_scores - one.masked_scores.max(-1, keepdims=True))
        close(e / e.sum(-1, keepdims=True), one.weights, 1e-5)
        if kind == "cross":
            expected_k = one.memory @ one.W_K + (0 if one.b_K is None else one.b_K)
            close(one.K, expected_k, 1e-4)
            assert one.position_bias is None and one.K.shape[0] == len(trace.source_ids)
        elif case == "t5":
            close(one.position_bias, one.bias_table[one.buckets], 0)
            close(one.masked_scores, one.scores + one.position_bias + one.mask, 1e-5)
            without = np.exp(one.scores + one.mask - (one.scores + one.mask).max(-1,
                                                                                keepdims=True))
            close(one.weights_without_bias, without / without.sum(-1, keepdims=True), 1e-6)
            assert [s.key for s in head_steps(one)][5] == "position_bias"
        else:
            assert one.position_bias is None
    with pytest.raises(InputError, match="layer must be 0..1"):
        inside_one_head_seq2seq(model, SOURCE, TARGET, "encoder", 2, 0)


@pytest.mark.parametrize("case", ["t5", "bart"])
def test_head_ablation_equals_transformers_with_a_head_zeroed_by_a_hook(checkpoints, case):
    """Each head of each kind switched off: the rise of the teacher-forced target loss equals
    transformers' loss with that head's slice of the output projection's input zeroed by a
    forward pre-hook written here."""
    from mha_viz.analysis import ablation_effects_seq2seq

    model = load_model(str(checkpoints[case]))
    found = ablation_effects_seq2seq(model, SOURCE, TARGET)
    trace = model.trace(SOURCE, target=TARGET)
    hf = reference(checkpoints[case])
    inputs = dict(input_ids=torch.tensor([trace.source_ids]),
                  decoder_input_ids=torch.tensor([trace.target_ids]),
                  labels=torch.tensor([trace.labels]))
    with torch.no_grad():
        base = float(hf(**inputs).loss)
    assert float(found["base"]) == pytest.approx(base, abs=1e-4)
    for kind, projections in _hf_attention_outputs(hf, case).items():
        assert found[kind].shape == (len(projections), 4)
        for layer, projection in enumerate(projections):
            width = projection.in_features // 4
            for head in range(4):
                def zero(module, args, head=head):
                    x = args[0].clone()
                    x[..., head * width:(head + 1) * width] = 0
                    return (x,)

                handle = projection.register_forward_pre_hook(zero)
                with torch.no_grad():
                    loss = float(hf(**inputs).loss)
                handle.remove()
                assert found[kind][layer, head] == pytest.approx(loss - base, abs=2e-4), (
                    kind, layer, head)
    assert max(np.abs(found[k]).max() for k in ("encoder", "decoder", "cross")) > 0.01


@pytest.mark.parametrize("case", ["t5-gated", "marian"])
def test_decoder_predictions_equal_transformers(checkpoints, case):
    model = load_model(str(checkpoints[case]))
    pred = model.predict(SOURCE, target=TARGET, k=3)
    trace = model.trace(SOURCE, target=TARGET)
    hf = reference(checkpoints[case])
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor([trace.source_ids]),
                    decoder_input_ids=torch.tensor([trace.target_ids])).logits[0]
    logprobs = torch.log_softmax(logits, -1)
    assert pred.kind == "target" and pred.token_ids == trace.labels
    assert pred.tokens == trace.label_tokens
    close(pred.next_logprob, logprobs[torch.arange(len(trace.labels)),
                                      torch.tensor(trace.labels)].numpy(), 1e-4)
    expected = logprobs.topk(3, -1)
    assert (pred.top_ids == expected.indices.numpy()).all()
    close(pred.top_probs, expected.values.exp().numpy(), 1e-5)
    assert float(pred.loss.mean()) == pytest.approx(model.target_loss(SOURCE, TARGET),
                                                    abs=1e-5)
    with pytest.raises(InputError, match="k must be"):
        model.predict(SOURCE, target=TARGET, k=0)


def test_head_distances_of_cross_attention_equal_the_formula(checkpoints):
    """JS divergence between cross-attention heads: rows over the S source keys (S != T),
    smoothed over S keys, every row or evenly spaced ones."""
    from mha_viz import analysis as A

    trace = load_model(str(checkpoints["t5"])).trace(SOURCE, target="A short target.")
    maps = trace.cross_attentions.astype(np.float64)
    t, s = maps.shape[-2:]
    assert s != t

    def formula(rows, smoothing=1e-3):
        p = maps.reshape(-1, t, s)[:, rows] * (1 - smoothing) + smoothing / s
        m = 0.5 * (p[:, None] + p[None, :])
        js = (0.5 * (p[:, None] * np.log(p[:, None] / m)).sum(-1)
              + 0.5 * (p[None, :] * np.log(p[None, :] / m)).sum(-1)).mean(-1)
        np.fill_diagonal(js, 0.0)
        return js

    close(A.head_distances(trace.source("cross")), formula(np.arange(t)), 2e-6)
    rows = np.unique(np.round(np.linspace(0, t - 1, 3)).astype(int))
    close(A.head_distances(trace.source("cross"), max_rows=3), formula(rows), 2e-6)


def _t5_decoder_activations(hf, inputs) -> dict:
    """What transformers' T5 decoder computes on the way to its logits, read by hooks written
    here: the embeddings, each layer's per-head outputs before the output projections (self
    and cross), each MLP's output, and the stream entering the final norm."""
    got, handles = {}, []
    decoder = hf.decoder

    def keep(name, output=False):
        def hook(module, args, out=None):
            got[name] = (out if output else args[0]).detach().clone()
        return hook

    handles.append(decoder.embed_tokens.register_forward_hook(keep("embeddings", True)))
    handles.append(decoder.final_layer_norm.register_forward_pre_hook(keep("final")))
    for layer, block in enumerate(decoder.block):
        handles.append(block.layer[0].SelfAttention.o.register_forward_pre_hook(
            keep(("self", layer))))
        handles.append(block.layer[1].EncDecAttention.o.register_forward_pre_hook(
            keep(("cross", layer))))
        handles.append(block.layer[2].DenseReluDense.register_forward_hook(
            keep(("mlp", layer), True)))
    with torch.no_grad():
        got["logits"] = hf(**inputs).logits[0]
    for handle in handles:
        handle.remove()
    return got


@pytest.mark.parametrize("case", ["t5", "t5-gated"])
def test_direct_logit_attribution_of_a_decoder_equals_the_formula(checkpoints, case):
    """T5 (tied, with its d_model**-0.5 rescale, and untied): each self- and cross-attention
    head's direct effect, computed here from transformers' own activations with the final
    RMS norm's scale frozen, and the sum of all components equal to transformers' logit
    difference."""
    from mha_viz.analysis import direct_logit_attribution_seq2seq

    model = load_model(str(checkpoints[case]))
    trace = model.trace(SOURCE, target=TARGET)
    hf = reference(checkpoints[case])
    got = _t5_decoder_activations(hf, dict(input_ids=torch.tensor([trace.source_ids]),
                                           decoder_input_ids=torch.tensor([trace.target_ids])))
    position = 7
    token, contrast = trace.labels[position], trace.labels[position + 1]
    found = direct_logit_attribution_seq2seq(model, SOURCE, TARGET, position,
                                             contrast=contrast)
    assert found.target == token and found.contrast == contrast and found.position == position
    logits = got["logits"].double()
    expected_total = float(logits[position, token] - logits[position, contrast])
    assert found.total == pytest.approx(expected_total, abs=1e-4)
    assert found.sum_of_components == pytest.approx(expected_total, abs=1e-4)

    x = got["final"][0, position].double()
    norm = hf.decoder.final_layer_norm
    scale = torch.sqrt(x.pow(2).mean() + norm.variance_epsilon)
    assert found.scale == pytest.approx(float(scale), rel=1e-5)
    unembed = hf.lm_head.weight.detach().double()
    rescale = hf.config.d_model ** -0.5 if hf.config.scale_decoder_outputs else 1.0
    read = norm.weight.detach().double() * (unembed[token] - unembed[contrast]) * rescale / scale
    for kind, attribute in (("self", found.heads), ("cross", found.cross_heads)):
        for layer, block in enumerate(hf.decoder.block):
            o = (block.layer[0].SelfAttention.o if kind == "self"
                 else block.layer[1].EncDecAttention.o)
            z = got[(kind, layer)][0, position].double().view(4, -1)  # [H, d_k]
            weight = o.weight.detach().double().view(o.out_features, 4, -1)  # [d, H, d_k]
            expected = [float(weight[:, h] @ z[h] @ read) for h in range(4)]
            # float32 activations of size ~10 (the gated case): relative rounding
            np.testing.assert_allclose(attribute[layer], expected, atol=1e-5, rtol=1e-5)
    for layer in range(len(hf.decoder.block)):
        assert found.rest[f"L{layer} MLP"] == pytest.approx(
            float(got[("mlp", layer)][0, position].double() @ read), abs=1e-5, rel=1e-5)
    assert found.rest["embeddings"] == pytest.approx(
        float(got["embeddings"][0, position].double() @ read), abs=1e-5, rel=1e-5)
    assert np.abs(found.cross_heads).max() > 1e-3  # the source reaches this prediction
    # the target's own token, read alone
    alone = direct_logit_attribution_seq2seq(model, SOURCE, TARGET, -1)
    assert alone.target == trace.labels[-1] and alone.contrast is None
    assert alone.sum_of_components == pytest.approx(float(logits[-1, trace.labels[-1]]),
                                                    abs=1e-4)


def test_direct_logit_attribution_refuses_a_post_norm_decoder_and_bad_positions(checkpoints):
    from mha_viz.analysis import direct_logit_attribution_seq2seq

    with pytest.raises(InputError, match="pre-norm"):
        direct_logit_attribution_seq2seq(load_model(str(checkpoints["bart"])), SOURCE, TARGET, 0)
    model = load_model(str(checkpoints["t5"]))
    with pytest.raises(InputError, match="outside the target"):
        direct_logit_attribution_seq2seq(model, SOURCE, TARGET, 500)


def test_patching_a_cross_attention_head_equals_transformers_with_a_hook(checkpoints):
    """cross_z of one head taken from a run on another source (another length, too) and put
    into the clean run: the logits equal transformers' with that head's slice of the
    cross-attention output projection's input replaced, by hooks written here."""
    from mha_viz.engine.interventions import Interventions

    model = load_model(str(checkpoints["t5"]))
    other = "A different source, of another length entirely."
    clean = model.teacher_forcing(SOURCE, TARGET)
    corrupt_ids, _ = model.encode_source(other)
    decoder_ids = torch.tensor([clean.decoder_ids])
    net = model.network
    layer, head = 1, 2
    with torch.no_grad():
        donor = Interventions(capture=[("cross_z", layer)])
        net.decode(decoder_ids, net.encode(torch.tensor([corrupt_ids]))[0], hooks=donor)
        mask = torch.zeros(1, 4, 1, 1, dtype=torch.bool)
        mask[0, head] = True
        patch = Interventions().replace("cross_z", layer, donor.captured[("cross_z", layer)],
                                        mask)
        hidden, _, _ = net.decode(decoder_ids, net.encode(torch.tensor([clean.source_ids]))[0],
                                  hooks=patch)
        found = net.decoder.lm_logits(hidden)[0].numpy()
        unpatched = model.logits(SOURCE, target=TARGET)

    hf = reference(checkpoints["t5"])
    projection = hf.decoder.block[layer].layer[1].EncDecAttention.o
    width = projection.in_features // 4
    kept = {}
    handle = projection.register_forward_pre_hook(
        lambda module, args: kept.__setitem__("z", args[0].clone()))
    with torch.no_grad():
        hf(input_ids=torch.tensor([corrupt_ids]), decoder_input_ids=decoder_ids)
    handle.remove()

    def replace(module, args):
        x = args[0].clone()
        x[..., head * width:(head + 1) * width] = kept["z"][..., head * width:(head + 1) * width]
        return (x,)

    handle = projection.register_forward_pre_hook(replace)
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor([clean.source_ids]),
                      decoder_input_ids=decoder_ids).logits[0].numpy()
    handle.remove()
    close(found, expected, 1e-4)
    assert np.abs(found - unpatched).max() > 1e-3  # the patch changed something
    with pytest.raises(ValueError, match="unknown activation point"):
        Interventions().replace("cross_bogus", 0, torch.zeros(1))


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_induction_probe_through_one_stack_equals_transformers_maps(checkpoints, kind):
    """The repeated-random-tokens probe run through one stack of a T5 (the encoder reads
    R R </s>; the decoder reads <start> R R with R R as the source): its scores equal the
    induction pattern score of transformers' own maps on the same ids."""
    from mha_viz.analysis import induction_pattern_scores, induction_probe

    model = load_model(str(checkpoints["t5"]))
    view = model.stack(kind)
    assert view.info.causal == (kind == "decoder")
    probe = induction_probe(view, seq_len=6, n_seqs=2, seed=3)
    config = model.network.config
    hf = reference(checkpoints["t5"])
    expected = []
    for ids in probe.ids:
        if kind == "encoder":
            assert ids[-1] == config.eos_token_id and probe.offset == 0
            source, decoder = ids, [config.decoder_start_token_id]
        else:
            assert ids[0] == config.decoder_start_token_id and probe.offset == 1
            source, decoder = ids[1:], ids
        with torch.no_grad():
            out = hf(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder]),
                     output_attentions=True)
        maps = torch.cat(out.encoder_attentions if kind == "encoder"
                         else out.decoder_attentions).numpy()
        expected.append(induction_pattern_scores(maps, 6, offset=probe.offset))
    close(probe.scores(), np.mean(expected, axis=0), 1e-6)
    assert probe.frame == ("R R </s>" if kind == "encoder" else f"{probe.frame_tokens[0]} R R")
    with pytest.raises(InputError, match="no stack of its own"):
        model.stack("cross")


def test_the_named_sets_describe_the_maps(checkpoints, gpt2_model):
    """maps.sets: each of an encoder-decoder's sets names whose tokens its rows and columns
    are and which stack's layers hold it, as the trace's arrays are shaped; a model of one
    stack has its self-attention alone, and only its maps can be value-weighted."""
    from mha_viz.maps.sets import ENCODER_DECODER, ONE_STACK, map_set
    from mha_viz.models.seq2seq import KIND_NAMES, KINDS

    model = load_model(str(checkpoints["t5-gated"]))  # 2 encoder layers, 3 decoder layers
    trace = model.trace(SOURCE, target=TARGET)
    lengths = {"source": len(trace.source_ids), "target": len(trace.target_ids)}
    config = model.network.config
    layers = {"encoder": config.encoder.n_layer, "decoder": config.decoder.n_layer}
    assert model.map_sets == ENCODER_DECODER and KINDS == ("encoder", "decoder", "cross")
    for maps in model.map_sets:
        shape = np.asarray(trace.attentions(maps.name)).shape
        assert shape == (layers[maps.stack], model.info.n_head, lengths[maps.queries],
                         lengths[maps.keys]), maps.name
        assert maps.square == (shape[-1] == shape[-2]) and KIND_NAMES[maps.name] == maps.label
        if maps.square:  # one stack's self-attention: the trace of that stack
            assert trace.as_trace(maps.stack).n_tokens == lengths[maps.queries]
    assert map_set(None) is map_set("self") and ONE_STACK == (map_set("self"),)
    with pytest.raises(InputError, match="one of self, encoder, decoder, cross"):
        map_set("crosss")
    assert model.map_weights == ("attention",)
    assert gpt2_model.map_sets == ONE_STACK and "value" in gpt2_model.map_weights
    from mha_viz.analysis.one_head.steps import inside_one_head
    with pytest.raises(InputError, match="has no cross-attention: its maps are self"):
        inside_one_head(gpt2_model, "one text", 0, 0, maps="cross")
    with pytest.raises(InputError, match="has no self-attention"):
        inside_one_head(model, SOURCE, 0, 0, maps="self")
    assert gpt2_model.trace("one text", weights="value").value_weighted
    # the stacks' layers (the sets' "stack"), what each model reads and which writes text
    assert model.info.stack_layers == layers and model.reads == "source"
    assert gpt2_model.info.stack_layers == {"": gpt2_model.network.config.n_layer}
    assert gpt2_model.reads == "text" and gpt2_model.info.writes_with_kv_cache
    assert not model.info.writes_with_kv_cache
    assert load_model("reader-toy").reads == "image"
