"""Our engine against transformers' own GPT-2 and BERT (eager attention) on one text: the
three parity texts (the odd-Unicode one included), transformers' model of a checkpoint
folder, and the maps within 1e-5 and the last hidden state within 1e-4."""

import numpy as np
import torch


ATTN_TOL = 1e-5
HIDDEN_TOL = 1e-4


TEXTS = [
    "The animal didn't cross the street because it was too tired.",
    "Mary and John went to the store. John gave a drink to Mary. " * 3,
    "naïve café — 3.14 ≠ π; emoji 🙂 and 中文 tokens\tand a tab",
]


def reference_model(folder, arch, mlm):
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

    cls = AutoModelForCausalLM if arch == "gpt2" else (AutoModelForMaskedLM if mlm else AutoModel)
    return cls.from_pretrained(str(folder), attn_implementation="eager").eval()


def reference_run(ref, model, text, text_pair=None):
    encoded = model.tokenizer(text, text_pair, return_tensors="pt")
    with torch.no_grad():
        out = ref(**encoded, output_attentions=True, output_hidden_states=True)
    attentions = torch.stack(out.attentions)[:, 0].numpy()
    return encoded["input_ids"][0].tolist(), attentions, out.hidden_states[-1][0].numpy()


def assert_parity(model, ref, text, text_pair=None):
    ids, ref_attn, ref_hidden = reference_run(ref, model, text, text_pair)
    trace = model.trace(text, text_pair=text_pair)
    assert trace.token_ids == ids
    assert trace.attentions.dtype == np.float32
    assert trace.attentions.shape == ref_attn.shape
    assert np.abs(trace.attentions - ref_attn).max() < ATTN_TOL
    hidden = model.last_hidden_state(text, text_pair)
    assert np.abs(hidden - ref_hidden).max() < HIDDEN_TOL
    # the maps are not trivially uniform: the comparison means something
    assert trace.attentions.max() > 2.0 / trace.n_tokens
