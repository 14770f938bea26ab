"""OLMo and OLMo 2 (AI2): the Llama layout (rotary, SwiGLU, no biases, LM head tied or
separate) with their own norms.
- OLMo: every norm a LayerNorm without weight or bias (eps 1e-5), read as weight 1 and
  bias 0; clip_qkv, when given, clamps each entry of Q, K and V to [-clip, clip] right after
  the projection.
- OLMo 2: no norm on the sub-layers' inputs; each sub-layer's output goes through an RMSNorm
  before it joins the stream (post_attention_layernorm, post_feedforward_layernorm), and
  queries and keys through an RMSNorm over all heads' width (QK-norm "full") before the
  rotation."""

from __future__ import annotations

import dataclasses

import torch

from ...engine.config import StackConfig
from . import llama

NAME = "olmo"
MODEL_TYPES = ("olmo", "olmo2")
GGUF_ARCHITECTURES = ()
PREFIXES = ()


def config_from_hf(raw: dict) -> StackConfig:
    base = llama.config_from_hf(raw)
    if raw.get("model_type") == "olmo2":
        return dataclasses.replace(base, qk_norm="full", post_norms=True, input_norms=False,
                                   layer_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
                                   rms_scale_in_float32=True)  # Olmo2RMSNorm, as Gemma
    return dataclasses.replace(base, norm="layernorm", layer_norm_eps=1e-5,
                               clip_qkv=float(raw.get("clip_qkv") or 0.0))


def tensors_from_hf(source, config: StackConfig):
    layer = "model.layers.{i}."
    ours = {"tok_emb.weight": source.get("model.embed_tokens.weight")}
    if config.lm_head == "separate":
        ours["lm_head.weight"] = source.get("lm_head.weight")
    ones, zeros = torch.ones(config.d_model), torch.zeros(config.d_model)
    second = config.post_norms
    if second:
        ours["final_ln.weight"] = source.get("model.norm.weight")
    else:  # OLMo's LayerNorms have nothing to learn: weight 1, bias 0
        ours.update({"final_ln.weight": ones, "final_ln.bias": zeros})
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", layer.format(i=i)
        attn = theirs + "self_attn."
        ours.update(llama.projections_from_hf(source, config, mine, theirs))
        if second:
            ours[mine + "attn.q_norm.weight"] = source.get(attn + "q_norm.weight")
            ours[mine + "attn.k_norm.weight"] = source.get(attn + "k_norm.weight")
            for norm, name in (("ln_attn_out", "post_attention_layernorm"),
                               ("ln_mlp_out", "post_feedforward_layernorm")):
                ours[f"{mine}{norm}.weight"] = source.get(f"{theirs}{name}.weight")
        else:
            for norm in ("ln_1", "ln_2"):
                ours.update({f"{mine}{norm}.weight": ones, f"{mine}{norm}.bias": zeros})
    return config, ours
