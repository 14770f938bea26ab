"""Mixtral (Mixtral-8x7B, 8x22B): Mistral's attention (rotary, grouped-query, the sliding
window when the config gives one) and norms, with a mixture-of-experts MLP in each layer:
num_local_experts SwiGLU experts, num_experts_per_tok of them picked per token by a router
(engine/experts.py). Read from the checkpoints' own names (block_sparse_moe.gate, and each
expert's w1 = gate, w3 = up, w2 = down) or from transformers 5's fused ones
(mlp.gate, mlp.experts.gate_up_proj [E, 2 d_ff, d], mlp.experts.down_proj [E, d, d_ff])."""

from __future__ import annotations

import dataclasses

import torch

from ...engine.config import StackConfig
from . import llama

NAME = "mixtral"
MODEL_TYPES = ("mixtral",)
GGUF_ARCHITECTURES = ()
PREFIXES = ()


def config_from_hf(raw: dict) -> StackConfig:
    return dataclasses.replace(llama.config_from_hf(raw),
                               n_experts=int(raw.get("num_local_experts", 8)),
                               experts_per_token=int(raw.get("num_experts_per_tok", 2)))


def _experts(source, config: StackConfig, theirs: str) -> tuple:
    """(router [E, d], w_in [E, 2 d_ff, d], w_out [E, d, d_ff]) of one layer."""
    fused = theirs + "mlp.experts."
    if fused + "gate_up_proj" in source:
        return (source.get(theirs + "mlp.gate.weight"), source.get(fused + "gate_up_proj"),
                source.get(fused + "down_proj"))
    moe = theirs + "block_sparse_moe."
    each = [f"{moe}experts.{e}." for e in range(config.n_experts)]
    w_in = [source.cat(f"{name}w1.weight", f"{name}w3.weight") for name in each]
    w_out = [source.get(f"{name}w2.weight") for name in each]
    stacked = [None if any(t is None for t in ts) else torch.stack(ts) for ts in (w_in, w_out)]
    return (source.get(moe + "gate.weight"), *stacked)


def tensors_from_hf(source, config: StackConfig):
    ours = {"tok_emb.weight": source.get("model.embed_tokens.weight"),
            "final_ln.weight": source.get("model.norm.weight")}
    if config.lm_head == "separate":
        ours["lm_head.weight"] = source.get("lm_head.weight")
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", f"model.layers.{i}."
        ours.update(source.qkv(mine, theirs + "self_attn.{}_proj", config.qkv_bias))
        ours[mine + "attn.out.weight"] = source.get(theirs + "self_attn.o_proj.weight")
        ours[mine + "ln_1.weight"] = source.get(theirs + "input_layernorm.weight")
        ours[mine + "ln_2.weight"] = source.get(theirs + "post_attention_layernorm.weight")
        router, w_in, w_out = _experts(source, config, theirs)
        ours.update({mine + "experts.router.weight": router, mine + "experts.w_in": w_in,
                     mine + "experts.w_out": w_out})
    return config, ours
