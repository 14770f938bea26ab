"""ablation_effects, gradient_importance and pruning_curve against direct score() calls (a
forward of their own with a head mask, checked against transformers in test_engine_parity),
and the pruning curve's scores against transformers' masked-LM loss with its heads gated."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.support.hf_reference import gate_heads, hooked
from transformers import BertForMaskedLM

from mha_viz import InputError
from mha_viz.analysis.pruning import (ablation_effects, embedding_jacobian_norms,
                                      gradient_importance, pruning_curve)

TEXT = "The animal didn't cross the street because it was too tired. Mary gave John a drink."
SHORT = "The animal didn't cross the street."  # for the real MiniLM, whose 72 heads cost more


def direct_effects(model, text, mode="zero", base=None):
    n_layer, n_head = model.info.n_layer, model.info.n_head
    base = np.ones((n_layer, n_head)) if base is None else base
    reference = model.score(text, base, ablation=mode)
    effects = np.zeros((n_layer, n_head))
    for layer in range(n_layer):
        for head in range(n_head):
            if base[layer, head]:
                mask = base.copy()
                mask[layer, head] = 0
                effects[layer, head] = model.score(text, mask, ablation=mode) - reference
    return effects


@pytest.mark.parametrize("fixture", ["gpt2_model", "bert_model", "minilm"])
@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_ablation_effects_equal_direct_score_differences(request, fixture, mode):
    model = request.getfixturevalue(fixture)
    text = SHORT if fixture == "minilm" else TEXT
    effects = ablation_effects(model, text, mode=mode)
    expected = direct_effects(model, text, mode)
    assert effects.shape == (model.info.n_layer, model.info.n_head)
    assert np.abs(effects - expected).max() < 1e-4
    assert np.abs(expected).max() > 1e-3  # heads matter: the comparison is not 0 == 0


def test_ablation_relative_to_a_mask_and_small_batches(gpt2_model):
    base = np.ones((gpt2_model.info.n_layer, gpt2_model.info.n_head))
    base[0, 1] = 0
    effects = ablation_effects(gpt2_model, TEXT, head_mask=base, batch_size=1)
    assert np.abs(effects - direct_effects(gpt2_model, TEXT, base=base)).max() < 1e-4
    assert effects[0, 1] == 0


def test_ablation_over_several_texts_is_the_mean(bert_model):
    texts = [TEXT, "Where is the cat? It sat on the mat."]
    both = ablation_effects(bert_model, texts)
    each = [ablation_effects(bert_model, t) for t in texts]
    assert np.allclose(both, np.mean(each, axis=0))


@pytest.mark.parametrize("fixture", ["gpt2_model", "bert_model"])
def test_gradient_importance_equals_finite_differences(request, fixture):
    model = request.getfixturevalue(fixture)
    importance = gradient_importance(model, TEXT)
    base = model.score(TEXT)
    eps = 1e-2
    n_layer, n_head = model.info.n_layer, model.info.n_head
    fd = np.zeros((n_layer, n_head))
    for layer in range(n_layer):
        for head in range(n_head):
            up, down = np.ones((n_layer, n_head)), np.ones((n_layer, n_head))
            up[layer, head], down[layer, head] = 1 + eps, 1 - eps
            fd[layer, head] = abs(model.score(TEXT, up) - model.score(TEXT, down)) / (2 * eps)
    assert base > 0
    np.testing.assert_allclose(importance, fd, rtol=0.05, atol=1e-3 * fd.max())


def test_embedding_shift_importance_is_the_second_order_taylor_estimate(minilm):
    importance = gradient_importance(minilm, SHORT)
    eps = 0.05
    n_layer, n_head = minilm.info.n_layer, minilm.info.n_head
    second_order = np.zeros((n_layer, n_head))
    for layer in range(n_layer):
        for head in range(n_head):
            mask = np.ones((n_layer, n_head))
            mask[layer, head] = 1 - eps
            second_order[layer, head] = minilm.score(SHORT, mask) / eps ** 2
    np.testing.assert_allclose(importance, second_order, rtol=0.05, atol=0.02 * second_order.max())
    # and it ranks heads as the exact ablation does
    effects = ablation_effects(minilm, SHORT)
    assert np.corrcoef(importance.ravel(), effects.ravel())[0, 1] > 0.8


def test_layer_normalization(gpt2_model):
    raw = gradient_importance(gpt2_model, TEXT)
    normalized = gradient_importance(gpt2_model, TEXT, normalize="layer")
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=1), 1, rtol=1e-6)
    np.testing.assert_allclose(normalized * np.linalg.norm(raw, axis=1, keepdims=True), raw,
                               rtol=1e-5)
    with pytest.raises(InputError):
        gradient_importance(gpt2_model, TEXT, normalize="global")


def test_jacobian_norm_matches_finite_difference_of_embedding(minilm):
    norms = embedding_jacobian_norms(minilm, SHORT)
    eps = 0.02
    mask = np.ones((minilm.info.n_layer, minilm.info.n_head))
    mask[2, 3] = 1 - eps
    shifted = minilm.score(SHORT, mask)  # 1 - cos ~= 0.5 (eps * norm)^2
    assert np.sqrt(2 * shifted) / eps == pytest.approx(norms[2, 3], rel=0.1)


@pytest.mark.parametrize("by", ["gradient", "ablation"])
def test_pruning_curve(bert_folder, bert_model, by):
    curve = pruning_curve(bert_model, TEXT, step=0.25, by=by)
    total = bert_model.info.n_layer * bert_model.info.n_head
    assert curve.fractions[0] == 0 and curve.fractions[-1] == 1
    assert np.all(np.diff(curve.fractions) > 0)
    # each step's score: transformers' masked-LM loss at that step's mask
    hf = BertForMaskedLM.from_pretrained(bert_folder, attn_implementation="eager").eval()
    inputs = bert_model.score_inputs(TEXT)

    def hf_score(mask):
        layers = hf.bert.encoder.layer
        with torch.no_grad(), hooked(gate_heads([layer.attention.output.dense
                                                 for layer in layers],
                                                torch.as_tensor(mask, dtype=torch.float32),
                                                hf.config.num_attention_heads)):
            logits = hf(input_ids=inputs.input_ids,
                        token_type_ids=inputs.token_type_ids).logits[0, inputs.positions]
        return float(F.cross_entropy(logits, inputs.targets))
    assert len(curve.masks) == len(curve.scores)
    for mask, score in zip(curve.masks, curve.scores):
        assert score == pytest.approx(hf_score(mask), abs=1e-4)
    removed = [lh for step in curve.removed for lh in step]
    assert len(removed) == total == len(set(removed))
    for before, after, step in zip(curve.masks, curve.masks[1:], curve.removed[1:]):
        assert {tuple(lh) for lh in np.argwhere(before > after)} == set(step)
    if by == "ablation":  # the first step removes the heads whose exact effect is smallest
        every = np.ones((bert_model.info.n_layer, bert_model.info.n_head))
        base = hf_score(every)
        effects = np.zeros_like(every)
        for layer, head in np.ndindex(*every.shape):
            without = every.copy()
            without[layer, head] = 0
            effects[layer, head] = hf_score(without) - base
        first = curve.removed[1]
        threshold = np.sort(effects.ravel())[len(first) - 1]
        assert all(effects[lh] <= threshold + 1e-4 for lh in first)


def test_pruning_curve_rejects_bad_arguments(bert_model):
    with pytest.raises(InputError):
        pruning_curve(bert_model, TEXT, by="magic")
    with pytest.raises(InputError):
        pruning_curve(bert_model, TEXT, step=0)


def test_ablation_progress_reports_every_layer(gpt2_model):
    calls = []
    ablation_effects(gpt2_model, [TEXT, "The cat sat on the mat."],
                     progress=lambda done, total: calls.append((done, total)))
    n = gpt2_model.info.n_layer
    assert calls == [(i, 2 * n) for i in range(1, 2 * n + 1)]


def test_gradient_importance_progress(minilm, gpt2_model):
    calls = []
    gradient_importance(minilm, SHORT, progress=lambda done, total: calls.append((done, total)))
    # counted in heads, batch by batch: the bar moves within a layer, not once per layer
    n = minilm.info.n_layer * minilm.info.n_head
    assert calls[-1] == (n, n) and all(total == n for _, total in calls)
    assert [done for done, _ in calls] == sorted({done for done, _ in calls})
    assert len(calls) >= minilm.info.n_layer
    calls.clear()
    embedding_jacobian_norms(minilm, SHORT, batch_size=4,
                             progress=lambda done, total: calls.append(done))
    assert calls == list(range(4, n + 1, 4))
    calls.clear()
    gradient_importance(gpt2_model, [TEXT, SHORT], progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 2), (2, 2)]


def test_attention_change_reads_whole_and_rebuilt_maps_alike(gpt2_model):
    """The map change the pruning page shows: the mean over query rows of the total-variation
    distance, written out here, the same from traces that hold their maps, traces that
    rebuild them, and plain arrays; and one head's after - before."""
    from mha_viz.analysis.heads import attention_change, map_difference

    mask = np.ones((gpt2_model.info.n_layer, gpt2_model.info.n_head), dtype=np.float32)
    mask[0, 1] = 0
    before, after = gpt2_model.trace(TEXT), gpt2_model.trace(TEXT, head_mask=mask)
    a, b = before.attentions.astype(np.float64), after.attentions.astype(np.float64)
    expected = np.array([[np.mean([0.5 * sum(abs(b[l, h, i, j] - a[l, h, i, j])
                                             for j in range(a.shape[3]))
                                   for i in range(a.shape[2])])
                          for h in range(a.shape[1])] for l in range(a.shape[0])])
    assert expected[1:].max() > 1e-3 and expected[0].max() == 0  # layers above L0 moved
    np.testing.assert_allclose(attention_change(before, after), expected, atol=1e-6)
    np.testing.assert_allclose(attention_change(before.attentions, after.attentions),
                               expected, atol=1e-6)
    lazy_before = gpt2_model.trace(TEXT, maps="on_demand")
    lazy_after = gpt2_model.trace(TEXT, head_mask=mask, maps="on_demand")
    np.testing.assert_allclose(attention_change(lazy_before, lazy_after), expected, atol=1e-5)
    np.testing.assert_allclose(map_difference(lazy_before, lazy_after, 1, 0),
                               b[1, 0] - a[1, 0], atol=1e-6)
    with pytest.raises(InputError):
        attention_change(before.attentions, after.attentions[:1])
