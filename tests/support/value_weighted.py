"""transformers' own models, read for value-weighted maps (issue 49): where each family keeps
W_V, b_V and W_O, the heads' input captured with a hook, and the definition written as a plain
loop over layers, heads, queries and keys (Kobayashi et al. 2020)."""

from __future__ import annotations

import numpy as np
import torch


def as_numpy(tensor):
    return tensor.detach().double().numpy()


def gpt2_parts(hf, layer):
    attn = hf.transformer.h[layer].attn
    d, n_head = hf.config.n_embd, hf.config.n_head
    d_k = d // n_head
    w = as_numpy(attn.c_attn.weight)[:, 2 * d:].T.reshape(n_head, d_k, d)  # Conv1D: x @ W
    b = as_numpy(attn.c_attn.bias)[2 * d:].reshape(n_head, d_k)
    return attn, w, b, as_numpy(attn.c_proj.weight).T, as_numpy(attn.c_proj.bias)


def bert_parts(hf, layer):
    block = hf.bert.encoder.layer[layer].attention
    n_head = hf.config.num_attention_heads
    d = hf.config.hidden_size
    w = as_numpy(block.self.value.weight).reshape(n_head, d // n_head, d)
    b = as_numpy(block.self.value.bias).reshape(n_head, d // n_head)
    return block.self, w, b, as_numpy(block.output.dense.weight), as_numpy(block.output.dense.bias)


def llama_parts(hf, layer):  # Llama and Gemma 2: v_proj, o_proj, grouped key/value heads
    attn = hf.model.layers[layer].self_attn
    config = hf.config
    d_k, n_kv = config.head_dim, config.num_key_value_heads
    w = as_numpy(attn.v_proj.weight).reshape(n_kv, d_k, config.hidden_size)
    b = (np.zeros((n_kv, d_k)) if attn.v_proj.bias is None
         else as_numpy(attn.v_proj.bias).reshape(n_kv, d_k))
    out_bias = None if attn.o_proj.bias is None else as_numpy(attn.o_proj.bias)
    return attn, w, b, as_numpy(attn.o_proj.weight), out_bias


def hf_run(hf, parts, ids):
    """(alpha [L, H, T, T], x [L, T, d], W_V, b_V, W_O per layer) from transformers: x is what
    each attention module reads (its first input, captured by a hook here)."""
    n_layer = hf.config.num_hidden_layers
    read = {}

    def keep(layer):
        def hook(module, args, kwargs):
            read[layer] = (args[0] if args else kwargs["hidden_states"])[0].detach().double()
        return hook

    layers = [parts(hf, layer) for layer in range(n_layer)]
    handles = [attn.register_forward_pre_hook(keep(layer), with_kwargs=True)
               for layer, (attn, *_) in enumerate(layers)]
    try:
        with torch.no_grad():
            out = hf(torch.tensor([ids]), output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    alpha = np.stack([as_numpy(a[0]) for a in out.attentions])
    x = np.stack([read[layer].numpy() for layer in range(n_layer)])
    return alpha, x, layers


def loop_value_weighted(alpha, x, layers):
    """The definition, one (layer, head, query, key) at a time."""
    n_layer, n_head, n_tokens, _ = alpha.shape
    out = np.zeros(alpha.shape)
    for layer in range(n_layer):
        _, w_v, b_v, w_o, _ = layers[layer]
        d_k = w_v.shape[1]
        for head in range(n_head):
            kv = head // (n_head // w_v.shape[0])  # the key/value head it reads
            for key in range(n_tokens):
                sent = w_o[:, head * d_k:(head + 1) * d_k] @ (w_v[kv] @ x[layer, key] + b_v[kv])
                norm = np.sqrt(np.sum(sent * sent))
                for query in range(n_tokens):
                    out[layer, head, query, key] = alpha[layer, head, query, key] * norm
    return out


def check_close(ours, reference):
    """float32 against the float64 loop: 1e-5 of each value (and of the largest one, for
    values near 0)."""
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-6 * np.abs(reference).max())
