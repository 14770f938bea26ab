"""Head importance on encoder-decoders (issue 27): gradient importance, ablation on a target
metric and the pruning curve over encoder, decoder and cross-attention heads equal
transformers' own T5 and BART, with every head's gate put in by forward pre-hooks written
here on the input of each attention's output projection."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.support.seq2seq_reference import SOURCE, TARGET, _hf_attention_outputs, reference

from mha_viz import InputError, TargetMetric
from mha_viz import analysis as A
from mha_viz import load_model
from mha_viz.analysis import (ablation_effects_seq2seq, gradient_importance_seq2seq, kept_fractions,
                              pruning_curve_seq2seq)
from mha_viz.testing import make_seq2seq_checkpoint

CASES = {"t5": dict(family="t5"), "bart": dict(family="bart")}
KINDS = ("encoder", "decoder", "cross")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return {name: make_seq2seq_checkpoint(tmp_path_factory.mktemp(name), **kw)
            for name, kw in CASES.items()}


class GatedReference:
    """transformers' model with a gate per head: each attention's output projection reads
    its input with head h's slice multiplied by gates[kind][layer, h]."""

    def __init__(self, folder, case, trace):
        self.hf = reference(folder)
        self.inputs = dict(input_ids=torch.tensor([trace.source_ids]),
                           decoder_input_ids=torch.tensor([trace.target_ids]))
        self.labels = torch.tensor(trace.labels)
        self.projections = _hf_attention_outputs(self.hf, case)
        self.gates = {kind: torch.ones(len(p), 4) for kind, p in self.projections.items()}
        for kind, projections in self.projections.items():
            for layer, projection in enumerate(projections):
                projection.register_forward_pre_hook(self._hook(kind, layer))

    def _hook(self, kind, layer):
        def gate(module, args):
            x = args[0]
            width = x.shape[-1] // 4
            scale = self.gates[kind][layer].repeat_interleave(width)
            return (x * scale,)
        return gate

    def logits(self):
        return self.hf(**self.inputs).logits[0]

    def loss(self):
        return torch.nn.functional.cross_entropy(self.logits(), self.labels)


def metric_value(logits, position, token, contrast):
    return logits[position, token] - logits[position, contrast]


@pytest.mark.parametrize("case", CASES)
def test_gradient_importance_equals_autograd_through_transformers(checkpoints, case):
    model = load_model(str(checkpoints[case]))
    trace = model.trace(SOURCE, target=TARGET)
    ref = GatedReference(checkpoints[case], case, trace)
    for kind in KINDS:
        ref.gates[kind].requires_grad_(True)
    loss = ref.loss()
    grads = torch.autograd.grad(loss, [ref.gates[k] for k in KINDS])
    found = gradient_importance_seq2seq(model, SOURCE, TARGET)
    assert float(found["base"]) == pytest.approx(float(loss.detach()), abs=1e-4)
    for kind, grad in zip(KINDS, grads):
        np.testing.assert_allclose(found[kind], grad.abs().numpy(), atol=1e-4, rtol=1e-3)
    assert max(found[k].max() for k in KINDS) > 0.01
    # with some heads already off: the gradient at that mask
    off = {"cross": np.ones((len(ref.projections["cross"]), 4), dtype=np.float32)}
    off["cross"][0, 1] = 0
    with torch.no_grad():
        ref.gates["cross"][0, 1] = 0
    grads = torch.autograd.grad(ref.loss(), [ref.gates[k] for k in KINDS])
    found = gradient_importance_seq2seq(model, SOURCE, TARGET, head_masks=off)
    for kind, grad in zip(KINDS, grads):
        np.testing.assert_allclose(found[kind], grad.abs().numpy(), atol=1e-4, rtol=1e-3)


def test_ablation_on_a_target_metric_equals_transformers_with_a_head_zeroed(checkpoints):
    model = load_model(str(checkpoints["t5"]))
    trace = model.trace(SOURCE, target=TARGET)
    position = 3
    token, contrast = trace.labels[position], trace.labels[position + 1]
    metric = TargetMetric(position, token, contrast)
    found = ablation_effects_seq2seq(model, SOURCE, TARGET, metric=metric)
    ref = GatedReference(checkpoints["t5"], "t5", trace)
    with torch.no_grad():
        base = float(metric_value(ref.logits(), position, token, contrast))
        assert float(found["base"]) == pytest.approx(base, abs=1e-4)
        for kind in KINDS:
            for layer in range(found[kind].shape[0]):
                for head in range(4):
                    ref.gates[kind][layer, head] = 0
                    value = float(metric_value(ref.logits(), position, token, contrast))
                    ref.gates[kind][layer, head] = 1
                    assert found[kind][layer, head] == pytest.approx(value - base, abs=2e-4)
        # log-probability and negative positions
        logprob = ablation_effects_seq2seq(model, SOURCE, TARGET,
                                           TargetMetric(-1, token, None, "logprob"))
        expected = torch.log_softmax(ref.logits()[-1], -1)[token]
        assert float(logprob["base"]) == pytest.approx(float(expected), abs=1e-4)
    for bad, message in ((TargetMetric(99, token), "outside the target"),
                         (TargetMetric(0, token, kind="odds"), "kind is one of")):
        with pytest.raises(InputError, match=message):
            ablation_effects_seq2seq(model, SOURCE, TARGET, metric=bad)
    with pytest.raises(InputError, match="shape"):
        ablation_effects_seq2seq(model, SOURCE, TARGET, head_masks={"cross": np.ones((1, 1))})


