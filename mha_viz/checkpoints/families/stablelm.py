"""StableLM (StableLM-3B-4E1T, StableLM 2): the Llama layout (rotary, SwiGLU, grouped-query
attention, a separate LM head) with LayerNorms (with biases), rotary positions on the first
partial_rotary_factor of each head (a quarter by default), Q/K/V biases when use_qkv_bias,
and, with use_parallel_residual (StableLM 2 12B), attention and MLP side by side reading one
norm. Its qk_layernorm (a LayerNorm of its own for each head) is refused by name."""

from __future__ import annotations

import dataclasses

from ...core.errors import UnsupportedModelError
from ...engine.config import StackConfig
from . import llama

NAME = "stablelm"
MODEL_TYPES = ("stablelm",)
GGUF_ARCHITECTURES = ()
PREFIXES = ()


def config_from_hf(raw: dict) -> StackConfig:
    if raw.get("qk_layernorm"):
        raise UnsupportedModelError("StableLM's qk_layernorm (a LayerNorm with its own weights "
                                    "for each head's query and key) is not supported")
    base = llama.config_from_hf({"partial_rotary_factor": 0.25, **raw})
    return dataclasses.replace(
        base, norm="layernorm", layer_norm_eps=float(raw.get("layer_norm_eps", 1e-5)),
        qkv_bias=bool(raw.get("use_qkv_bias", False)), out_bias=False,
        parallel_residual=bool(raw.get("use_parallel_residual", False)))


def tensors_from_hf(source, config: StackConfig):
    ours = {"tok_emb.weight": source.get("model.embed_tokens.weight")}
    if config.lm_head == "separate":
        ours["lm_head.weight"] = source.get("lm_head.weight")
    # parallel: one norm, read by attention and MLP alike (ours has one for each, equal)
    mlp_norm = "input_layernorm" if config.parallel_residual else "post_attention_layernorm"
    norms = [("final_ln", "model.norm")]
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", f"model.layers.{i}."
        ours.update(llama.projections_from_hf(source, config, mine, theirs))
        norms += [(mine + "ln_1", theirs + "input_layernorm"), (mine + "ln_2", theirs + mlp_norm)]
    for a, b in norms:
        ours.update(source.weight_and_bias(a, b))
    return config, ours
