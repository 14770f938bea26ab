"""Phi-3 (and Phi-3.5, Phi-4's text model): the Llama layout (pre-RMSNorm, rotary, SwiGLU,
grouped-query attention, no biases) with two of its projections stored fused: qkv_proj
holds W_Q, W_K, W_V as [Q; K; V] blocks, gate_up_proj the MLP's [gate; up], both already
our layout. A sliding_window, when the config gives one, masks every layer (as transformers
reads it). The long-context checkpoints' 'longrope' scaling is refused by name.

GGUF files (architecture phi3) keep the fusion: attn_qkv and ffn_up (gate and up); the
window, when attention.sliding_window gives one, masks every layer, as in llama.cpp. A file
with rope_factors_long / rope_factors_short (longrope) is refused."""

from __future__ import annotations

import dataclasses

from ...core.errors import UnsupportedModelError
from ...engine.config import StackConfig
from . import llama

NAME = "phi3"
MODEL_TYPES = ("phi3",)
GGUF_ARCHITECTURES = ("phi3",)
PREFIXES = ()


def config_from_hf(raw: dict) -> StackConfig:
    return dataclasses.replace(llama.config_from_hf(raw), qkv_names=("qkv_proj",))


def tensors_from_hf(source, config: StackConfig):
    layer = "model.layers.{i}."
    ours = llama.ends(source, config, "model.embed_tokens.weight", "model.norm.weight",
                      "lm_head.weight")
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", layer.format(i=i)
        for a, b in (("attn.qkv", "self_attn.qkv_proj"), ("attn.out", "self_attn.o_proj"),
                     ("ln_1", "input_layernorm"), ("ln_2", "post_attention_layernorm"),
                     ("mlp_in", "mlp.gate_up_proj"), ("mlp_out", "mlp.down_proj")):
            ours[f"{mine}{a}.weight"] = source.get(f"{theirs}{b}.weight")
    return config, ours


def config_from_gguf(meta: dict) -> StackConfig:
    return llama.gguf_config(meta, qkv_names=("attn_qkv",))


def tensors_from_gguf(source, config: StackConfig):
    if "rope_factors_long.weight" in source or "rope_factors_short.weight" in source:
        raise UnsupportedModelError("this Phi-3 GGUF rescales RoPE per frequency (longrope, "
                                    "its long-context variant), which mha-viz does not compute")
    config = llama.gguf_head_and_lm(source, config)
    ours = llama.ends(source, config, "token_embd.weight", "output_norm.weight", "output.weight")
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", f"blk.{i}."
        for a, b in (("attn.qkv", "attn_qkv"), ("attn.out", "attn_output"),
                     ("ln_1", "attn_norm"), ("ln_2", "ffn_norm"), ("mlp_in", "ffn_up"),
                     ("mlp_out", "ffn_down")):
            ours[f"{mine}{a}.weight"] = source.get(f"{theirs}{b}.weight")
    return config, ours
