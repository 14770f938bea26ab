"""The model's card on Home, and what attention costs (its parameters and, for a causal model,
the KV cache at a context length the reader picks) for a lesson."""

from __future__ import annotations

import streamlit as st

from ..analysis.one_head import kv_cache_size as kv_cache
from ..models.model import Model
from .settings import md_escape, terms_in
from .state import synced


def model_card(model: Model) -> None:
    """Layers, heads, sizes, attention parameters per layer and where the weights came from."""
    info = model.info
    stacks = info.stack_layers  # {"encoder": 6, "decoder": 6}, or {"": 12}
    columns = st.columns([1, 1, 1, 1, 2])
    columns[0].metric("Layers", " + ".join(str(n) for n in stacks.values())
                      if len(stacks) > 1 else info.n_layer,
                      help=" + ".join(stacks) if len(stacks) > 1 else None)
    columns[1].metric("Heads per layer", info.n_head)
    columns[2].metric("d_model", info.d_model)
    columns[3].metric("d_head", info.d_head, help="d_model / heads")
    columns[4].metric("Attention parameters per layer",
                      f"{info.attention_params_per_layer:,}",
                      help="The numbers in W_Q, W_K, W_V and W_O (biases not counted): "
                           "4 × d_model² for plain multi-head attention, fewer when key/value "
                           "heads are shared. Not the attention weights the maps show.")
    # every set of maps in its stack's layers: an encoder-decoder's encoder self-attention,
    # then decoder self-attention and cross-attention in each decoder layer
    attention_layers = sum(stacks[maps.stack] for maps in model.map_sets)
    sharing = ""
    if info.n_kv_head != info.n_head:
        groups = {}
        for head, kv in enumerate(info.kv_heads):
            groups.setdefault(kv, []).append(f"H{head}")
        sharing = ("\n- **Heads that share keys and values** (" + info.attention_kind + "): "
                   + "; ".join(f"{', '.join(heads)} (K/V head {kv})"
                               for kv, heads in groups.items())
                   + ". Every query head still has its own attention map.")
    st.markdown(
        f"- **Attention:** {md_escape(info.sees)}\n"
        f"- **Architecture ({md_escape(info.model_type)}):** {md_escape(info.description)}\n"
        f"- **Context:** {info.max_positions:,} tokens; vocabulary {info.vocab_size:,} tokens\n"
        f"- **Attention parameters in all layers:** "
        f"{attention_layers * info.attention_params_per_layer:,}{sharing}\n"
        f"- **Weights from:** {md_escape(info.source)}\n"
        f"- **Held in:** {info.dtype} on {info.device}"
        + (" (the maps and scores are computed in float32 all the same)"
           if info.dtype != "float32" else "") + "\n"
        f"- **Score used by the pruning analyses:** {md_escape(info.score_name)}",
        help=terms_in(f"{info.description} {info.score_name}"))
    if info.writes_with_kv_cache:  # what generation keeps: its KV cache
        kv_cache_card(info)


def attention_cost(info, kv_cache: bool = True) -> None:
    """What attention costs, for a lesson: its parameters (4 d_model² for plain multi-head
    attention, fewer with shared key/value heads) and, for a causal model, the KV cache
    (unless kv_cache is False: a lesson gives it a screen of its own)."""
    st.markdown(
        f"**Parameters of one attention layer.** W_Q and W_O are d_model × (heads × d_head) = "
        f"{info.d_model} × {info.query_width}; W_K and W_V are d_model × (key/value heads × "
        f"d_head) = {info.d_model} × {info.key_value_width}. Together: "
        f"**{info.attention_params_per_layer:,}** numbers per layer (biases not counted), "
        f"against 4 × d_model² = {info.plain_attention_params:,} for plain "
        f"multi-head attention with d_head = d_model ÷ heads. The whole model has "
        f"{info.n_layer} such layers.")
    if kv_cache and info.writes_with_kv_cache:
        kv_cache_card(info)


def kv_cache_card(info) -> None:
    """What a causal model caches while it generates, at its shape and with its heads
    shared or not, for a context length the reader picks."""
    lengths = [n for n in (128, 512, 1024, 2048, 4096, 8192, 32768, 131072)
               if n <= max(info.max_positions, 128)]
    n_tokens = int(synced(st.select_slider, "kvlen", "Context length for the KV cache",
                          lengths[-1], options=lengths, valid=lambda v: int(v) in lengths,
                          format_func=lambda n: f"{n:,} tokens",
                          help="While it generates, a causal model keeps every layer's keys "
                               "and values of every token so far, each number as the model "
                               f"is held ({info.dtype}: {info.bytes_per_value} bytes)."))
    sizes = kv_cache.kv_cache_by_sharing(info, n_tokens)
    per_token = kv_cache.kv_cache_bytes(info.n_layer, info.n_kv_head, info.d_head, 1,
                                        info.bytes_per_value)
    st.markdown(
        f"**KV cache** (2 × {info.n_layer} layers × {info.n_kv_head} K/V heads × "
        f"d_head {info.d_head} × {info.bytes_per_value} bytes ({info.dtype}, as the model is "
        f"held here) = {kv_cache.bytes_text(per_token)} per token): "
        + "; ".join(f"{md_escape(name)}: **{kv_cache.bytes_text(size)}**"
                    for name, size in sizes.items())
        + f" at {n_tokens:,} tokens. Query heads that share a key/value head share its "
          f"cache: what multi-query and grouped-query attention save.")
