"""Phi (Phi-1, Phi-1.5, Phi-2): pre-LayerNorm with one norm per layer that attention and MLP
both read, side by side (out = h + attn(LN h) + mlp(LN h)), rotary positions on the first
partial_rotary_factor of each head (rotate-half layout), a GELU MLP (fc1, fc2), biases on
every projection and on the LM head (read as a bias added to the logits), W_O named dense.
Phi's optional qk_layernorm (a LayerNorm of queries and keys, with a bias) is refused."""

from __future__ import annotations

from ...core.errors import UnsupportedModelError
from ...engine.config import StackConfig
from .llama import rope_settings

NAME = "phi"
MODEL_TYPES = ("phi",)
GGUF_ARCHITECTURES = ()
PREFIXES = ("model.",)


def config_from_hf(raw: dict) -> StackConfig:
    if raw.get("qk_layernorm"):
        raise UnsupportedModelError("Phi's qk_layernorm (a LayerNorm of each head's query and "
                                    "key, with a bias) is not supported")
    theta, fraction, scaling = rope_settings(
        {"partial_rotary_factor": 0.5, **raw})
    n_head = int(raw["num_attention_heads"])
    return StackConfig(
        model_type=NAME, n_layer=int(raw["num_hidden_layers"]), n_head=n_head,
        d_model=int(raw["hidden_size"]), d_ff=int(raw["intermediate_size"]),
        vocab_size=int(raw["vocab_size"]), max_positions=int(raw["max_position_embeddings"]),
        layer_norm_eps=float(raw.get("layer_norm_eps", 1e-5)),
        activation=raw.get("hidden_act", "gelu_new"), norm="layernorm", pre_norm=True,
        causal=True, positions="rotary", rope_theta=theta, rotary_fraction=fraction,
        rope_scaling=scaling, n_kv_head=int(raw.get("num_key_value_heads") or n_head),
        qkv_bias=True, out_bias=True, mlp_bias=True, parallel_residual=True,
        qkv_names=("q_proj", "k_proj", "v_proj"), lm_head="separate", logits_bias=True)


def tensors_from_hf(source, config: StackConfig):
    ours = {"tok_emb.weight": source.get("embed_tokens.weight"),
            **source.weight_and_bias("final_ln", "final_layernorm"),
            "lm_head.weight": source.get("lm_head.weight"),
            "logits_bias": source.get("lm_head.bias")}
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", f"layers.{i}."
        attn = theirs + "self_attn."
        ours.update(source.qkv(mine, attn + "{}_proj", bias=True))
        # one norm read by attention and MLP alike: ours has one for each, equal
        for a, b in (("attn.out", attn + "dense"), ("ln_1", theirs + "input_layernorm"),
                     ("ln_2", theirs + "input_layernorm"), ("mlp_in", theirs + "mlp.fc1"),
                     ("mlp_out", theirs + "mlp.fc2")):
            ours.update(source.weight_and_bias(mine + a, b))
    return config, ours
