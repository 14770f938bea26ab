"""Phi-3 (and Phi-3.5, Phi-4's text model): the Llama layout (pre-RMSNorm, rotary, SwiGLU,
grouped-query attention, no biases) with two of its projections stored fused: qkv_proj
holds W_Q, W_K, W_V as [Q; K; V] blocks, gate_up_proj the MLP's [gate; up], both already
our layout. A sliding_window, when the config gives one, masks every layer (as transformers
reads it). The long-context checkpoints' 'longrope' scaling is refused by name."""

from __future__ import annotations

import dataclasses

from ...engine.config import StackConfig
from . import llama

NAME = "phi3"
MODEL_TYPES = ("phi3",)
GGUF_ARCHITECTURES = ()
PREFIXES = ()


def config_from_hf(raw: dict) -> StackConfig:
    return dataclasses.replace(llama.config_from_hf(raw), qkv_names=("qkv_proj",))


def tensors_from_hf(source, config: StackConfig):
    layer = "model.layers.{i}."
    ours = {"tok_emb.weight": source.get("model.embed_tokens.weight"),
            "final_ln.weight": source.get("model.norm.weight")}
    if config.lm_head == "separate":
        ours["lm_head.weight"] = source.get("lm_head.weight")
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", layer.format(i=i)
        for a, b in (("attn.qkv", "self_attn.qkv_proj"), ("attn.out", "self_attn.o_proj"),
                     ("ln_1", "input_layernorm"), ("ln_2", "post_attention_layernorm"),
                     ("mlp_in", "mlp.gate_up_proj"), ("mlp_out", "mlp.down_proj")):
            ours[f"{mine}{a}.weight"] = source.get(f"{theirs}{b}.weight")
    return config, ours
