"""Llama and the families that are Llama plus a detail (Mistral; Qwen2, whose Q/K/V carry
biases; Qwen3, with an RMSNorm of each head's query and key): pre-RMSNorm, causal, rotary
positions (rotate-half layout, with Llama 3.x's scalings), SwiGLU MLP, grouped-query
attention, no other biases, LM head tied or separate.

From Hugging Face folders (config.json + safetensors) and from GGUF files of architecture
llama, qwen2 and qwen3 (llama.cpp's names; for "llama" only, its converter reorders the rows
of attn_q / attn_k within each head, undone here). gguf_config reads the metadata every
llama.cpp decoder writes, for the families that build on it (Gemma, Phi-3).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ...core.errors import UnsupportedModelError
from ...engine.config import StackConfig
from ...engine.positions import ROPE_KINDS, RopeScaling

NAME = "llama"
MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3")
PREFIXES = ()  # Hugging Face names start with "model." or "lm_head."; kept as they are


def rope_settings(raw: dict) -> tuple[float, float, RopeScaling | None]:
    """(theta, rotary fraction, scaling) from config.json, in transformers 5's
    rope_parameters or the older top-level rope_theta / rope_scaling."""
    params = raw.get("rope_parameters") or {}
    scaling = {**(raw.get("rope_scaling") or {}), **params}
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
    fraction = float(params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0)))
    if kind in ("default", "dynamic"):
        # dynamic NTK scaling grows the base only past the context: within it, plain RoPE
        return theta, fraction, None
    if kind not in ROPE_KINDS:
        raise UnsupportedModelError(
            f"rotary scaling '{kind}' is not supported; mha-viz computes "
            f"{', '.join(k for k in ROPE_KINDS if k != 'default')} and dynamic")
    factor = scaling.get("factor")
    original = int(scaling.get("original_max_position_embeddings")
                   or raw.get("original_max_position_embeddings") or 0)
    if kind == "yarn" and factor is None and original:
        factor = raw["max_position_embeddings"] / original
    if factor is None:
        raise UnsupportedModelError(f"rotary scaling '{kind}' gives no factor")
    if kind in ("llama3", "yarn") and not original:
        raise UnsupportedModelError(f"rotary scaling '{kind}' needs the original context it "
                                    f"rescales (original_max_position_embeddings), which "
                                    f"config.json does not give")
    factor = float(factor)
    attention_factor = 1.0
    if kind == "yarn":
        attention_factor = _yarn_attention_factor(scaling, factor)
    return theta, fraction, RopeScaling(
        kind, factor, float(scaling.get("low_freq_factor", 1.0)),
        float(scaling.get("high_freq_factor", 4.0)), original,
        float(scaling.get("beta_fast") or 32), float(scaling.get("beta_slow") or 1),
        attention_factor, bool(scaling.get("truncate", True)))


def _yarn_attention_factor(scaling: dict, factor: float) -> float:
    """YaRN's magnitude correction of cos and sin: given, or 0.1 ln(factor) + 1 (with
    DeepSeek's mscale / mscale_all_dim ratio when both are given), as transformers reads it."""
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        return float(mscale(factor, scaling["mscale"]) / mscale(factor, scaling["mscale_all_dim"]))
    return mscale(factor)


