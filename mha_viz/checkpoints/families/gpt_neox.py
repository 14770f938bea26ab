"""GPT-NeoX (every Pythia model, GPT-NeoX-20B): pre-LayerNorm, causal, attention and MLP in
parallel (both read the layer's input, use_parallel_residual), rotary positions on the first
rotary_pct of each head (rotate-half layout), GELU MLP, biases everywhere, W_Q, W_K, W_V
fused head by head in query_key_value ([q_h; k_h; v_h] for each head in turn: reordered here
into our Q, K, V blocks), a separate unembedding (embed_out).

GGUF files (architecture gptneox): llama.cpp's converter stores attn_qkv already as [Q; K; V]
blocks, LayerNorms with biases, use_parallel_residual under its own key."""

from __future__ import annotations

import dataclasses

import torch

from ...engine.config import StackConfig
from .llama import ends, gguf_config, gguf_head_and_lm

NAME = "gpt_neox"
MODEL_TYPES = ("gpt_neox",)
GGUF_ARCHITECTURES = ("gptneox",)
PREFIXES = ("gpt_neox.",)


def config_from_hf(raw: dict) -> StackConfig:
    params = raw.get("rope_parameters") or {}
    theta = params.get("rope_theta", raw.get("rotary_emb_base", 10000.0))
    fraction = params.get("partial_rotary_factor", raw.get("rotary_pct", 0.25))
    bias = bool(raw.get("attention_bias", True))
    return StackConfig(
        model_type=NAME, n_layer=int(raw["num_hidden_layers"]),
        n_head=int(raw["num_attention_heads"]),
        d_model=int(raw["hidden_size"]), d_ff=int(raw["intermediate_size"]),
        vocab_size=int(raw["vocab_size"]), max_positions=int(raw["max_position_embeddings"]),
        layer_norm_eps=float(raw.get("layer_norm_eps", 1e-5)),
        activation=raw.get("hidden_act", "gelu"), norm="layernorm", pre_norm=True, causal=True,
        positions="rotary", rope_theta=float(theta), rotary_fraction=float(fraction),
        qkv_bias=bias, out_bias=bias, mlp_bias=True,
        parallel_residual=bool(raw.get("use_parallel_residual", True)),
        qkv_names=("query_key_value",), qkv_per_head=True,
        lm_head="tied" if raw.get("tie_word_embeddings", False) else "separate")


def _unfused(tensor: torch.Tensor | None, config: StackConfig) -> torch.Tensor | None:
    """query_key_value's rows (or bias) [3 d, ...] head by head -> our [Q; K; V] blocks."""
    if tensor is None:
        return None
    per_head = tensor.reshape(config.n_head, 3, config.d_head, *tensor.shape[1:])
    return per_head.transpose(0, 1).reshape(tensor.shape)


def tensors_from_hf(source, config: StackConfig):
    ours = {"tok_emb.weight": source.get("embed_in.weight"),
            "final_ln.weight": source.get("final_layer_norm.weight"),
            "final_ln.bias": source.get("final_layer_norm.bias")}
    if config.lm_head == "separate":
        ours["lm_head.weight"] = source.get("embed_out.weight")
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", f"layers.{i}."
        for a, b in (("ln_1", "input_layernorm"), ("ln_2", "post_attention_layernorm")):
            ours[f"{mine}{a}.weight"] = source.get(f"{theirs}{b}.weight")
            ours[f"{mine}{a}.bias"] = source.get(f"{theirs}{b}.bias")
        ours[f"{mine}attn.qkv.weight"] = _unfused(
            source.get(f"{theirs}attention.query_key_value.weight"), config)
        if config.qkv_bias:
            ours[f"{mine}attn.qkv.bias"] = _unfused(
                source.get(f"{theirs}attention.query_key_value.bias"), config)
        ours[f"{mine}attn.out.weight"] = source.get(f"{theirs}attention.dense.weight")
        if config.out_bias:
            ours[f"{mine}attn.out.bias"] = source.get(f"{theirs}attention.dense.bias")
        for a, b in (("mlp_in", "mlp.dense_h_to_4h"), ("mlp_out", "mlp.dense_4h_to_h")):
            ours[f"{mine}{a}.weight"] = source.get(f"{theirs}{b}.weight")
            ours[f"{mine}{a}.bias"] = source.get(f"{theirs}{b}.bias")
    return config, ours


def config_from_gguf(meta: dict) -> StackConfig:
    key = lambda name: f"gptneox.{name}"  # noqa: E731
    return gguf_config(
        meta, model_type=NAME, norm="layernorm", activation="gelu", gated_mlp=False,
        layer_norm_eps=float(meta.get(key("attention.layer_norm_epsilon"), 1e-5)),
        qkv_bias=True, out_bias=True, mlp_bias=True, qkv_names=("attn_qkv",),
        parallel_residual=bool(meta.get(key("use_parallel_residual"), True)))


def tensors_from_gguf(source, config: StackConfig):
    config = gguf_head_and_lm(source, config)
    config = dataclasses.replace(config, qkv_bias="blk.0.attn_qkv.bias" in source,
                                 out_bias="blk.0.attn_output.bias" in source)
    ours = ends(source, config, "token_embd.weight", "output_norm.weight", "output.weight")
    ours["final_ln.bias"] = source.get("output_norm.bias")
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", f"blk.{i}."
        for a, b in (("ln_1", "attn_norm"), ("ln_2", "ffn_norm"), ("attn.qkv", "attn_qkv"),
                     ("attn.out", "attn_output"), ("mlp_in", "ffn_up"), ("mlp_out", "ffn_down")):
            ours[f"{mine}{a}.weight"] = source.get(f"{theirs}{b}.weight")
            if a.startswith(("ln", "mlp")) or config.qkv_bias and a == "attn.qkv" \
                    or config.out_bias and a == "attn.out":
                ours[f"{mine}{a}.bias"] = source.get(f"{theirs}{b}.bias")
    return config, ours
