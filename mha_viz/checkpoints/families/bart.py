"""BART and Marian (opus-mt): encoder-decoders with a LayerNorm after each sub-layer (self-
attention, cross-attention, MLP), biases everywhere, scores scaled by 1/sqrt(d_k), and an LM
head tied to the embedding plus final_logits_bias.

BART: learned positions whose table starts 2 rows in (position p reads row p + 2), a
LayerNorm right after the embeddings (layernorm_embedding), GELU. Marian is BART's setting
with fixed sinusoidal positions (sines, then cosines), no embedding norm, the token
embeddings scaled by sqrt(d_model) (scale_embedding), SiLU ("swish"), and optionally a
decoder vocabulary of its own."""

from __future__ import annotations

import math

from ...core.errors import UnsupportedModelError
from ...engine.config import StackConfig
from ...engine.encoder_decoder import EncoderDecoderConfig, first_id

NAME = "bart"
MODEL_TYPES = ("bart", "marian")
GGUF_ARCHITECTURES = ()
PREFIXES = ("model.",)


def config_from_hf(raw: dict) -> EncoderDecoderConfig:
    marian = raw.get("model_type") == "marian"
    for key in ("normalize_before", "add_final_layer_norm"):
        if raw.get(key):  # mBART-style pre-norm stacks are another family
            raise UnsupportedModelError(f"a {raw.get('model_type')} checkpoint with {key} is "
                                        f"not supported (only post-norm BART and Marian)")
    d_model = int(raw["d_model"])
    vocab = int(raw["vocab_size"])
    shared = not marian or raw.get("share_encoder_decoder_embeddings", True) is not False
    decoder_vocab = vocab if shared else int(raw.get("decoder_vocab_size") or vocab)
    common = dict(
        d_model=d_model, max_positions=int(raw["max_position_embeddings"]),
        layer_norm_eps=1e-5, activation=raw.get("activation_function", "gelu"),
        norm="layernorm", pre_norm=False, final_norm=False,
        positions="sinusoidal" if marian else "learned", position_offset=0 if marian else 2,
        embedding_norm=not marian,
        embed_scale=math.sqrt(d_model) if raw.get("scale_embedding", marian) else 1.0)
    encoder = StackConfig(model_type=raw.get("model_type", NAME),
                          n_layer=int(raw["encoder_layers"]),
                          n_head=int(raw["encoder_attention_heads"]),
                          d_ff=int(raw["encoder_ffn_dim"]), vocab_size=vocab, causal=False,
                          lm_head="none", **common)
    decoder = StackConfig(model_type=raw.get("model_type", NAME),
                          n_layer=int(raw["decoder_layers"]),
                          n_head=int(raw["decoder_attention_heads"]),
                          d_ff=int(raw["decoder_ffn_dim"]), vocab_size=decoder_vocab,
                          causal=True, cross_attention=True, lm_head="tied", logits_bias=True,
                          **common)
    pad = raw.get("pad_token_id", 1)
    start = raw.get("decoder_start_token_id")
    return EncoderDecoderConfig(
        model_type=raw.get("model_type", NAME), encoder=encoder, decoder=decoder,
        decoder_start_token_id=int((first_id(pad) if marian else 2) if start is None else start),
        eos_token_id=first_id(raw.get("eos_token_id", 2)), pad_token_id=first_id(pad),
        shared_embeddings=shared)


def _attention(source, ours: dict, mine: str, theirs: str) -> None:
    """q/k/v/out projections with biases; mine is our attention module's prefix (its
    self-attention fuses q, k and v in one matrix; cross-attention keeps three)."""
    for part in ("weight", "bias"):
        if mine.endswith("attn."):
            ours[f"{mine}qkv.{part}"] = source.cat(*(f"{theirs}{b}_proj.{part}" for b in "qkv"))
        else:
            for a, b in (("query", "q"), ("key", "k"), ("value", "v")):
                ours[f"{mine}{a}.{part}"] = source.get(f"{theirs}{b}_proj.{part}")
        ours[f"{mine}out.{part}"] = source.get(f"{theirs}out_proj.{part}")


def _weight_and_bias(source, ours: dict, mine: str, theirs: str) -> None:
    for part in ("weight", "bias"):
        ours[f"{mine}.{part}"] = source.get(f"{theirs}.{part}")


def _stack(source, ours: dict, config: StackConfig, side: str) -> None:
    if config.positions == "learned":
        ours[f"{side}.pos_emb.weight"] = source.get(f"{side}.embed_positions.weight")
    if config.embedding_norm:
        _weight_and_bias(source, ours, f"{side}.emb_ln", f"{side}.layernorm_embedding")
    for i in range(config.n_layer):
        mine, theirs = f"{side}.blocks.{i}.", f"{side}.layers.{i}."
        _attention(source, ours, f"{mine}attn.", f"{theirs}self_attn.")
        _weight_and_bias(source, ours, f"{mine}ln_1", f"{theirs}self_attn_layer_norm")
        if config.cross_attention:
            _attention(source, ours, f"{mine}cross.", f"{theirs}encoder_attn.")
            _weight_and_bias(source, ours, f"{mine}ln_cross", f"{theirs}encoder_attn_layer_norm")
        _weight_and_bias(source, ours, f"{mine}mlp_in", f"{theirs}fc1")
        _weight_and_bias(source, ours, f"{mine}mlp_out", f"{theirs}fc2")
        _weight_and_bias(source, ours, f"{mine}ln_2", f"{theirs}final_layer_norm")


def tensors_from_hf(source, config: EncoderDecoderConfig):
    def first(*names):
        for name in names:
            if name in source:
                return source.get(name)
        return source.get(names[0])

    ours = {"encoder.tok_emb.weight": first("shared.weight", "encoder.embed_tokens.weight")}
    if not config.shared_embeddings:
        ours["decoder.tok_emb.weight"] = source.get("decoder.embed_tokens.weight")
    _stack(source, ours, config.encoder, "encoder")
    _stack(source, ours, config.decoder, "decoder")
    bias = source.get("final_logits_bias")
    ours["decoder.logits_bias"] = None if bias is None else bias.reshape(-1)
    return config, ours