def _window(raw: dict, n_layer: int) -> tuple[int, tuple]:
    """(sliding window in tokens, the layers that use it; empty: every layer), as
    transformers reads them: layer_types when the config lists them (Qwen2 writes
    "sliding_attention" / "full_attention" per layer), else Mistral's sliding_window on every
    layer, or Qwen2's use_sliding_window on the layers from max_window_layers up. The window
    masks keys; the context stays max_position_embeddings."""
    window = raw.get("sliding_window")
    layer_types = raw.get("layer_types")
    if layer_types:
        unknown = sorted(set(layer_types) - {"sliding_attention", "full_attention"})
        if unknown:
            raise UnsupportedModelError(f"attention layer types {', '.join(unknown)} are not "
                                        f"supported (only full and sliding-window attention)")
        if len(layer_types) != n_layer:
            raise UnsupportedModelError(f"layer_types lists {len(layer_types)} layers, but "
                                        f"the model has {n_layer}")
        sliding = tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention")
        if sliding and not window:
            raise UnsupportedModelError("sliding-window layers are listed without a "
                                        "sliding_window size")
        return (int(window), sliding) if sliding else (0, ())
    if not window:
        return 0, ()
    if raw.get("model_type") in ("qwen2", "qwen3"):
        if not raw.get("use_sliding_window", False):
            return 0, ()
        first = int(raw.get("max_window_layers", n_layer))
        layers = tuple(range(first, n_layer))
        return (int(window), layers) if layers else (0, ())
    if raw.get("use_sliding_window", True) is False:
        return 0, ()
    return int(window), ()


def config_from_hf(raw: dict) -> StackConfig:
    theta, fraction, scaling = rope_settings(raw)
    model_type = raw.get("model_type")
    n_head = int(raw["num_attention_heads"])
    n_layer = int(raw["num_hidden_layers"])
    window, window_layers = _window(raw, n_layer)
    qkv_bias = model_type == "qwen2" or bool(raw.get("attention_bias", False))
    return StackConfig(
        model_type=model_type, n_layer=n_layer, n_head=n_head,
        qkv_names=("q_proj", "k_proj", "v_proj"),
        d_model=int(raw["hidden_size"]), d_ff=int(raw["intermediate_size"]),
        vocab_size=int(raw["vocab_size"]), max_positions=int(raw["max_position_embeddings"]),
        sliding_window=window, window_layers=window_layers,
        layer_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        activation=raw.get("hidden_act", "silu"), norm="rmsnorm", pre_norm=True, causal=True,
        positions="rotary", rope_theta=theta, rotary_fraction=fraction, gated_mlp=True,
        rope_scaling=scaling, n_kv_head=int(raw.get("num_key_value_heads") or n_head),
        d_head=int(raw.get("head_dim") or 0), qkv_bias=qkv_bias,
        out_bias=model_type != "qwen2" and bool(raw.get("attention_bias", False)),
        qk_norm="head" if model_type == "qwen3" else "",
        mlp_bias=bool(raw.get("mlp_bias", False)), final_norm=True,
        lm_head="tied" if raw.get("tie_word_embeddings", False) else "separate")


def ends(source, config: StackConfig, embed: str, final_norm: str, lm_head: str) -> dict:
    """Our token embedding, final norm and (when separate) LM head from the checkpoint's
    names for them."""
    ours = {"tok_emb.weight": source.get(embed), "final_ln.weight": source.get(final_norm)}
    if config.lm_head == "separate":
        ours["lm_head.weight"] = source.get(lm_head)
    return ours


def _layout(config: StackConfig, source, names: dict) -> dict:
    """Our parameters from one naming scheme: names maps our part to the checkpoint's
    format string (with {i} for the layer)."""
    ours = ends(source, config, names["embed"], names["final_norm"], names["lm_head"])
    for i in range(config.n_layer):
        mine = f"blocks.{i}."
        get = lambda part: names[part].format(i=i)  # noqa: E731
        ours[mine + "attn.qkv.weight"] = source.cat(get("q"), get("k"), get("v"))
        if config.qkv_bias:
            ours[mine + "attn.qkv.bias"] = source.cat(
                *(get(p).replace(".weight", ".bias") for p in ("q", "k", "v")))
        if config.qk_norm:
            ours[mine + "attn.q_norm.weight"] = source.get(get("q_norm"))
            ours[mine + "attn.k_norm.weight"] = source.get(get("k_norm"))
        ours[mine + "attn.out.weight"] = source.get(get("o"))
        if config.out_bias:
            ours[mine + "attn.out.bias"] = source.get(get("o").replace(".weight", ".bias"))
        ours[mine + "ln_1.weight"] = source.get(get("attn_norm"))
        ours[mine + "ln_2.weight"] = source.get(get("mlp_norm"))
        ours[mine + "mlp_in.weight"] = source.cat(get("gate"), get("up"))
        ours[mine + "mlp_out.weight"] = source.get(get("down"))
        if config.mlp_bias:
            ours[mine + "mlp_in.bias"] = source.cat(get("gate").replace(".weight", ".bias"),
                                                    get("up").replace(".weight", ".bias"))
            ours[mine + "mlp_out.bias"] = source.get(get("down").replace(".weight", ".bias"))
    return ours


