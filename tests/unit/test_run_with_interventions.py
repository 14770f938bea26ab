"""run_with_interventions against forward hooks written here on transformers' GPT-2 and
Llama (grouped-query), same random weights: a set of heads patched together, a head
mean-ablated and resample-ablated over a reference set, zero and a given value; the caches
of the intervened run; the messages."""

import random

import numpy as np
import pytest
import torch
from tests.support.hf_reference import (capture_input, head_outputs, hf_metric, hooked, ids_of,
                                        logits_with_heads_replaced, reference_prompts,
                                        replace_input, take)

from mha_viz import TargetMetric
from mha_viz.analysis.patching import Intervention, heads_replaced, run_with_interventions
from mha_viz.analysis.prompts import PromptPair
from mha_viz.core.errors import InputError

TOL = 2e-3
HEADS = [(0, 1), (0, 3), (1, 0), (1, 2)]  # across layers: patched together


def logit_diff(logits, target, contrast):
    return float(logits[target] - logits[contrast])


@pytest.fixture(params=["gpt2", "llama"])
def setting(request, patch_models, patch_prompts):
    model, hf, where = patch_models[request.param]
    clean, corrupted, target, contrast = patch_prompts[request.param]
    pair = PromptPair(clean, corrupted, target, contrast)
    return model, hf, where(hf), pair


def test_heads_patched_together_equal_hooks(setting):
    model, hf, where, pair = setting
    clean_ids, corr_ids = ids_of(model, pair.clean), ids_of(model, pair.corrupted)
    other = head_outputs(hf, where, [corr_ids], {l for l, _ in HEADS})
    replaced = {(l, h): other[l][0, :, h * where.dk:(h + 1) * where.dk] for l, h in HEADS}
    expected = logit_diff(logits_with_heads_replaced(hf, where, clean_ids, replaced),
                          pair.target, pair.contrast)
    result = run_with_interventions(model, [pair], heads_replaced(HEADS, "other"), "logit_diff")
    assert abs(result.values[0] - expected) < TOL
    # one head alone, and the clean and corrupted runs' own metrics
    one = run_with_interventions(model, [pair], [Intervention("z", 1, 2)], "logit_diff")
    alone = logit_diff(logits_with_heads_replaced(hf, where, clean_ids, {(1, 2): replaced[1, 2]}),
                       pair.target, pair.contrast)
    assert abs(one.values[0] - alone) < TOL
    assert abs(one.clean[0] - hf_metric(hf, clean_ids, pair.target, pair.contrast)) < TOL
    assert abs(one.corrupted[0] - hf_metric(hf, corr_ids, pair.target, pair.contrast)) < TOL


def test_mean_and_resample_ablation_equal_hooks(setting):
    model, hf, where, pair = setting
    layer, head = 1, 2
    cols = slice(head * where.dk, (head + 1) * where.dk)
    references = reference_prompts(model, pair.clean)
    ref_ids = [ids_of(model, text) for text in references]
    ref_z = head_outputs(hf, where, ref_ids, [layer])[layer][:, :, cols]  # [R, T, d_k]
    clean_ids = ids_of(model, pair.clean)
    mean_value = logit_diff(logits_with_heads_replaced(hf, where, clean_ids, {
        (layer, head): ref_z.mean(0)}), pair.target, pair.contrast)
    mean = run_with_interventions(model, [pair], [Intervention("z", layer, head, value="mean")],
                                  "logit_diff", reference=references)
    assert abs(mean.values[0] - mean_value) < TOL
    # resampling: pair i takes reference prompt random.Random(f"{seed}:{i}").randrange(R)'s
    # activation (the draw docs/analyses.md states: seeded, whatever the batching)
    each = [logit_diff(logits_with_heads_replaced(hf, where, clean_ids, {(layer, head): z}),
                       pair.target, pair.contrast) for z in ref_z]
    resampled = run_with_interventions(model, [pair] * 8,
                                       [Intervention("z", layer, head, value="resample")],
                                       "logit_diff", reference=ref_ids, seed=3)
    drawn = [random.Random(f"3:{i}").randrange(len(ref_ids)) for i in range(8)]
    assert len(set(drawn)) > 1  # the pairs draw different prompts
    np.testing.assert_allclose(resampled.values, [each[d] for d in drawn], atol=TOL)
    again = run_with_interventions(model, [pair] * 8,
                                   [Intervention("z", layer, head, value="resample")],
                                   "logit_diff", reference=ref_ids, seed=3)
    assert np.array_equal(again.values, resampled.values)
    # zero, and a value given
    zero = logit_diff(logits_with_heads_replaced(hf, where, clean_ids, {
        (layer, head): torch.zeros(len(clean_ids), where.dk)}), pair.target, pair.contrast)
    ours = run_with_interventions(model, [pair], [Intervention("z", layer, head, value="zero")],
                                  "logit_diff")
    assert abs(ours.values[0] - zero) < TOL
    given = run_with_interventions(model, [pair], [Intervention("z", layer, head, value=0.0)],
                                   "logit_diff")
    assert abs(given.values[0] - zero) < TOL


