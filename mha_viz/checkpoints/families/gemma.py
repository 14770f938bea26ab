"""Gemma and Gemma 2: the Llama layout (pre-RMSNorm, rotary, grouped-query attention, a gated
MLP, here GELU-tanh) with Gemma's own details:
- RMSNorm scales by (1 + w): the stored w is a difference from 1, and is read as 1 + w;
- token embeddings times sqrt(d_model), the unembedding tied to them;
- Gemma 2: the scores scaled by query_pre_attn_scalar^-1/2 and soft-capped
  (attn_logit_softcapping), the logits too (final_logit_softcapping), a sliding window on
  the layers layer_types names (every other one), and a norm on each sub-layer's output
  before it joins the stream (post_attention_layernorm, post_feedforward_layernorm).
- Gemma 3 (text): Gemma 2's layout without the soft-caps, plus QK-norm (a (1 + w) RMSNorm of
  each head's query and key), five sliding-window layers to one global (layer_types), and
  two RoPE bases: the local layers turn with rope_local_base_freq (their own rope
  parameters, unscaled in the released models), the global ones with rope_theta and the
  checkpoint's scaling (linear, factor 8, in the 4B and larger).

GGUF files (architectures gemma, gemma2, gemma3) as llama.cpp writes them: every norm's
weight stored as 1 + w already (read as it is), no output.weight (the head is tied), the
soft-caps and the window under their own keys, the window's period (gemma2: 2, gemma3: 6)
or per-layer list under attention.sliding_window_pattern, Gemma 3's local RoPE base under
rope.freq_base_swa (10,000 when absent, as llama.cpp fixes it). llama.cpp scales the scores
by head_dim^-1/2, except in the 27B models (d_model / n_head): the file carries no
query_pre_attn_scalar."""

from __future__ import annotations

import dataclasses

from ...core.errors import UnsupportedModelError
from ...engine.config import StackConfig
from .llama import ends, gguf_config, gguf_head_and_lm, projections_from_hf, rope_settings

NAME = "gemma"
MODEL_TYPES = ("gemma", "gemma2", "gemma3_text")
# what each adds to Gemma: the sandwich of norms, the window and Gemma 2's scores' scale
SANDWICH = ("gemma2", "gemma3_text")
GGUF_ARCHITECTURES = ("gemma", "gemma2", "gemma3")
# GGUF architecture -> (the model_type a folder would name; the sliding-window period
# llama.cpp assumes; the layer count of its 27B model, whose scores llama.cpp scales by
# (d_model / n_head)^-1/2)
_GGUF = {"gemma": ("gemma", 0, 0), "gemma2": ("gemma2", 2, 46),
         "gemma3": ("gemma3_text", 6, 62)}
PREFIXES = ()


def _window(raw: dict, n_layer: int) -> tuple[int, tuple]:
    window = raw.get("sliding_window")
    layer_types = raw.get("layer_types")
    if raw.get("model_type") not in SANDWICH:
        return 0, ()
    if not window:
        if "sliding_attention" in (layer_types or ()):
            raise UnsupportedModelError("sliding-window layers are listed without a "
                                        "sliding_window size")
        return 0, ()
    if not layer_types:  # transformers' defaults: Gemma 2 every other layer from layer 0,
        #                  Gemma 3 all but every sliding_window_pattern-th
        pattern = int(raw.get("sliding_window_pattern") or raw.get("_sliding_window_pattern")
                      or 6)
        layer_types = ["sliding_attention" if (
            i % 2 == 0 if raw["model_type"] == "gemma2" else (i + 1) % pattern)
            else "full_attention" for i in range(n_layer)]
    unknown = sorted(set(layer_types) - {"sliding_attention", "full_attention"})
    if unknown or len(layer_types) != n_layer:
        raise UnsupportedModelError(f"layer_types {layer_types} do not name full or sliding "
                                    f"attention for each of the {n_layer} layers")
    sliding = tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention")
    return (int(window), sliding) if sliding else (0, ())


