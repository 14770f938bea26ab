"""BERT (and sentence-transformers encoders such as all-MiniLM-L6-v2): post-LayerNorm,
bidirectional, learned positions plus token-type embeddings and an embedding LayerNorm;
separate Q/K/V projections (fused here at load: one GEMM, the same numbers); the masked-LM
head when the checkpoint carries one."""

from __future__ import annotations

import dataclasses

from ...core.errors import UnsupportedModelError
from ...engine.config import StackConfig

NAME = "bert"
MODEL_TYPES = ("bert",)
GGUF_ARCHITECTURES = ()
PREFIXES = ("bert.",)


def config_from_hf(raw: dict) -> StackConfig:
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise UnsupportedModelError(
            f"BERT with position_embedding_type '{raw['position_embedding_type']}' is not "
            f"supported; only absolute positions are.")
    return StackConfig(
        model_type=NAME, n_layer=int(raw["num_hidden_layers"]),
        n_head=int(raw["num_attention_heads"]),
        d_model=int(raw["hidden_size"]), d_ff=int(raw["intermediate_size"]),
        vocab_size=int(raw["vocab_size"]), max_positions=int(raw["max_position_embeddings"]),
        layer_norm_eps=float(raw.get("layer_norm_eps", 1e-12)),
        activation=raw.get("hidden_act", "gelu"), norm="layernorm", pre_norm=False,
        qkv_names=("query", "key", "value"),
        causal=False, positions="learned", type_vocab_size=max(int(raw.get("type_vocab_size", 2)), 1),
        embedding_norm=True, final_norm=False, lm_head="none")


def _rename_tf_layer_norms(source) -> None:
    # Checkpoints converted from TensorFlow name LayerNorm parameters gamma / beta.
    source.state.rename(lambda name: name.replace("LayerNorm.gamma", "LayerNorm.weight")
                        .replace("LayerNorm.beta", "LayerNorm.bias"))


def tensors_from_hf(source, config: StackConfig):
    _rename_tf_layer_norms(source)
    if any(name.startswith("cls.predictions.transform") for name in source.state):
        config = dataclasses.replace(config, lm_head="mlm")
    ours = {"tok_emb.weight": source.get("embeddings.word_embeddings.weight"),
            "pos_emb.weight": source.get("embeddings.position_embeddings.weight"),
            "type_emb.weight": source.get("embeddings.token_type_embeddings.weight"),
            "emb_ln.weight": source.get("embeddings.LayerNorm.weight"),
            "emb_ln.bias": source.get("embeddings.LayerNorm.bias")}
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", f"encoder.layer.{i}."
        qkv = [f"{theirs}attention.self.{p}" for p in ("query", "key", "value")]
        ours[f"{mine}attn.qkv.weight"] = source.cat(*(f"{p}.weight" for p in qkv))
        ours[f"{mine}attn.qkv.bias"] = source.cat(*(f"{p}.bias" for p in qkv))
        for a, b in (("attn.out", "attention.output.dense"), ("ln_1", "attention.output.LayerNorm"),
                     ("mlp_in", "intermediate.dense"), ("mlp_out", "output.dense"),
                     ("ln_2", "output.LayerNorm")):
            ours[f"{mine}{a}.weight"] = source.get(f"{theirs}{b}.weight")
            ours[f"{mine}{a}.bias"] = source.get(f"{theirs}{b}.bias")
    if config.lm_head == "mlm":
        bias = "cls.predictions.bias"
        if bias not in source and "cls.predictions.decoder.bias" in source:
            bias = "cls.predictions.decoder.bias"
        ours.update({"mlm_dense.weight": source.get("cls.predictions.transform.dense.weight"),
                     "mlm_dense.bias": source.get("cls.predictions.transform.dense.bias"),
                     "mlm_ln.weight": source.get("cls.predictions.transform.LayerNorm.weight"),
                     "mlm_ln.bias": source.get("cls.predictions.transform.LayerNorm.bias"),
                     "mlm_bias": source.get(bias)})
    return config, ours