def test_one_position_and_a_whole_layer(setting):
    model, hf, where, pair = setting
    clean_ids, corr_ids = ids_of(model, pair.clean), ids_of(model, pair.corrupted)
    layer = 1
    other = head_outputs(hf, where, [corr_ids], [layer])[layer][0]
    position = len(clean_ids) - 1
    at_last = {}
    for head in range(where.n_head):
        value = head_outputs(hf, where, [clean_ids], [layer])[layer][0, :,
                                                                        head * where.dk:
                                                                        (head + 1) * where.dk]
        value[position] = other[position, head * where.dk:(head + 1) * where.dk]
        at_last[(layer, head)] = value
    expected = logit_diff(logits_with_heads_replaced(hf, where, clean_ids, at_last),
                          pair.target, pair.contrast)
    whole_layer = run_with_interventions(model, [pair], [Intervention("z", layer, None,
                                                                      position)], "logit_diff")
    assert abs(whole_layer.values[0] - expected) < TOL
    # the stream entering a layer at one position: the corrupted run's, in the clean run
    stream = run_with_interventions(model, [pair], [Intervention("resid_pre", 1, None, 3)],
                                    "logit_diff")
    entering = {}
    with hooked([capture_input(where.block(1), entering, "x")]):
        hf_metric(hf, corr_ids, pair.target, pair.contrast)
    with hooked([replace_input(where.block(1), take(entering["x"], (slice(None), 3)))]):
        expected = hf_metric(hf, clean_ids, pair.target, pair.contrast)
    assert abs(stream.values[0] - expected) < TOL


def test_the_cache_of_the_intervened_run(patch_models, patch_prompts):
    model, _, _ = patch_models["gpt2"]
    clean, corrupted, target, contrast = patch_prompts["gpt2"]
    result = run_with_interventions(model, (clean, corrupted),
                                    [Intervention("hook_z", 0, 1, value="zero")],
                                    TargetMetric(-1, target, contrast), cache=["z", "attn_out"])
    z = result.caches[0]["blocks.0.attn.hook_z"]  # TransformerLens's layout [1, T, H, d_k]
    assert torch.count_nonzero(z[0, :, 1]) == 0 and torch.count_nonzero(z[0, :, 0]) > 0
    _, plain = model.run_with_cache(clean, names=["attn_out", "z"])
    assert torch.equal(z[0, :, 0], plain["z", 0][0, :, 0])  # the other heads keep theirs
    assert not torch.allclose(result.caches[0]["attn_out", 0], plain["attn_out", 0])
    assert not torch.allclose(result.caches[0]["z", 1], plain["z", 1])  # later layers change


def test_messages(patch_models, patch_prompts):
    model, _, _ = patch_models["llama"]
    clean, corrupted, target, contrast = patch_prompts["llama"]
    pair = [PromptPair(clean, corrupted, target, contrast)]
    for entry, message in ((Intervention("z", 9, 0), "not a layer"),
                           (Intervention("z", 0, 99), "not one of"),
                           (Intervention("resid_pre", 0, 1), "give no head"),
                           (Intervention("z", 0, 0, value="median"), "value must be"),
                           (Intervention("z", 0, 0, 99), "outside"),
                           (Intervention("nothing", 0, 0), "component must be")):
        with pytest.raises(InputError, match=message):
            run_with_interventions(model, pair, [entry], "logit_diff")
    with pytest.raises(InputError, match="no reference prompt has"):
        run_with_interventions(model, pair, [Intervention("z", 0, 0, value="mean")],
                               "logit_diff", reference=["a b"])
    with pytest.raises(InputError, match="mixes"):
        run_with_interventions(model, pair, [Intervention("k", 0, 0),
                                             Intervention("shared_k", 0, 0)], "logit_diff")
