"""GPT-2 (and distilgpt2, gpt2-medium, ...): pre-LayerNorm, causal, learned positions, tanh
GELU, fused QKV (c_attn) stored in Conv1D layout [in, out], LM head tied to the embedding."""

from __future__ import annotations

from ...engine.config import StackConfig

NAME = "gpt2"
MODEL_TYPES = ("gpt2",)
GGUF_ARCHITECTURES = ()
PREFIXES = ("transformer.",)


def config_from_hf(raw: dict) -> StackConfig:
    d_model = int(raw["n_embd"])
    return StackConfig(
        model_type=NAME, n_layer=int(raw["n_layer"]), n_head=int(raw["n_head"]), d_model=d_model,
        d_ff=int(raw.get("n_inner") or 4 * d_model), vocab_size=int(raw["vocab_size"]),
        max_positions=int(raw["n_positions"]),
        layer_norm_eps=float(raw.get("layer_norm_epsilon", 1e-5)),
        activation=raw.get("activation_function", "gelu_new"),
        norm="layernorm", pre_norm=True, causal=True, positions="learned", lm_head="tied",
        qkv_names=("c_attn",),
        scale_attn_weights=bool(raw.get("scale_attn_weights", True)),
        scale_attn_by_inverse_layer_idx=bool(raw.get("scale_attn_by_inverse_layer_idx", False)))


def tensors_from_hf(source, config: StackConfig):
    def conv1d(name):  # Conv1D keeps [in, out]; nn.Linear wants [out, in]
        tensor = source.get(name)
        return None if tensor is None else tensor.T

    ours = {"tok_emb.weight": source.get("wte.weight"), "pos_emb.weight": source.get("wpe.weight"),
            "final_ln.weight": source.get("ln_f.weight"), "final_ln.bias": source.get("ln_f.bias")}
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", f"h.{i}."
        for norm in ("ln_1", "ln_2"):
            ours[f"{mine}{norm}.weight"] = source.get(f"{theirs}{norm}.weight")
            ours[f"{mine}{norm}.bias"] = source.get(f"{theirs}{norm}.bias")
        for a, b in (("attn.qkv", "attn.c_attn"), ("attn.out", "attn.c_proj"),
                     ("mlp_in", "mlp.c_fc"), ("mlp_out", "mlp.c_proj")):
            ours[f"{mine}{a}.weight"] = conv1d(f"{theirs}{b}.weight")
            ours[f"{mine}{a}.bias"] = source.get(f"{theirs}{b}.bias")
    return config, ours
