"""Interventions on the real SmolLM2 (bundled) against forward hooks written here on
transformers' LlamaForCausalLM read from the same GGUF: a metric of the user's own (the KL
divergence to the clean distribution) in activation patching; heads patched together, and a
head mean-ablated and resample-ablated over reference prompts, by run_with_interventions."""

import numpy as np
import pytest
import torch
from tests.support.hf_reference import (LlamaHooks, capture_input, head_outputs, hooked,
                                        logits_with_heads_replaced, replace_input, take)
from tests.support.smollm2 import gguf_folder, reference, smollm2  # noqa: F401
from torch.nn import functional as F

from mha_viz.analysis.patching import (Intervention, activation_patching, heads_replaced,
                                       kl_divergence, run_with_interventions)
from mha_viz.analysis.prompts import PromptPair

pytestmark = pytest.mark.slow

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
LAYERS = (17, 20, 23, 24)  # the indirect-object heads' layers (docs/ioi.md)


def hf_last_log_probs(hf, ids, hooks=()):
    with torch.no_grad(), hooked(list(hooks)):
        return F.log_softmax(hf(torch.tensor([ids])).logits[0, -1].double(), -1)


def test_kl_divergence_patching_equals_hooks(smollm2, reference):
    hf = reference[0]
    where = LlamaHooks(hf)
    clean_ids = smollm2.encode(CLEAN).input_ids
    corr_ids = smollm2.encode(CORRUPTED).input_ids
    store = {}
    clean_logp = hf_last_log_probs(hf, clean_ids, [capture_input(where.out_proj(l), store, l)
                                                   for l in LAYERS])
    result = activation_patching(smollm2, CLEAN, CORRUPTED, kl_divergence)
    for layer in LAYERS:
        for head in range(where.n_head):
            swap = take(store[layer], (..., slice(head * where.dk, (head + 1) * where.dk)))
            logp = hf_last_log_probs(hf, corr_ids, [replace_input(where.out_proj(layer), swap)])
            expected = float((clean_logp.exp() * (clean_logp - logp)).sum())
            assert result.values[layer, head] == pytest.approx(expected, abs=2e-3, rel=2e-3), (
                layer, head)
    corrupted = float((clean_logp.exp() * (clean_logp - hf_last_log_probs(hf, corr_ids))).sum())
    assert result.corrupted == pytest.approx(corrupted, abs=2e-3, rel=2e-3)
    assert abs(result.clean) < 1e-5
    assert np.isfinite(result.normalized).all()


# three indirect-object prompts with other names, places and objects, of the same 14 tokens
REFERENCE = ["When Tom and James went to the park, Paul gave a book to",
             "When Anna and Sarah went to the office, Lisa gave a ring to",
             "When Peter and Emma went to the garden, Jack gave a letter to"]
IOI_HEADS = [(17, 4), (20, 0), (23, 0), (23, 3), (24, 4)]


def test_heads_together_mean_and_resample_ablation_equal_hooks(smollm2, reference):
    hf = reference[0]
    where = LlamaHooks(hf)
    pair = PromptPair(CLEAN, CORRUPTED, " Mary", " John")
    mary, john = smollm2.token_id(" Mary"), smollm2.token_id(" John")
    clean_ids = smollm2.encode(CLEAN).input_ids
    ref_ids = [smollm2.encode(text).input_ids for text in REFERENCE]
    assert {len(ids) for ids in ref_ids} == {len(clean_ids)}

    def diff(replaced):
        logits = logits_with_heads_replaced(hf, where, clean_ids, replaced)
        return float(logits[mary] - logits[john])

    def z_of(outputs, layer, head):
        return outputs[layer][:, :, head * where.dk:(head + 1) * where.dk]
    layers = {l for l, _ in IOI_HEADS}
    corrupted = head_outputs(hf, where, [smollm2.encode(CORRUPTED).input_ids], layers)
    together = run_with_interventions(smollm2, [pair], heads_replaced(IOI_HEADS, "other"),
                                      "logit_diff")
    expected = diff({(l, h): z_of(corrupted, l, h)[0] for l, h in IOI_HEADS})
    assert together.values[0] == pytest.approx(expected, abs=2e-3)
    refs = head_outputs(hf, where, ref_ids, layers)
    mean = run_with_interventions(smollm2, [pair], heads_replaced(IOI_HEADS, "mean"),
                                  "logit_diff", reference=REFERENCE)
    expected = diff({(l, h): z_of(refs, l, h).mean(0) for l, h in IOI_HEADS})
    assert mean.values[0] == pytest.approx(expected, abs=2e-3)
    layer, head = 23, 3
    each = [diff({(layer, head): z}) for z in z_of(refs, layer, head)]
    resampled = run_with_interventions(smollm2, [pair] * 4,
                                       [Intervention("z", layer, head, value="resample")],
                                       "logit_diff", reference=REFERENCE)
    for value in resampled.values:
        assert min(abs(value - e) for e in each) < 2e-3
    assert len({round(float(v), 4) for v in resampled.values}) > 1
