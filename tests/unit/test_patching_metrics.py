"""Metrics as functions and one vocabulary (issue 43): a function equal to a built-in metric
gives the built-in's numbers in every method; run_with_cache's point names and TransformerLens's
hook names name the same components; token-id pairs are the texts' pairs; metrics that cannot
serve get clear messages."""

import numpy as np
import pytest
import torch
from tests.support.hf_reference import ids_of, target_metric
from torch.nn import functional as F

from mha_viz import TargetMetric
from mha_viz.analysis import strongest_components
from mha_viz.analysis.patching import (Metric, activation_patching, attribution_patching,
                                       kl_divergence, path_patching, prepare_pairs)
from mha_viz.analysis.prompts import PromptPair
from mha_viz.core.errors import InputError


def own_logit_diff(logits, rows):
    """The logit difference written by a user, from the full logits."""
    index = torch.arange(logits.shape[0])
    return logits[index, rows.target] - logits[index, rows.contrast]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("method", ["exact", "path", "attribution"])
def test_a_function_equal_to_the_logit_difference_gives_the_same_arrays(patch_models,
                                                                       patch_prompts, family,
                                                                       method):
    model, _, _ = patch_models[family]
    clean, corrupted, target, contrast = patch_prompts[family]
    run = {"exact": activation_patching, "path": path_patching,
           "attribution": attribution_patching}[method]
    built_in = run(model, clean, corrupted, target_metric(patch_prompts[family]))
    own = Metric(own_logit_diff, "my logit difference", needs_target=True, needs_contrast=True)
    # one spelling for one pair and many: a TargetMetric whose kind is the function, and the
    # function alone with PromptPairs
    mine = run(model, clean, corrupted, TargetMetric(-1, target, contrast, own))
    pairs = run(model, [PromptPair(clean, corrupted, target, contrast)], metric=own)
    for result in (mine, pairs):
        assert np.abs(result.values - built_in.values).max() < 1e-4
        assert abs(result.clean - built_in.clean) < 1e-4
        assert abs(result.corrupted - built_in.corrupted) < 1e-4
    assert "my logit difference" in mine.metric


def test_kl_divergence_equals_hooks_on_gpt2(patch_models, patch_prompts):
    """KL(clean ‖ patched) for every head, against forward hooks on transformers' GPT-2."""
    from tests.support.hf_reference import capture_input, hooked, replace_input, take

    model, hf, where = patch_models["gpt2"]
    where = where(hf)
    clean, corrupted, _, _ = patch_prompts["gpt2"]
    clean_ids, corr_ids = ids_of(model, clean), ids_of(model, corrupted)
    store = {}
    with torch.no_grad():
        with hooked([capture_input(where.out_proj(l), store, l) for l in range(where.n_layer)]):
            clean_logp = F.log_softmax(hf(torch.tensor([clean_ids])).logits[0, -1], -1)
        expected = np.zeros((where.n_layer, where.n_head))
        for layer in range(where.n_layer):
            for head in range(where.n_head):
                swap = take(store[layer], (..., slice(head * where.dk, (head + 1) * where.dk)))
                with hooked([replace_input(where.out_proj(layer), swap)]):
                    logp = F.log_softmax(hf(torch.tensor([corr_ids])).logits[0, -1], -1)
                expected[layer, head] = float((clean_logp.exp() * (clean_logp - logp)).sum())
    result = activation_patching(model, clean, corrupted, kl_divergence)
    assert np.abs(result.values - expected).max() < 1e-4
    assert abs(result.clean) < 1e-5 and result.corrupted > 0


