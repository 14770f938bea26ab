"""DistilBERT: BERT's post-LayerNorm bidirectional layers under other names (q_lin .. out_lin,
sa_layer_norm, ffn.lin1 / lin2, output_layer_norm), learned positions (or fixed sinusoidal
ones, which are stored in the same table) and an embedding LayerNorm, no token types, and
the masked-LM head vocab_transform -> activation -> vocab_layer_norm -> vocab_projector (tied
to the embedding, with a bias)."""

from __future__ import annotations

import dataclasses

from ...engine.config import StackConfig

NAME = "distilbert"
MODEL_TYPES = ("distilbert",)
GGUF_ARCHITECTURES = ()
PREFIXES = ("distilbert.",)


def config_from_hf(raw: dict) -> StackConfig:
    return StackConfig(
        model_type=NAME, n_layer=int(raw["n_layers"]), n_head=int(raw["n_heads"]),
        d_model=int(raw["dim"]), d_ff=int(raw["hidden_dim"]), vocab_size=int(raw["vocab_size"]),
        max_positions=int(raw["max_position_embeddings"]), layer_norm_eps=1e-12,
        activation=raw.get("activation", "gelu"), norm="layernorm", pre_norm=False,
        causal=False, positions="learned", qkv_names=("q_lin", "k_lin", "v_lin"),
        embedding_norm=True, final_norm=False, lm_head="none")


def tensors_from_hf(source, config: StackConfig):
    if "vocab_transform.weight" in source:
        config = dataclasses.replace(config, lm_head="mlm")
    ours = {"tok_emb.weight": source.get("embeddings.word_embeddings.weight"),
            "pos_emb.weight": source.get("embeddings.position_embeddings.weight"),
            **source.weight_and_bias("emb_ln", "embeddings.LayerNorm")}
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", f"transformer.layer.{i}."
        ours.update(source.qkv(mine, theirs + "attention.{}_lin", bias=True))
        for a, b in (("attn.out", "attention.out_lin"), ("ln_1", "sa_layer_norm"),
                     ("mlp_in", "ffn.lin1"), ("mlp_out", "ffn.lin2"),
                     ("ln_2", "output_layer_norm")):
            ours.update(source.weight_and_bias(mine + a, theirs + b))
    if config.lm_head == "mlm":
        ours.update({**source.weight_and_bias("mlm_dense", "vocab_transform"),
                     **source.weight_and_bias("mlm_ln", "vocab_layer_norm"),
                     "mlm_bias": source.get("vocab_projector.bias")})
    return config, ours
