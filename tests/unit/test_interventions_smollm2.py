"""Interventions on the real SmolLM2 (bundled) against forward hooks written here on
transformers' LlamaForCausalLM read from the same GGUF: a metric of the user's own (the KL
divergence to the clean distribution) in activation patching."""

import numpy as np
import pytest
import test_smollm2
import torch
from hf_reference import LlamaHooks, capture_input, hooked, replace_input, take
from torch.nn import functional as F

from mha_viz.analysis.patching import activation_patching, kl_divergence

pytestmark = pytest.mark.slow
# test_smollm2's module fixtures: our SmolLM2 and transformers' Llama from the same GGUF
gguf_folder, reference, smollm2 = (test_smollm2.gguf_folder, test_smollm2.reference,
                                   test_smollm2.smollm2)

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