HF_NAMES = {
    "embed": "model.embed_tokens.weight", "final_norm": "model.norm.weight",
    "lm_head": "lm_head.weight",
    "q": "model.layers.{i}.self_attn.q_proj.weight", "k": "model.layers.{i}.self_attn.k_proj.weight",
    "v": "model.layers.{i}.self_attn.v_proj.weight", "o": "model.layers.{i}.self_attn.o_proj.weight",
    "attn_norm": "model.layers.{i}.input_layernorm.weight",
    "mlp_norm": "model.layers.{i}.post_attention_layernorm.weight",
    "gate": "model.layers.{i}.mlp.gate_proj.weight", "up": "model.layers.{i}.mlp.up_proj.weight",
    "down": "model.layers.{i}.mlp.down_proj.weight",
    "q_norm": "model.layers.{i}.self_attn.q_norm.weight",
    "k_norm": "model.layers.{i}.self_attn.k_norm.weight",
}


def tensors_from_hf(source, config: StackConfig):
    return config, _layout(config, source, HF_NAMES)


def projections_from_hf(source, config: StackConfig, mine: str, theirs: str) -> dict:
    """One layer's W_Q, W_K, W_V (fused), W_O and gated MLP under transformers' Llama names
    (self_attn.q_proj .. o_proj, mlp.gate_proj .. down_proj, below theirs, e.g.
    "model.layers.3."), with the biases the config has: what the families that keep these
    names and differ in their norms (Gemma, OLMo) share."""
    attn = theirs + "self_attn."
    ours = {**source.qkv(mine, attn + "{}_proj", config.qkv_bias),
            mine + "attn.out.weight": source.get(attn + "o_proj.weight"),
            mine + "mlp_in.weight": source.cat(theirs + "mlp.gate_proj.weight",
                                               theirs + "mlp.up_proj.weight"),
            mine + "mlp_out.weight": source.get(theirs + "mlp.down_proj.weight")}
    if config.out_bias:
        ours[mine + "attn.out.bias"] = source.get(attn + "o_proj.bias")
    return ours


# --- GGUF (llama.cpp's names and layout) ------------------------------------------------------

GGUF_NAMES = {
    "embed": "token_embd.weight", "final_norm": "output_norm.weight", "lm_head": "output.weight",
    "q": "blk.{i}.attn_q.weight", "k": "blk.{i}.attn_k.weight", "v": "blk.{i}.attn_v.weight",
    "o": "blk.{i}.attn_output.weight", "attn_norm": "blk.{i}.attn_norm.weight",
    "mlp_norm": "blk.{i}.ffn_norm.weight", "gate": "blk.{i}.ffn_gate.weight",
    "up": "blk.{i}.ffn_up.weight", "down": "blk.{i}.ffn_down.weight",
    "q_norm": "blk.{i}.attn_q_norm.weight", "k_norm": "blk.{i}.attn_k_norm.weight",
}