def _ropes(raw: dict) -> tuple[float, object, float, object]:
    """(theta, scaling) of the global layers, then of the local ones (0, None: the same).
    Gemma 3's rope_parameters hold one set per layer type; older configs give rope_theta,
    rope_scaling (the global layers') and rope_local_base_freq."""
    params = raw.get("rope_parameters") or {}
    if raw.get("model_type") != "gemma3_text":
        theta, fraction, scaling = rope_settings(raw)
        return theta, scaling, 0.0, None
    by_type = params if "full_attention" in params or "sliding_attention" in params else {
        "full_attention": {**(raw.get("rope_scaling") or {}), **params,
                           "rope_theta": params.get("rope_theta",
                                                    raw.get("rope_theta", 1_000_000.0))},
        "sliding_attention": {"rope_type": "default",
                              "rope_theta": raw.get("rope_local_base_freq", 10_000.0)}}
    read = {kind: rope_settings({"max_position_embeddings": raw["max_position_embeddings"],
                                 "rope_parameters": by_type.get(kind) or {}})
            for kind in ("full_attention", "sliding_attention")}
    (theta, _, scaling), (local_theta, _, local_scaling) = (read["full_attention"],
                                                            read["sliding_attention"])
    return theta, scaling, local_theta, local_scaling


def config_from_hf(raw: dict) -> StackConfig:
    model_type = raw.get("model_type")
    sandwich = model_type in SANDWICH
    if raw.get("use_bidirectional_attention"):
        raise UnsupportedModelError("Gemma 3 with bidirectional attention (an embedding "
                                    "model) is not supported; its causal text model is")
    n_head, n_layer = int(raw["num_attention_heads"]), int(raw["num_hidden_layers"])
    d_model = int(raw["hidden_size"])
    window, window_layers = _window(raw, n_layer)
    theta, scaling, local_theta, local_scaling = _ropes(raw)
    scalar = raw.get("query_pre_attn_scalar") if sandwich else None
    return StackConfig(
        model_type=model_type, n_layer=n_layer, n_head=n_head, d_model=d_model,
        d_ff=int(raw["intermediate_size"]), vocab_size=int(raw["vocab_size"]),
        max_positions=int(raw["max_position_embeddings"]),
        layer_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        activation=raw.get("hidden_activation") or raw.get("hidden_act") or "gelu_pytorch_tanh",
        norm="rmsnorm", pre_norm=True, causal=True, positions="rotary",
        rope_theta=theta, rope_scaling=scaling,
        local_rope_theta=local_theta if window_layers else 0.0,
        local_rope_scaling=local_scaling if window_layers else None,
        gated_mlp=True, n_kv_head=int(raw.get("num_key_value_heads") or n_head),
        d_head=int(raw.get("head_dim") or 0),
        qkv_bias=bool(raw.get("attention_bias", False)),
        out_bias=bool(raw.get("attention_bias", False)), mlp_bias=False, final_norm=True,
        lm_head="tied", embed_scale=d_model ** 0.5, qkv_names=("q_proj", "k_proj", "v_proj"),
        sliding_window=window, window_layers=window_layers,
        attn_softcap=float(raw.get("attn_logit_softcapping") or 0.0) if sandwich else 0.0,
        final_softcap=float(raw.get("final_logit_softcapping") or 0.0) if sandwich else 0.0,
        score_scale=float(scalar) ** -0.5 if scalar else 0.0, post_norms=sandwich,
        qk_norm="head" if model_type == "gemma3_text" else "", rms_scale_in_float32=True)


