"""GPT-J (EleutherAI's GPT-J-6B): pre-LayerNorm, attention and MLP side by side reading one
norm (ln_1), rotary positions on the first rotary_dim dimensions of each head, no biases on
W_Q, W_K, W_V, W_O, a GELU MLP (fc_in, fc_out) and an LM head with a bias (read as a bias on
the logits).

GPT-J rotates adjacent pairs (dimensions 2j and 2j + 1 by the angle of frequency j:
rotate_every_two), where our engine rotates halves (j with j + r/2). The two are the same
rotation of reordered dimensions, so the rows of W_Q and W_K within each head's rotary part
are reordered when they load (row 2j + s of GPT-J is our row (r/2) s + j, as llama.cpp's
converter does for Llama in reverse): every score and map is GPT-J's own; only the order of
the rotating dimensions of Q and K, as Inside one head lists them (and says,
StackConfig.rotary_interleaved), differs from the checkpoint's."""

from __future__ import annotations

import torch

from ...core.errors import UnsupportedModelError
from ...engine.config import StackConfig

NAME = "gptj"
MODEL_TYPES = ("gptj",)
GGUF_ARCHITECTURES = ()
PREFIXES = ("transformer.",)


def config_from_hf(raw: dict) -> StackConfig:
    d_model, n_head = int(raw["n_embd"]), int(raw["n_head"])
    rotary_dim = raw.get("rotary_dim")
    if not rotary_dim:  # transformers would then rotate d_model dimensions of each head
        raise UnsupportedModelError("GPT-J without rotary_dim is not supported (every "
                                    "released GPT-J gives it)")
    return StackConfig(
        model_type=NAME, n_layer=int(raw["n_layer"]), n_head=n_head, d_model=d_model,
        d_ff=int(raw.get("n_inner") or 4 * d_model), vocab_size=int(raw["vocab_size"]),
        max_positions=int(raw.get("n_positions", 2048)),
        layer_norm_eps=float(raw.get("layer_norm_epsilon", 1e-5)),
        activation=raw.get("activation_function", "gelu_new"), norm="layernorm",
        pre_norm=True, causal=True, positions="rotary", rope_theta=10000.0,
        rotary_fraction=int(rotary_dim) / (d_model // n_head), qkv_bias=False, out_bias=False,
        mlp_bias=True, parallel_residual=True, qkv_names=("q_proj", "k_proj", "v_proj"),
        rotary_interleaved=True, lm_head="separate", logits_bias=True)


def halves_from_pairs(weight: torch.Tensor | None, config: StackConfig):
    """W_Q or W_K [H d_k, d] with each head's rotary rows in GPT-J's adjacent pairs -> the
    rotate-half order: row 2j + s of a head's first rotary_dim rows becomes row (r/2) s + j."""
    if weight is None:
        return None
    r = config.rotary_dim
    heads = weight.reshape(config.n_head, config.d_head, -1).clone()
    rotary = heads[:, :r].reshape(config.n_head, r // 2, 2, -1)
    heads[:, :r] = rotary.transpose(1, 2).reshape(config.n_head, r, -1)
    return heads.reshape(weight.shape)


def tensors_from_hf(source, config: StackConfig):
    ours = {"tok_emb.weight": source.get("wte.weight"), "lm_head.weight": source.get(
        "lm_head.weight"), "logits_bias": source.get("lm_head.bias")}
    norms = [("final_ln", "ln_f")]
    for i in range(config.n_layer):
        mine, theirs = f"blocks.{i}.", f"h.{i}."
        q, k = (halves_from_pairs(source.get(f"{theirs}attn.{p}_proj.weight"), config)
                for p in "qk")
        v = source.get(f"{theirs}attn.v_proj.weight")
        parts = (q, k, v)
        ours[mine + "attn.qkv.weight"] = None if any(t is None for t in parts) else torch.cat(parts)
        ours[mine + "attn.out.weight"] = source.get(f"{theirs}attn.out_proj.weight")
        ours.update(source.weight_and_bias(mine + "mlp_in", theirs + "mlp.fc_in"))
        ours.update(source.weight_and_bias(mine + "mlp_out", theirs + "mlp.fc_out"))
        # one norm, read by attention and MLP alike
        norms += [(mine + "ln_1", theirs + "ln_1"), (mine + "ln_2", theirs + "ln_1")]
    for a, b in norms:
        ours.update(source.weight_and_bias(a, b))
    return config, ours
