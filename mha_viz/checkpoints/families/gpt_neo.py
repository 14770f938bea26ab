"""GPT-Neo (EleutherAI's GPT-Neo 125M-2.7B): GPT-2's layout (pre-LayerNorm, learned
positions, a GELU MLP, the LM head tied) with W_Q, W_K, W_V as three linear layers without
biases, scores not scaled at all (no 1/sqrt(d_k)), and local attention on the layers
attention_types names "local": a sliding window of window_size tokens (query i sees keys
i - window + 1 .. i), the global layers seeing every earlier key."""

from __future__ import annotations

from ...core.errors import UnsupportedModelError
from ...engine.config import StackConfig

NAME = "gpt_neo"
MODEL_TYPES = ("gpt_neo",)
GGUF_ARCHITECTURES = ()
PREFIXES = ("transformer.",)


def _layer_kinds(raw: dict, n_layer: int) -> list[str]:
    """Each layer's "global" or "local", from attention_types ([[kinds, repeats], ...]) or
    the attention_layers transformers writes out from it."""
    kinds = raw.get("attention_layers") or [
        kind for pattern, repeats in raw.get("attention_types") or () for _ in range(repeats)
        for kind in pattern]
    unknown = sorted(set(kinds) - {"global", "local"})
    if unknown or len(kinds) != n_layer:
        raise UnsupportedModelError(f"attention types {kinds} do not name global or local "
                                    f"attention for each of the {n_layer} layers")
    return kinds


def config_from_hf(raw: dict) -> StackConfig:
    n_layer, d_model = int(raw["num_layers"]), int(raw["hidden_size"])
    local = tuple(i for i, kind in enumerate(_layer_kinds(raw, n_layer)) if kind == "local")
    window = raw.get("window_size", 256)  # transformers' default when config.json omits it
    if local and not int(window or 0) > 0:
        raise UnsupportedModelError(f"local attention layers are listed without a positive "
                                    f"window_size (got {window})")
    return StackConfig(
        model_type=NAME, n_layer=n_layer, n_head=int(raw["num_heads"]), d_model=d_model,
        d_ff=int(raw.get("intermediate_size") or 4 * d_model), vocab_size=int(raw["vocab_size"]),
        max_positions=int(raw["max_position_embeddings"]),
        layer_norm_eps=float(raw.get("layer_norm_epsilon", 1e-5)),
        activation=raw.get("activation_function", "gelu_new"), norm="layernorm",
        pre_norm=True, causal=True, positions="learned", qkv_bias=False, out_bias=True,
        mlp_bias=True, scale_attn_weights=False, qkv_names=("q_proj", "k_proj", "v_proj"),
        sliding_window=int(window) if local else 0, window_layers=local,
        lm_head="tied" if raw.get("tie_word_embeddings", True) else "separate")


def tensors_from_hf(source, config: StackConfig):
    ours = {"tok_emb.weight": source.get("wte.weight"), "pos_emb.weight": source.get("wpe.weight"),
            **source.weight_and_bias("final_ln", "ln_f")}
    if config.lm_head == "separate":
        ours["lm_head.weight"] = source.get("lm_head.weight")
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", f"h.{i}."
        ours.update(source.qkv(mine, theirs + "attn.attention.{}_proj", bias=False))
        for a, b in (("attn.out", "attn.attention.out_proj"), ("ln_1", "ln_1"), ("ln_2", "ln_2"),
                     ("mlp_in", "mlp.c_fc"), ("mlp_out", "mlp.c_proj")):
            ours.update(source.weight_and_bias(mine + a, theirs + b))
    return config, ours
