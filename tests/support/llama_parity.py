"""Our Llama-family engine against transformers' own Llama, Qwen2 and Mistral (eager
attention) on one text: the shapes of the random checkpoints, transformers' model of a
folder, and the maps within 1e-5, the logits and the last hidden state within 1e-4."""

import numpy as np
import torch


ATTN_TOL = 1e-5
LOGITS_TOL = 1e-4
HIDDEN_TOL = 1e-4


# id -> make_llama_checkpoint arguments. Each case differs from plain Llama in one way that a
# Llama engine can get wrong; a theta of 100 turns the rotation fast enough that a RoPE
# mix-up (pairs interleaved vs split in halves, wrong frequencies) shows within a few tokens.
SHAPES = {
    "mha": dict(n_layer=2, n_head=4, n_kv_head=4, d_model=64),
    "gqa": dict(n_layer=2, n_head=6, n_kv_head=2, d_model=96, rope_theta=500000.0),
    "mqa_tied": dict(n_layer=2, n_head=4, n_kv_head=1, d_model=64, tie_word_embeddings=True),
    "odd_heads": dict(n_layer=3, n_head=5, n_kv_head=5, d_model=40, rope_theta=100.0),
    "gqa_9_3": dict(n_layer=1, n_head=9, n_kv_head=3, d_model=72, rope_theta=100.0),
    "head_dim": dict(n_layer=2, n_head=4, n_kv_head=2, d_model=64, d_head=24),
    "qwen2": dict(n_layer=2, n_head=4, n_kv_head=2, d_model=64, model_type="qwen2"),
    "qwen2_tied": dict(n_layer=1, n_head=6, n_kv_head=1, d_model=48, model_type="qwen2",
                       tie_word_embeddings=True),
    "mistral": dict(n_layer=2, n_head=6, n_kv_head=3, d_model=48, model_type="mistral"),
    # a sliding window shorter than the texts: on every layer (Mistral), on the layers from
    # max_window_layers up (Qwen2)
    "mistral_window": dict(n_layer=2, n_head=6, n_kv_head=3, d_model=48, model_type="mistral",
                           sliding_window=5),
    "qwen2_window": dict(n_layer=3, n_head=4, n_kv_head=2, d_model=64, model_type="qwen2",
                         sliding_window=4, max_window_layers=1),
    # long-context RoPE (Llama 3.1-3.3's llama3, linear, YaRN, dynamic NTK): a small original
    # context and theta, so that the rescaled frequencies differ within a few tokens
    "rope_llama3": dict(n_layer=2, n_head=4, n_kv_head=2, d_model=64, rope_theta=500.0,
                        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0,
                                          original_max_position_embeddings=64)),
    "rope_linear": dict(n_layer=1, n_head=4, n_kv_head=4, d_model=64, rope_theta=100.0,
                        rope_scaling=dict(rope_type="linear", factor=4.0)),
    "rope_yarn": dict(n_layer=2, n_head=4, n_kv_head=2, d_model=64, rope_theta=1000.0,
                      rope_scaling=dict(rope_type="yarn", factor=4.0,
                                        original_max_position_embeddings=64)),
    "rope_dynamic": dict(n_layer=1, n_head=4, n_kv_head=2, d_model=64, rope_theta=100.0,
                         rope_scaling=dict(rope_type="dynamic", factor=2.0)),
}


def reference_model(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()


def reference_run(ref, tokenizer, text):
    """(ids, attentions [L, H, T, T], logits [T, V], last hidden state [T, d]) from the
    reference; hidden_states[-1] of transformers' Llama is taken after the final RMSNorm."""
    encoded = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = ref(**encoded, output_attentions=True, output_hidden_states=True)
    attentions = torch.stack(out.attentions)[:, 0].numpy()
    return (encoded["input_ids"][0].tolist(), attentions, out.logits[0].numpy(),
            out.hidden_states[-1][0].numpy())


def assert_sharp(attentions):
    """The maps are far from uniform, so matching them means something: past the first few
    query positions (which see few keys), most rows put well over 1/(keys seen) on one key."""
    n = attentions.shape[-1]
    seen = np.arange(1, n + 1, dtype=np.float32)
    row_max = attentions.max(-1)[..., 4:]
    assert (row_max > 2.0 / seen[4:]).mean() > 0.6


def assert_parity(model, ref, text, tokenizer=None):
    """Ours vs the reference on one text; tokenizer: the reference's (default: ours)."""
    ids, ref_attn, ref_logits, ref_hidden = reference_run(ref, tokenizer or model.tokenizer, text)
    trace = model.trace(text)
    assert trace.token_ids == ids
    assert trace.attentions.dtype == np.float32
    assert trace.attentions.shape == ref_attn.shape  # every query head keeps its own map
    assert np.abs(trace.attentions - ref_attn).max() < ATTN_TOL
    logits = model.logits(text)
    assert logits.dtype == np.float32 and logits.shape == ref_logits.shape
    assert np.abs(logits - ref_logits).max() < LOGITS_TOL
    hidden = model.last_hidden_state(text)
    assert np.abs(hidden - ref_hidden).max() < HIDDEN_TOL
    assert_sharp(ref_attn)
    return trace
