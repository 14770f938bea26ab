"""The words of Inside one head: each step of one head's computation as the page writes it
(its symbol, shape, formula and a sentence or two with the head's real sizes and numbers),
made from a HeadInternals (steps.py), which keeps the arrays."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Step", "head_steps", "layout_step", "projection_text"]


@dataclass(frozen=True)
class Step:
    """One step of the computation, as the page shows it."""
    key: str  # attribute of HeadInternals holding the array
    symbol: str  # "Q", "softmax(...)" ...
    shape_text: str  # "T × d_k = 12 × 32"
    formula: str  # LaTeX (KaTeX) for the step
    explanation: str  # one or two plain sentences
    rows: str  # what the rows are: "token" | "d_k" | ...
    cols: str  # what the columns are


def projection_text(inside) -> str:
    """How the checkpoint stores W_Q, W_K, W_V, how all heads' Q is shaped, and the
    index notation, in the real sizes."""
    t, d, dk, h = inside.n_tokens, inside.d_model, inside.d_k, inside.n_head
    total = h * dk + 2 * (inside.n_kv_width or h * dk)
    first, last = inside.head * dk, (inside.head + 1) * dk - 1
    if len(inside.qkv_names) == 1 and inside.qkv_per_head:
        rows = inside.head * 3 * dk
        stored = (f"This checkpoint stores W_Q, W_K and W_V as one matrix, "
                  f"{inside.qkv_names[0]} ({total} × {d}), head by head: each head's "
                  f"query, key and value rows in turn, so this head's W_Q is its rows "
                  f"{rows}–{rows + dk - 1}. mha-viz reorders the rows into Q, K and V "
                  f"blocks when it loads them, so one product gives Q, K and V side by "
                  f"side, and this head's W_Q is then columns {first}–{last}.")
    elif len(inside.qkv_names) == 1:
        stored = (f"This checkpoint stores W_Q, W_K and W_V as one matrix, "
                  f"{inside.qkv_names[0]} ({d} × {total}); one product gives Q, K and V "
                  f"side by side, and this head's W_Q is its columns {first}–{last}.")
    elif inside.qkv_names:
        stored = (f"This checkpoint keeps three matrices ({', '.join(inside.qkv_names)}); "
                  f"mha-viz puts them side by side into one {d} × {total} matrix when it "
                  f"loads them, so one product gives Q, K and V, and this head's W_Q is "
                  f"its columns {first}–{last}.")
    else:
        stored = ""
    return (f"{stored} All heads at once: X ({t} × {d}) times every head's W_Q gives "
            f"{t} × {h * dk}, reshaped to (1, {t}, {h}, {dk}) and transposed to (batch, "
            f"heads, seq, d_k) = (1, {h}, {t}, {dk}), the shape the engine holds Q in; "
            f"merging the heads after attention does the reverse. In index notation "
            f"Q_ia = Σ_b X_ib W_Q,ba + b_a: np.einsum('ib,ba->ia', X, W_Q) on these "
            f"numbers gives this Q (largest difference {inside.einsum_difference:.1e})."
            + (f" This model then clamps every entry of Q, K and V to ±{inside.clip_qkv:g} "
               f"(clip_qkv), and Q here is the clamped one." if inside.clip_qkv else ""))



def layout_step(inside) -> Step | None:
    """How the checkpoint stores W_Q, W_K, W_V, how all heads' Q is shaped, and the index
    notation run as an einsum (a decoder-only or encoder-only model's head; None for an
    encoder-decoder's, whose projections are not fused)."""
    if inside.kind:
        return None
    return Step("W_Q", "W_Q, W_K, W_V in the checkpoint, split into heads",
                f"(batch, heads, seq, d_k) = (1, {inside.n_head}, {inside.n_tokens}, {inside.d_k})",
                r"Q^{h}_{ia} = \sum_{b} X_{ib}\, W^{h}_{Q,\,ba} + b^{h}_{a}",
                inside.projection_text(), "dimension of d_model", "dimension of d_k")



def head_steps(inside) -> list[Step]:
    """The steps in order, with shapes written in the page's notation."""
    t, d, dk = inside.n_tokens, inside.d_model, inside.d_k
    s = len(inside.columns)  # keys: t, or the source's tokens for cross-attention
    symbol = "LN" if inside.norm_name == "LayerNorm" else inside.norm_name
    x_note = (f"Pre-norm: the head reads the residual stream after the layer's first "
              f"{inside.norm_name}, X = {symbol}₁(h)." if inside.pre_ln else
              "Post-norm (BERT): the head reads the hidden state h entering the layer as it "
              "is (the LayerNorm comes after the residual addition).")
    shared = ""
    if inside.n_kv_head and inside.n_kv_head < inside.n_head:
        others = [h for h in inside.sharing if h != inside.head]
        shared = (f" This model shares key/value heads: query heads "
                  f"{', '.join(f'H{h}' for h in inside.sharing)} all read key/value head "
                  f"{inside.kv_head}, so their K and V are identical"
                  + (f" (H{others[0]} has this K too)." if others else "."))
    where = "the embeddings" if inside.layer == 0 else f"layer {inside.layer - 1}"
    if inside.cross:
        x_note = ("Cross-attention: the queries come from the decoder's stream after this "
                  "layer's self-attention" + (f" (normalised, {symbol})" if inside.pre_ln
                                              else "") + "; the keys and values come from "
                  "M, the encoder's output.")
    scale_text = (r"\frac{1}{\sqrt{d_k}}" if abs(inside.scale - dk ** -0.5) < 1e-9
                  else f"{inside.scale:.4g}")
    scale_note = (f"scaled by {inside.scale:.4g} so the scores do not grow with d_k = {dk}."
                  if inside.scale != 1.0 else
                  "not scaled: T5 folds 1/√d_k into its initialisation of W_Q.")
    if inside.softcap:
        scale_note += (f" Then soft-capped: s → {inside.softcap:g} · tanh(s / "
                       f"{inside.softcap:g}), so no score leaves ±{inside.softcap:g} (Gemma 2).")
    window_text = (f" This layer also has a sliding window of {inside.window} tokens: "
                   f"keys j ≤ i − {inside.window} are −∞ too, so the weights lie in a "
                   f"band below the diagonal." if inside.window else "")
    mask_text = ("Causal: query i may only see keys j ≤ i, so every score above "
                 "the diagonal becomes −∞ (its weight will be exactly 0)." + window_text
                 if inside.causal else
                 "Cross-attention is not masked: every target position may read every "
                 "source token." if inside.cross else
                 "Bidirectional: nothing is masked (the mask is all zeros); with "
                 "padding, padded keys would get −∞.")
    rotary_steps = []
    if inside.rotary:
        rotary_steps = [
            Step("Q_rot", "RoPE", f"T × d_k = {t} × {dk} (Q and K)",
                 r"q'_i = R_{\theta, i}\, q_i \qquad k'_j = R_{\theta, j}\, k_j",
                 f"Rotary positions (Su et al. 2021): each pair of dimensions (j, j + "
                 f"{inside.rotary_dim // 2}) of a query and a key is rotated by an angle "
                 f"i · θ^(−2j/{inside.rotary_dim}) proportional to the token's position i "
                 f"(θ = {inside.rope_theta:g}). Then q'_i · k'_j depends on i − j only: "
                 f"positions enter the scores, never the values (V is not rotated)."
                 + (" Before the rotation, each head's query and key went through an "
                    "RMSNorm of their own (QK-norm): Q and K here are the normalised ones."
                    if inside.Q_normed is not None else "")
                 + (f" This checkpoint rotates adjacent pairs (2j, 2j + 1) instead; it is "
                    f"the same rotation of reordered dimensions, so mha-viz reordered the "
                    f"first {inside.rotary_dim} rows of each head's W_Q and W_K when it "
                    f"loaded them (row 2j + s is row {inside.rotary_dim // 2} s + j here): "
                    f"the scores are the model's own, Q's and K's rotating dimensions "
                    f"are listed in the reordered order." if inside.rotary_interleaved
                    else ""),
                 "token", "dimension of d_k")]
    memory_steps, kv_from = [], "X"
    if inside.cross:
        kv_from = "M"
        memory_steps = [Step(
            "memory", "M", f"S × d_model = {s} × {d}",
            r"M \in \mathbb{R}^{S \times d_{model}}",
            "The encoder's output, one row per source token: the same M for every "
            "cross-attention layer of the decoder.", "source token", "dimension of d_model")]
    bias_steps = []
    if inside.position_bias is not None:
        direction = ("the decoder's buckets count only keys before the query (later keys "
                     "are masked anyway)" if inside.causal else
                     "half the buckets are for keys after the query, half for keys "
                     "before")
        bias_steps = [Step(
            "position_bias", "relative position bias", f"T × T = {t} × {t}",
            r"S'' = S + B^{h}_{\mathrm{bucket}(j - i)}",
            f"T5 has no position embeddings. Each pair (query i, key j) falls into one of "
            f"{inside.relative_buckets} buckets by its distance j − i: {direction}; the "
            f"first buckets are exact distances, the rest grow logarithmically up to "
            f"{inside.relative_max_distance}, and every farther distance shares the last. "
            f"This head adds its learned value for the pair's bucket to the score. The "
            f"table belongs to the stack's first layer and every layer adds the same "
            f"bias.", "query token", "key token")]
    return [
        *memory_steps,
        Step("X", "X", f"T × d_model = {t} × {d}", r"X \in \mathbb{R}^{T \times d_{model}}",
             f"The input of layer {inside.layer}'s attention, one row per token, coming from "
             f"{where}. " + x_note, "token", "dimension of d_model"),
        Step("Q", "Q", f"T × d_k = {t} × {dk}", r"Q = X\,W_Q^{h} + b_Q^{h}",
             f"Queries: what each token is looking for. W_Q^h (d_model × d_k = {d} × {dk}) "
             f"is this head's slice of the query projection.",
             "token", "dimension of d_k"),
        Step("K", "K", f"{'S' if inside.cross else 'T'} × d_k = {s} × {dk}",
             f"K = {kv_from}" + r"\,W_K^{h} + b_K^{h}",
             "Keys: what each token offers to be found by." + shared, "token",
             "dimension of d_k"),
        Step("V", "V", f"{'S' if inside.cross else 'T'} × d_k = {s} × {dk}",
             f"V = {kv_from}" + r"\,W_V^{h} + b_V^{h}",
             "Values: what each token passes on when it is attended to.", "token",
             "dimension of d_k"),
        *rotary_steps,
        Step("scores", "Q Kᵀ / √d_k" if inside.scale != 1.0 else "Q Kᵀ",
             f"T × {'S' if inside.cross else 'T'} = {t} × {s}",
             r"S = Q\,K^{\top}" + ("" if inside.scale == 1.0 else r" \cdot " + scale_text),
             f"How well query i matches key j, {scale_note}", "query token", "key token"),
        *bias_steps,
        Step("masked_scores", "mask", f"T × {'S' if inside.cross else 'T'} = {t} × {s}",
             r"S' = S + M" if not bias_steps else r"S' = S'' + M",
             mask_text, "query token", "key token"),
        Step("weights", "softmax", f"T × {'S' if inside.cross else 'T'} = {t} × {s}",
             r"A = \operatorname{softmax}_{\text{row}}(S')",
             "Each row becomes a probability distribution over the keys (it sums to 1): "
             "this is the attention map the other pages show.", "query token", "key token"),
        Step("context", "weights × V", f"T × d_k = {t} × {dk}", r"C = A\,V",
             "Each token's output from this head: the attention-weighted average of the "
             "value vectors.", "token", "dimension of d_k"),
        Step("W_O", "W_O slice", f"d_k × d_model = {dk} × {d}", r"W_O^{h}",
             f"This head's slice of the output projection: the {dk} rows of W_O (d_model × "
             f"d_model = {d} × {d}) that multiply this head's part of the concatenated "
             f"heads.", "dimension of d_k", "dimension of d_model"),
        Step("contribution", "contribution", f"T × d_model = {t} × {d}",
             r"C\,W_O^{h}",
             f"What this head adds to the layer's output. The attention output is the sum "
             f"over all {inside.n_head} heads of C W_O^h, plus the output bias b_O; it is "
             f"then added to the residual stream.", "token", "dimension of d_model"),
    ]