def tensors_from_hf(source, config: StackConfig):
    def norm(name):  # Gemma's RMSNorm multiplies by (1 + w)
        weight = source.get(name)
        return None if weight is None else weight + 1.0

    layer = "model.layers.{i}."
    ours = {"tok_emb.weight": source.get("model.embed_tokens.weight"),
            "final_ln.weight": norm("model.norm.weight")}
    # Gemma names the MLP's input norm post_attention_layernorm; Gemma 2 and 3 name so the norm
    # of the attention's output, and the MLP's input norm pre_feedforward_layernorm
    norms = ({"ln_1": "input_layernorm", "ln_attn_out": "post_attention_layernorm",
              "ln_2": "pre_feedforward_layernorm", "ln_mlp_out": "post_feedforward_layernorm"}
             if config.post_norms else
             {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm"})
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", layer.format(i=i)
        for ours_name, their_name in norms.items():
            ours[f"{mine}{ours_name}.weight"] = norm(f"{theirs}{their_name}.weight")
        attn = theirs + "self_attn."
        ours.update(projections_from_hf(source, config, mine, theirs))
        if config.qk_norm:  # Gemma 3's are (1 + w) RMSNorms too
            ours[mine + "attn.q_norm.weight"] = norm(attn + "q_norm.weight")
            ours[mine + "attn.k_norm.weight"] = norm(attn + "k_norm.weight")
    return config, ours


def _gguf_window_layers(meta: dict, arch: str, n_layer: int, period: int) -> tuple:
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, (list, tuple)):
        if len(pattern) != n_layer:
            raise UnsupportedModelError(f"the sliding-window pattern lists {len(pattern)} "
                                        f"layers, but the model has {n_layer}")
        return tuple(i for i, sliding in enumerate(pattern) if sliding)
    period = int(pattern or period)
    return tuple(i for i in range(n_layer) if (i + 1) % period)


def config_from_gguf(meta: dict):
    arch = meta["general.architecture"]
    ours, period, layers_of_27b = _GGUF[arch]
    base = gguf_config(meta)
    window = base.sliding_window if period else 0
    window_layers = _gguf_window_layers(meta, arch, base.n_layer, period) if window else ()
    scale = (base.d_model / base.n_head) ** -0.5 if base.n_layer == layers_of_27b else 0.0
    get = lambda name: float(meta.get(f"{arch}.{name}") or 0.0)  # noqa: E731
    local_theta = float(meta.get(f"{arch}.rope.freq_base_swa") or 10_000.0)
    return dataclasses.replace(
        base, model_type=ours, activation="gelu_pytorch_tanh", embed_scale=base.d_model ** 0.5,
        sliding_window=window if window_layers else 0, window_layers=window_layers,
        local_rope_theta=local_theta if arch == "gemma3" and window_layers else 0.0,
        attn_softcap=get("attn_logit_softcapping"),
        final_softcap=get("final_logit_softcapping"), score_scale=scale,
        post_norms=arch != "gemma", qk_norm="head" if arch == "gemma3" else "",
        rms_scale_in_float32=True)


def tensors_from_gguf(source, config: StackConfig):
    config = gguf_head_and_lm(source, config)
    ours = ends(source, config, "token_embd.weight", "output_norm.weight", "output.weight")
    norms = ({"ln_1": "attn_norm", "ln_attn_out": "post_attention_norm", "ln_2": "ffn_norm",
              "ln_mlp_out": "post_ffw_norm"} if config.post_norms else
             {"ln_1": "attn_norm", "ln_2": "ffn_norm"})
    if config.qk_norm:
        norms.update({"attn.q_norm": "attn_q_norm", "attn.k_norm": "attn_k_norm"})
    parts = {"attn.out": "attn_output", "mlp_out": "ffn_down", **norms}
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", f"blk.{i}."
        # the norms are stored as 1 + w, the (1 + w) RMSNorm's scale as it is
        for a, b in parts.items():
            ours[f"{mine}{a}.weight"] = source.get(f"{theirs}{b}.weight")
        ours[mine + "attn.qkv.weight"] = source.cat(*(f"{theirs}attn_{p}.weight" for p in "qkv"))
        ours[mine + "mlp_in.weight"] = source.cat(theirs + "ffn_gate.weight",
                                                  theirs + "ffn_up.weight")
    return config, ours
