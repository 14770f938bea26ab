"""T5 (v1.0 with a ReLU MLP, v1.1 / flan-t5 with a gated-GELU one): an encoder-decoder with
RMS-style norms before each sub-layer (a scale, no bias, no mean taken out), no biases
anywhere, scores not divided by sqrt(d_k), and no absolute positions: each head adds a
learned bias per bucket of relative distance to its scores (bidirectional buckets in the
encoder, causal in the decoder), held by the first layer of each stack and shared by all of
its layers. Cross-attention has no position bias. A tied LM head rescales the last hidden
state by d_model**-0.5 (v1.0); an untied one (v1.1) does not."""

from __future__ import annotations

import dataclasses

from ...core.errors import UnsupportedModelError
from ...engine.config import StackConfig
from ...engine.encoder_decoder import EncoderDecoderConfig, first_id

NAME = "t5"
MODEL_TYPES = ("t5",)
GGUF_ARCHITECTURES = ()
PREFIXES = ()


def _mlp(raw: dict) -> tuple[str, bool]:
    """feed_forward_proj -> (activation, gated): "relu", "gated-gelu", "gated-silu", ..."""
    proj = str(raw.get("feed_forward_proj", "relu"))
    parts = proj.split("-")
    if len(parts) > 2 or len(parts) == 2 and parts[0] != "gated":
        raise UnsupportedModelError(f"T5's feed_forward_proj '{proj}' is not one we know: "
                                    f"'relu', 'gelu', or 'gated-' followed by one")
    activation = "gelu_new" if proj == "gated-gelu" else parts[-1]
    return activation, len(parts) == 2


def config_from_hf(raw: dict) -> EncoderDecoderConfig:
    activation, gated = _mlp(raw)
    for key in ("relative_attention_num_buckets", "relative_attention_max_distance"):
        if key in raw and not isinstance(raw[key], int):
            raise UnsupportedModelError(f"T5's {key} is {raw[key]!r}, not a whole number")
    d_model, n_head = int(raw["d_model"]), int(raw["num_heads"])
    common = dict(
        n_head=n_head, d_model=d_model, d_ff=int(raw["d_ff"]),
        vocab_size=int(raw["vocab_size"]), max_positions=int(raw.get("n_positions") or 512),
        layer_norm_eps=float(raw.get("layer_norm_epsilon", 1e-6)), activation=activation,
        norm="rmsnorm", pre_norm=True, positions="relative", gated_mlp=gated,
        d_head=int(raw.get("d_kv") or d_model // n_head), qkv_bias=False, out_bias=False,
        mlp_bias=False, final_norm=True, scale_attn_weights=False,
        relative_buckets=int(raw.get("relative_attention_num_buckets", 32)),
        relative_max_distance=int(raw.get("relative_attention_max_distance", 128)))
    n_layer = int(raw["num_layers"])
    encoder = StackConfig(model_type=NAME, n_layer=n_layer, causal=False, lm_head="none", **common)
    # v1.0 ties the LM head to the embedding and rescales; v1.1 saves tie_word_embeddings
    # false and its own lm_head (tensors_from_hf takes the embedding when none is saved);
    # transformers 5 writes the rescale as scale_decoder_outputs
    tied = raw.get("scale_decoder_outputs", raw.get("tie_word_embeddings", True)) is not False
    decoder = StackConfig(model_type=NAME, n_layer=int(raw.get("num_decoder_layers") or n_layer),
                          causal=True, cross_attention=True, lm_head="tied",
                          unembed_scale=d_model ** -0.5 if tied else 1.0, **common)
    pad = raw.get("pad_token_id", 0)
    start = raw.get("decoder_start_token_id")
    return EncoderDecoderConfig(
        model_type=NAME, encoder=encoder, decoder=decoder,
        decoder_start_token_id=int(pad if start is None else start),
        eos_token_id=first_id(raw.get("eos_token_id", 1)), pad_token_id=first_id(pad),
        extra={"mlp": ("gated " if gated else "") + activation})


def _stack(source, ours: dict, config: StackConfig, mine: str, theirs: str) -> None:
    """One stack's tensors: layer.0 self-attention, (decoder) layer.1 cross-attention, then
    the MLP, each with the norm before it."""
    mlp_at = 2 if config.cross_attention else 1
    ours[f"{mine}rel_bias.weight"] = source.get(
        f"{theirs}block.0.layer.0.SelfAttention.relative_attention_bias.weight")
    ours[f"{mine}final_ln.weight"] = source.get(f"{theirs}final_layer_norm.weight")
    for i in range(config.n_layer):
        block, layer = f"{mine}blocks.{i}.", f"{theirs}block.{i}.layer."
        attention = f"{layer}0.SelfAttention."
        ours[f"{block}attn.qkv.weight"] = source.cat(*(f"{attention}{p}.weight"
                                                       for p in "qkv"))
        ours[f"{block}attn.out.weight"] = source.get(f"{attention}o.weight")
        ours[f"{block}ln_1.weight"] = source.get(f"{layer}0.layer_norm.weight")
        if config.cross_attention:
            cross = f"{layer}1.EncDecAttention."
            for a, b in (("query", "q"), ("key", "k"), ("value", "v"), ("out", "o")):
                ours[f"{block}cross.{a}.weight"] = source.get(f"{cross}{b}.weight")
            ours[f"{block}ln_cross.weight"] = source.get(f"{layer}1.layer_norm.weight")
        mlp = f"{layer}{mlp_at}.DenseReluDense."
        ours[f"{block}mlp_in.weight"] = (source.cat(f"{mlp}wi_0.weight", f"{mlp}wi_1.weight")
                                         if config.gated_mlp else source.get(f"{mlp}wi.weight"))
        ours[f"{block}mlp_out.weight"] = source.get(f"{mlp}wo.weight")
        ours[f"{block}ln_2.weight"] = source.get(f"{layer}{mlp_at}.layer_norm.weight")


def tensors_from_hf(source, config: EncoderDecoderConfig):
    shared = "shared.weight" if "shared.weight" in source else "encoder.embed_tokens.weight"
    ours = {"encoder.tok_emb.weight": source.get(shared)}
    _stack(source, ours, config.encoder, "encoder.", "encoder.")
    _stack(source, ours, config.decoder, "decoder.", "decoder.")
    if "lm_head.weight" in source and not _same(source, "lm_head.weight", shared):
        # an untied head (v1.1): its own matrix, no rescale
        decoder = dataclasses.replace(config.decoder, lm_head="separate", unembed_scale=1.0)
        config = dataclasses.replace(config, decoder=decoder)
        ours["decoder.lm_head.weight"] = source.get("lm_head.weight")
    return config, ours


def _same(source, a: str, b: str) -> bool:
    x, y = source.state.get(a), source.state.get(b)
    return x is not None and y is not None and x.shape == y.shape and bool((x == y).all())