def gguf_config(meta: dict, **settings) -> StackConfig:
    """The StackConfig of a llama.cpp decoder from what every architecture's metadata holds
    under "<architecture>.": sizes, heads, RoPE (plain or linearly scaled), RMSNorm epsilon, a
    sliding window on every layer; settings override (a family's own). Pre-RMSNorm, SiLU
    gated MLP, no biases, the LM head tied until tensors_from_gguf finds output.weight."""
    arch = meta["general.architecture"]
    key = lambda name: f"{arch}.{name}"  # noqa: E731
    n_head = int(meta[key("attention.head_count")])
    d_model = int(meta[key("embedding_length")])
    d_head = int(meta.get(key("attention.key_length")) or d_model // n_head)
    rotary_dim = int(meta.get(key("rope.dimension_count")) or d_head)
    theta = float(meta.get(key("rope.freq_base"), 10000.0))
    context = int(meta[key("context_length")])
    scaling = meta.get(key("rope.scaling.type"))
    if scaling not in (None, "none", "linear"):
        raise UnsupportedModelError(
            f"rotary scaling '{scaling}' (long-context RoPE) is not supported in GGUF files; "
            f"plain and linear RoPE are")
    rope = None
    if scaling == "linear" and float(meta.get(key("rope.scaling.factor")) or 1.0) != 1.0:
        _, _, rope = rope_settings({"max_position_embeddings": context, "rope_parameters": {
            "rope_type": "linear", "factor": float(meta[key("rope.scaling.factor")])}})
    vocab = meta.get(key("vocab_size")) or len(meta.get("tokenizer.ggml.tokens") or ())
    window = int(meta.get(key("attention.sliding_window")) or 0)
    return StackConfig(**{
        "model_type": arch, "n_layer": int(meta[key("block_count")]), "n_head": n_head,
        "d_model": d_model, "qkv_names": ("attn_q", "attn_k", "attn_v"),
        "d_ff": int(meta[key("feed_forward_length")]), "vocab_size": int(vocab),
        "max_positions": context, "sliding_window": window,
        "layer_norm_eps": float(meta.get(key("attention.layer_norm_rms_epsilon"), 1e-5)),
        "activation": "silu", "norm": "rmsnorm", "pre_norm": True, "causal": True,
        "positions": "rotary", "rope_theta": theta, "rope_scaling": rope,
        "rotary_fraction": rotary_dim / d_head, "gated_mlp": True,
        "n_kv_head": int(meta.get(key("attention.head_count_kv")) or n_head), "d_head": d_head,
        "qkv_bias": False, "out_bias": False, "mlp_bias": False, "final_norm": True,
        "lm_head": "tied", **settings})


def config_from_gguf(meta: dict) -> StackConfig:
    # Qwen2's Q/K/V biases and Qwen3's QK-norm are read from the tensors (tensors_from_gguf)
    return gguf_config(meta)


def unpermute_rows(weight: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's reordering of attn_q / attn_k rows: within each head of width d, GGUF
    row 2j + s holds Hugging Face row (d/2) s + j (llama.cpp rotates adjacent pairs, Hugging
    Face rotates halves; with the rows put back, rotate-half RoPE gives the same numbers)."""
    rows = weight.shape[0]
    d = rows // n_head
    return (weight.reshape(n_head, d // 2, 2, *weight.shape[1:]).transpose(1, 2)
            .reshape(weight.shape))


def gguf_head_and_lm(source, config: StackConfig) -> StackConfig:
    """config with lm_head "separate" when the file holds output.weight (llama.cpp writes
    none for a tied head)."""
    return dataclasses.replace(config, lm_head="separate") if "output.weight" in source \
        else config


def tensors_from_gguf(source, config: StackConfig):
    config = dataclasses.replace(
        gguf_head_and_lm(source, config), qkv_bias="blk.0.attn_q.bias" in source,
        qk_norm="head" if "blk.0.attn_q_norm.weight" in source else "")
    if config.model_type != "llama":  # llama.cpp permutes the rows of Llama's Q and K only
        return config, _layout(config, source, GGUF_NAMES)
    for i in range(config.n_layer):
        for part, heads in (("q", config.n_head), ("k", config.n_kv_head)):
            name = GGUF_NAMES[part].format(i=i)
            if name in source:
                source.state.map(name, lambda w, heads=heads: unpermute_rows(w, heads))
    return config, _layout(config, source, GGUF_NAMES)
