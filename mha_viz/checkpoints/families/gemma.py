"""Gemma and Gemma 2: the Llama layout (pre-RMSNorm, rotary, grouped-query attention, a gated
MLP, here GELU-tanh) with Gemma's own details:
- RMSNorm scales by (1 + w): the stored w is a difference from 1, and is read as 1 + w;
- token embeddings times sqrt(d_model), the unembedding tied to them;
- Gemma 2: the scores scaled by query_pre_attn_scalar^-1/2 and soft-capped
  (attn_logit_softcapping), the logits too (final_logit_softcapping), a sliding window on
  the layers layer_types names (every other one), and a norm on each sub-layer's output
  before it joins the stream (post_attention_layernorm, post_feedforward_layernorm).
Gemma 3's text model adds QK-norm and two RoPE bases, which the engine does not hold yet."""

from __future__ import annotations

from ...core.errors import UnsupportedModelError
from ...engine.config import StackConfig

NAME = "gemma"
MODEL_TYPES = ("gemma", "gemma2")
GGUF_ARCHITECTURES = ()
PREFIXES = ()


def _window(raw: dict, n_layer: int) -> tuple[int, tuple]:
    window = raw.get("sliding_window")
    layer_types = raw.get("layer_types")
    if raw.get("model_type") != "gemma2" or not window:
        return 0, ()
    if not layer_types:  # transformers' default: every other layer, from layer 0
        layer_types = ["sliding_attention" if i % 2 == 0 else "full_attention"
                       for i in range(n_layer)]
    unknown = sorted(set(layer_types) - {"sliding_attention", "full_attention"})
    if unknown or len(layer_types) != n_layer:
        raise UnsupportedModelError(f"layer_types {layer_types} do not name full or sliding "
                                    f"attention for each of the {n_layer} layers")
    sliding = tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention")
    return (int(window), sliding) if sliding else (0, ())


def config_from_hf(raw: dict) -> StackConfig:
    second = raw.get("model_type") == "gemma2"
    params = raw.get("rope_parameters") or {}
    kind = params.get("rope_type") or (raw.get("rope_scaling") or {}).get("rope_type", "default")
    if kind != "default":
        raise UnsupportedModelError(f"rotary scaling '{kind}' is not supported for Gemma")
    n_head, n_layer = int(raw["num_attention_heads"]), int(raw["num_hidden_layers"])
    d_model = int(raw["hidden_size"])
    window, window_layers = _window(raw, n_layer)
    scalar = raw.get("query_pre_attn_scalar") if second else None
    return StackConfig(
        arch=raw["model_type"], n_layer=n_layer, n_head=n_head, d_model=d_model,
        d_ff=int(raw["intermediate_size"]), vocab_size=int(raw["vocab_size"]),
        max_positions=int(raw["max_position_embeddings"]),
        layer_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        activation=raw.get("hidden_activation") or raw.get("hidden_act") or "gelu_pytorch_tanh",
        norm="rmsnorm", pre_norm=True, causal=True, positions="rotary",
        rope_theta=float(params.get("rope_theta", raw.get("rope_theta", 10000.0))),
        gated_mlp=True, n_kv_head=int(raw.get("num_key_value_heads") or n_head),
        d_head=int(raw.get("head_dim") or 0),
        qkv_bias=bool(raw.get("attention_bias", False)),
        out_bias=bool(raw.get("attention_bias", False)), mlp_bias=False, final_norm=True,
        lm_head="tied", embed_scale=d_model ** 0.5, qkv_names=("q_proj", "k_proj", "v_proj"),
        sliding_window=window, window_layers=window_layers,
        attn_softcap=float(raw.get("attn_logit_softcapping") or 0.0) if second else 0.0,
        final_softcap=float(raw.get("final_logit_softcapping") or 0.0) if second else 0.0,
        score_scale=float(scalar) ** -0.5 if scalar else 0.0, post_norms=second,
        rms_scale_in_float32=True)


def tensors_from_hf(source, config: StackConfig):
    def norm(name):  # Gemma's RMSNorm multiplies by (1 + w)
        weight = source.get(name)
        return None if weight is None else weight + 1.0

    layer = "model.layers.{i}."
    ours = {"tok_emb.weight": source.get("model.embed_tokens.weight"),
            "final_ln.weight": norm("model.norm.weight")}
    # Gemma names the MLP's input norm post_attention_layernorm; Gemma 2 names so the norm of
    # the attention's output, and the MLP's input norm pre_feedforward_layernorm
    norms = ({"ln_1": "input_layernorm", "ln_attn_out": "post_attention_layernorm",
              "ln_2": "pre_feedforward_layernorm", "ln_mlp_out": "post_feedforward_layernorm"}
             if config.post_norms else
             {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm"})
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", layer.format(i=i)
        for ours_name, their_name in norms.items():
            ours[f"{mine}{ours_name}.weight"] = norm(f"{theirs}{their_name}.weight")
        attn = theirs + "self_attn."
        ours[mine + "attn.qkv.weight"] = source.cat(attn + "q_proj.weight",
                                                    attn + "k_proj.weight", attn + "v_proj.weight")
        if config.qkv_bias:
            ours[mine + "attn.qkv.bias"] = source.cat(attn + "q_proj.bias", attn + "k_proj.bias",
                                                      attn + "v_proj.bias")
        ours[mine + "attn.out.weight"] = source.get(attn + "o_proj.weight")
        if config.out_bias:
            ours[mine + "attn.out.bias"] = source.get(attn + "o_proj.bias")
        ours[mine + "mlp_in.weight"] = source.cat(theirs + "mlp.gate_proj.weight",
                                                  theirs + "mlp.up_proj.weight")
        ours[mine + "mlp_out.weight"] = source.get(theirs + "mlp.down_proj.weight")
    return config, ours