def test_names_of_run_with_cache_and_transformer_lens_are_components(patch_models,
                                                                     patch_prompts):
    model, _, _ = patch_models["llama"]
    clean, corrupted, _, _ = patch_prompts["llama"]
    metric = target_metric(patch_prompts["llama"])
    head = activation_patching(model, clean, corrupted, metric, component="head")
    for name in ("z", "hook_z", "attn.hook_z", "blocks.0.attn.hook_z"):
        same = activation_patching(model, clean, corrupted, metric, component=name)
        assert np.array_equal(same.values, head.values), name
    stream = activation_patching(model, clean, corrupted, metric, component="resid_pre")
    hooked = activation_patching(model, clean, corrupted, metric, component="hook_resid_pre")
    assert np.array_equal(stream.values, hooked.values)
    # the stream leaving layer l is the stream entering layer l + 1
    post = activation_patching(model, clean, corrupted, metric, component="resid_post")
    assert np.abs(post.values[:-1] - stream.values[1:]).max() < 1e-5
    mid = activation_patching(model, clean, corrupted, metric, component="resid_mid")
    assert mid.values.shape == stream.values.shape
    with pytest.raises(InputError, match="hook_z"):
        activation_patching(model, clean, corrupted, metric, component="hook_nothing")


def test_token_id_pairs_are_the_texts_pairs(patch_models, patch_prompts):
    model, _, _ = patch_models["gpt2"]
    clean, corrupted, target, contrast = patch_prompts["gpt2"]
    metric = target_metric(patch_prompts["gpt2"])
    texts = activation_patching(model, clean, corrupted, metric)
    clean_ids, corr_ids = ids_of(model, clean), ids_of(model, corrupted)
    for spelling in ((clean_ids, corr_ids), (torch.tensor(clean_ids), np.array(corr_ids)),
                     ([(clean_ids, corr_ids)], None), ([clean_ids], [corr_ids])):
        ids = activation_patching(model, *spelling, metric=metric)
        assert np.array_equal(ids.values, texts.values)
    pair = activation_patching(model, [PromptPair(tuple(clean_ids), tuple(corr_ids), target,
                                                  contrast)], metric="logit_diff")
    assert np.array_equal(pair.values, texts.values)
    with pytest.raises(InputError, match="token ids"):
        activation_patching(model, clean_ids, corrupted, metric)
    with pytest.raises(InputError, match="token ids must lie"):
        activation_patching(model, clean_ids, [10**9] * len(clean_ids), metric)


def test_a_metric_without_target_needs_none_and_a_bad_metric_is_named(patch_models,
                                                                      patch_prompts):
    model, hf, _ = patch_models["gpt2"]
    clean, corrupted, target, contrast = patch_prompts["gpt2"]
    # KL reads no target: two texts need no TargetMetric
    result = activation_patching(model, clean, corrupted, kl_divergence)
    assert np.isfinite(result.values).all()
    with pytest.raises(InputError, match="TargetMetric"):
        activation_patching(model, clean, corrupted, "logit_diff")  # reads a target: say how
    with pytest.raises(InputError, match="one number per row"):
        activation_patching(model, clean, corrupted, lambda logits, rows: logits)
    rounded = Metric(lambda logits, rows: torch.tensor(
        logits[:, 0].detach().tolist()), "rounded")
    with pytest.raises(InputError, match="not differentiable"):
        attribution_patching(model, clean, corrupted, rounded)
    with pytest.raises(InputError, match="a Metric or a function"):
        activation_patching(model, clean, corrupted, 3)
    # the clean metric a function reports is the model's own
    probability = activation_patching(model, clean, corrupted, TargetMetric(
        -1, target, contrast, lambda logits, rows: F.softmax(logits, -1).gather(
            1, rows.target[:, None])[:, 0]))
    with torch.no_grad():
        logits = hf(torch.tensor([ids_of(model, clean)])).logits[0, -1]
    assert probability.clean == pytest.approx(float(F.softmax(logits, -1)[target]), abs=1e-5)


def test_strongest_components_is_exported(patch_models, patch_prompts):
    model, _, _ = patch_models["gpt2"]
    clean, corrupted, _, _ = patch_prompts["gpt2"]
    result = activation_patching(model, clean, corrupted, target_metric(patch_prompts["gpt2"]))
    top = strongest_components(result, 3)
    assert len(top) == 3 and abs(top[0][1]) >= abs(top[1][1]) >= abs(top[2][1])
    assert prepare_pairs(model, clean, corrupted, kl_divergence).kind == "function"
