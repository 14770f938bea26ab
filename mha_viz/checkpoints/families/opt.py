"""OPT (Meta's OPT-125M-66B): learned absolute positions read at row p + 2 (the table keeps
two rows before position 0), LayerNorm before each sub-layer (do_layer_norm_before) or
after the residual sum (OPT-350M's post-norm, without a final norm), a ReLU MLP (fc1, fc2),
biases everywhere (enable_bias), the LM head tied to the embedding. LayerNorms without
weights (layer_norm_elementwise_affine false) are read as weight 1, bias 0. A
word_embed_proj_dim other than hidden_size (embeddings projected in and out, OPT-350M) is
refused by name."""

from __future__ import annotations

import torch

from ...core.errors import UnsupportedModelError
from ...engine.config import StackConfig

NAME = "opt"
MODEL_TYPES = ("opt",)
GGUF_ARCHITECTURES = ()
PREFIXES = ("model.decoder.", "decoder.")
POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding's offset


def config_from_hf(raw: dict) -> StackConfig:
    d_model = int(raw["hidden_size"])
    projected = raw.get("word_embed_proj_dim")
    if projected and int(projected) != d_model:
        raise UnsupportedModelError(f"OPT's embeddings projected from {projected} to "
                                    f"{d_model} dimensions (word_embed_proj_dim, as "
                                    f"OPT-350M) are not supported")
    pre_norm = bool(raw.get("do_layer_norm_before", True))
    bias = bool(raw.get("enable_bias", True))
    return StackConfig(
        model_type=NAME, n_layer=int(raw["num_hidden_layers"]),
        n_head=int(raw["num_attention_heads"]),
        d_model=d_model, d_ff=int(raw["ffn_dim"]), vocab_size=int(raw["vocab_size"]),
        max_positions=int(raw["max_position_embeddings"]), layer_norm_eps=1e-5,
        activation=raw.get("activation_function", "relu"), norm="layernorm", pre_norm=pre_norm,
        causal=True, positions="learned", position_offset=POSITION_OFFSET, qkv_bias=bias,
        out_bias=bias, mlp_bias=bias, qkv_names=("q_proj", "k_proj", "v_proj"),
        final_norm=pre_norm and not raw.get("_remove_final_layer_norm", False),
        lm_head="tied" if raw.get("tie_word_embeddings", True) else "separate")


def tensors_from_hf(source, config: StackConfig):
    affine = "final_layer_norm.weight" in source or "layers.0.final_layer_norm.weight" in source

    def norm(ours_name, theirs):
        if affine:
            return source.weight_and_bias(ours_name, theirs)
        return {f"{ours_name}.weight": torch.ones(config.d_model),
                f"{ours_name}.bias": torch.zeros(config.d_model)}

    ours = {"tok_emb.weight": source.get("embed_tokens.weight"),
            "pos_emb.weight": source.get("embed_positions.weight")}
    if config.final_norm:
        ours.update(norm("final_ln", "final_layer_norm"))
    if config.lm_head == "separate":
        ours["lm_head.weight"] = source.get("lm_head.weight")
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", f"layers.{i}."
        ours.update(source.qkv(mine, theirs + "self_attn.{}_proj", config.qkv_bias))
        ours.update(norm(mine + "ln_1", theirs + "self_attn_layer_norm"))
        ours.update(norm(mine + "ln_2", theirs + "final_layer_norm"))
        for a, b in (("attn.out", "self_attn.out_proj"), ("mlp_in", "fc1"), ("mlp_out", "fc2")):
            if config.mlp_bias:
                ours.update(source.weight_and_bias(mine + a, theirs + b))
            else:
                ours[f"{mine}{a}.weight"] = source.get(f"{theirs}{b}.weight")
    return config, ours