@pytest.mark.parametrize("by", ["gradient", "ablation"])
def test_pruning_curve_over_every_kind_equals_transformers_at_each_step(checkpoints, by):
    model = load_model(str(checkpoints["bart"]))
    trace = model.trace(SOURCE, target=TARGET)
    curve = pruning_curve_seq2seq(model, SOURCE, TARGET, step=0.25, by=by)
    total = sum(m.size for m in curve.masks[0].values())
    per_step = round(0.25 * total)
    assert len(curve.scores) == 1 + -(-total // per_step)
    assert curve.fractions[0] == 0 and curve.fractions[-1] == 1
    assert all(len(step) == per_step for step in curve.removed[1:-1])
    gone = [klh for step in curve.removed for klh in step]
    assert len(gone) == len(set(gone)) == total  # each head once
    ref = GatedReference(checkpoints["bart"], "bart", trace)
    with torch.no_grad():
        for masks, score in zip(curve.masks, curve.scores):
            for kind in KINDS:
                ref.gates[kind].copy_(torch.as_tensor(masks[kind]))
            assert score == pytest.approx(float(ref.loss()), abs=1e-4)
    # the first step removes the heads the chosen ranking finds least important
    if by == "ablation":
        effects = ablation_effects_seq2seq(model, SOURCE, TARGET)
        ranked = sorted(((effects[k][l, h], (k, l, h)) for k in KINDS
                         for l in range(effects[k].shape[0]) for h in range(4)))
        assert set(curve.removed[1]) == {klh for _, klh in ranked[:per_step]}
    kept = kept_fractions(curve, model)
    assert all(kept[k][0] == 1 and kept[k][-1] == 0 for k in KINDS)
    with pytest.raises(InputError, match="step must be"):
        pruning_curve_seq2seq(model, SOURCE, TARGET, step=0)


@pytest.mark.parametrize("case", CASES)
def test_head_outputs_equal_transformers_and_their_similarity_the_formula(checkpoints, case):
    """Each head's output is its slice of the output projection's input (taken from
    transformers' model by a forward pre-hook) times that slice of W_O; the similarity of
    two heads is the cosine of their outputs averaged over positions."""
    from mha_viz.analysis import head_outputs_seq2seq, output_similarity, outputs_of_kinds

    model = load_model(str(checkpoints[case]))
    found = head_outputs_seq2seq(model, SOURCE, TARGET)
    trace = model.trace(SOURCE, target=TARGET)
    hf = reference(checkpoints[case])
    inputs = {}
    handles = [projection.register_forward_pre_hook(
        lambda module, args, key=(kind, layer): inputs.__setitem__(key, args[0][0].detach()))
        for kind, projections in _hf_attention_outputs(hf, case).items()
        for layer, projection in enumerate(projections)]
    with torch.no_grad():
        hf(input_ids=torch.tensor([trace.source_ids]),
           decoder_input_ids=torch.tensor([trace.target_ids]))
    for handle in handles:
        handle.remove()
    for kind, projections in _hf_attention_outputs(hf, case).items():
        for layer, projection in enumerate(projections):
            x, weight = inputs[(kind, layer)], projection.weight
            width = x.shape[-1] // 4
            for head in range(4):
                part = slice(head * width, (head + 1) * width)
                expected = (x[:, part] @ weight[:, part].T).detach().numpy()
                # float32 through the layers: within 5e-5 of the output's scale
                np.testing.assert_allclose(found[kind][layer, head], expected, rtol=0,
                                           atol=5e-5 * max(1.0, np.abs(expected).max()))
    both, names = outputs_of_kinds(found, ["decoder", "cross"])
    assert names[0] == "self L0.H0" and names[len(names) // 2] == "cross L0.H0"
    similarity = output_similarity(both)
    t = torch.as_tensor(both)
    expected = torch.stack([torch.nn.functional.cosine_similarity(
        t[a], t[b], dim=-1).mean() for a in range(len(t)) for b in range(len(t))])
    np.testing.assert_allclose(similarity, expected.view(len(t), len(t)).numpy(), atol=1e-9)
    np.testing.assert_allclose(np.diag(similarity), 1.0, atol=1e-12)
    with pytest.raises(InputError, match="different positions"):
        outputs_of_kinds(found, ["encoder", "cross"])


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_head_patching_equals_transformers_with_the_heads_input_swapped(checkpoints, case,
                                                                       direction):
    """Each head's slice of its output projection's input, in the run of one source, is
    replaced by forward pre-hooks written here with the slice of the run of the other
    source: the metric equals ours for every head of every kind."""
    from mha_viz.analysis import activation_patching_seq2seq

    model = load_model(str(checkpoints[case]))
    # two words swapped: the same tokens, so encoder heads are patched too
    corrupted = SOURCE.replace("budget", "@").replace("garden", "budget").replace("@", "garden")
    trace = model.trace(SOURCE, target=TARGET)
    assert len(model.encode_source(corrupted)[0]) == len(trace.source_ids)
    position = 4
    token, contrast = trace.labels[position], trace.labels[position + 1]
    found = activation_patching_seq2seq(model, SOURCE, corrupted, TARGET,
                                        TargetMetric(position, token, contrast), direction)
    hf = reference(checkpoints[case])
    projections = _hf_attention_outputs(hf, case)
    ids = {"clean": model.encode_source(SOURCE)[0], "corrupted": model.encode_source(corrupted)[0]}
    base, taken_from = (("corrupted", "clean") if direction == "denoise"
                        else ("clean", "corrupted"))
    stored, swap = {}, {}

    def hook(kind, layer):
        def run(module, args):
            key = (kind, layer)
            stored[key] = args[0].detach().clone()
            if key in swap:
                x, head = args[0].clone(), swap[key]
                width = x.shape[-1] // 4
                x[..., head * width:(head + 1) * width] = \
                    taken[key][..., head * width:(head + 1) * width]
                return (x,)
        return run

    for kind, layers in projections.items():
        for layer, projection in enumerate(layers):
            projection.register_forward_pre_hook(hook(kind, layer))

    def metric_of(name):
        with torch.no_grad():
            logits = hf(input_ids=torch.tensor([ids[name]]),
                        decoder_input_ids=torch.tensor([trace.target_ids])).logits[0]
        return float(metric_value(logits, position, token, contrast))

    from_value = metric_of(taken_from)
    taken = dict(stored)
    base_value = metric_of(base)
    clean, corrupted_value = ((from_value, base_value) if direction == "denoise"
                              else (base_value, from_value))
    assert found.clean == pytest.approx(clean, abs=1e-4)
    assert found.corrupted == pytest.approx(corrupted_value, abs=1e-4)
    for kind, layers in projections.items():
        for layer in range(len(layers)):
            for head in range(4):
                swap.clear()
                swap[(kind, layer)] = head
                assert found.values[kind][layer, head] == pytest.approx(
                    metric_of(base), abs=2e-4), (kind, layer, head)
    spread = max(np.abs(found.normalized[k]).max() for k in KINDS)
    assert spread > 0.05  # some head matters: a patch that did nothing would pass unnoticed
    with pytest.raises(InputError, match="the same"):
        activation_patching_seq2seq(model, SOURCE, SOURCE, TARGET,
                                    TargetMetric(position, token, contrast))


def test_patching_sources_of_different_lengths_leaves_the_encoder_out(checkpoints):
    from mha_viz.analysis import activation_patching_seq2seq

    model = load_model(str(checkpoints["t5"]))
    trace = model.trace(SOURCE, target=TARGET)
    metric = TargetMetric(2, trace.labels[2], trace.labels[3])
    found = activation_patching_seq2seq(model, SOURCE, SOURCE + " The mayor left.", TARGET,
                                        metric)
    assert not found.encoder_patched and np.isnan(found.values["encoder"]).all()
    assert np.isfinite(found.values["cross"]).all() and "left out" in found.notes[0]


@pytest.mark.parametrize("case", CASES)
def test_a_long_sources_encoder_maps_on_demand_equal_the_whole_maps(checkpoints, case,
                                                                    monkeypatch):
    """The encoder's maps rebuilt from each layer's input (T5: with its relative position
    bias added per row block) equal the maps the forward held, and every analysis reads
    them the same way; 'auto' chooses on demand past AUTO_FULL_MAPS_BYTES."""
    import mha_viz.maps.trace

    model = load_model(str(checkpoints[case]))
    whole = model.trace(SOURCE, target=TARGET, maps="full")
    lazy = model.trace(SOURCE, target=TARGET, maps="on_demand")
    assert lazy.on_demand("encoder") and not lazy.on_demand("cross")
    for layer in range(whole.encoder_attentions.shape[0]):
        for head in range(4):
            np.testing.assert_allclose(lazy.head_map("encoder", layer, head),
                                       whole.encoder_attentions[layer, head], atol=1e-5)
    trace = lazy.as_trace("encoder")
    assert trace.on_demand
    np.testing.assert_allclose(trace.gather_rows(1, [0, 5, 30]),
                               whole.encoder_attentions[1][:, [0, 5, 30]], atol=1e-5)
    expected = A.entropy(whole.encoder_attentions)
    np.testing.assert_allclose(A.entropy(lazy.source("encoder")), expected, atol=1e-5)
    np.testing.assert_allclose(lazy.cross_attentions, whole.cross_attentions, atol=1e-6)
    if case == "t5":
        with pytest.raises(InputError, match="relative position bias"):
            trace.to_bytes()
    monkeypatch.setattr(mha_viz.maps.trace, "AUTO_FULL_MAPS_BYTES", 1000)
    assert model.trace(SOURCE, target=TARGET).on_demand("encoder")
    with pytest.raises(InputError, match="maps must be"):
        model.trace(SOURCE, target=TARGET, maps="some")
