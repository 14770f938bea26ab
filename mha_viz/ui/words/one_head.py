"""The words of Inside one head: each step of one head's computation as the page writes it
(its symbol, shape, formula and a sentence or two with the head's real sizes and numbers),
made from a HeadInternals (analysis/one_head/steps.py), which keeps the arrays and numbers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .why import source_words

__all__ = ["Step", "head_steps", "layout_step", "projection_text"]

# the page's numbers of the steps another step names (a lesson numbers its screens instead)
STEP_NUMBERS = {"qknorm": "4b", "softcap": "5b"}


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
            f"Q_ia = Σ_b X_ib W_Q,ba" + (" + b_a" if inside.b_Q is not None else "")
            + f": np.einsum('ib,ba->ia', X, W_Q)"
            + (" + b_Q" if inside.b_Q is not None else "")
            + f" on these numbers gives this Q (largest difference "
              f"{inside.einsum_difference:.1e})."
            + (f" This model then clamps every entry of Q, K and V to ±{inside.clip_qkv:g} "
               f"(clip_qkv), and Q here is the clamped one." if inside.clip_qkv else ""))


def layout_step(inside) -> Step | None:
    """How the checkpoint stores W_Q, W_K, W_V, how all heads' Q is shaped, and the index
    notation run as an einsum (a decoder-only or encoder-only model's head; None for an
    encoder-decoder's, whose projections are not fused)."""
    if inside.kind:
        return None
    return Step("W_Q", "W_Q, W_K, W_V in the checkpoint, split into heads",
                f"(batch, heads, seq, d_k) = (1, {inside.n_head}, {inside.n_tokens}, "
                f"{inside.d_k})",
                r"Q^{h}_{ia} = \sum_{b} X_{ib}\, W^{h}_{Q,\,ba}"
                + (r" + b^{h}_{a}" if inside.b_Q is not None else ""),
                projection_text(inside), "dimension of d_model", "dimension of d_k")


def _layers(layers) -> str:
    """'layer 2' or 'layers 0, 1 and 3'."""
    layers = [str(layer) for layer in layers]
    if len(layers) == 1:
        return f"layer {layers[0]}"
    return f"layers {', '.join(layers[:-1])} and {layers[-1]}"


def _rms_range(rows) -> str:
    rms = np.sqrt((np.asarray(rows, dtype=np.float64) ** 2).mean(-1))
    return f"{rms.min():.3g} to {rms.max():.3g}"


def qk_norm_step(inside) -> Step:
    """The QK-norm (Qwen3, Gemma 3: each head's; OLMo 2: all heads' at once), between the
    projections and the rotation, with the sizes of Q's rows before and after it."""
    t, dk, h = inside.n_tokens, inside.d_k, inside.head
    sizes = (f" Here the rows of this head's Q have a root mean square of "
             f"{_rms_range(inside.Q)} before the norm and {_rms_range(inside.Q_normed)} after "
             f"it.")
    if inside.qk_norm == "full":
        kv_width = inside.n_kv_width or inside.n_head * dk
        kv = inside.kv_head
        formula = (r"\hat{Q}_{\mathrm{all}} = \operatorname{RMSNorm}_q(Q_{\mathrm{all}}), "
                   r"\quad \hat{q}^{h} = \hat{Q}_{\mathrm{all}}[:,\, h d_k \ldots (h+1) d_k - 1]"
                   r"\qquad \hat{K}_{\mathrm{all}} = \operatorname{RMSNorm}_k(K_{\mathrm{all}})")
        text = (f"QK-norm over the full width (OLMo 2's): before the rotation, all "
                f"{inside.n_head} heads' queries together, a row of H × d_k = "
                f"{inside.n_head * dk} numbers per token, go through one RMSNorm, and all "
                f"key/value heads' keys ({kv_width} per token) through another. What is shown "
                f"is this head's slice of the normalized full-width Q, its columns "
                f"{h * dk}–{(h + 1) * dk - 1} (K̂: columns {kv * dk}–{(kv + 1) * dk - 1} of "
                f"the normalized keys). Each row is divided by the root mean square of the "
                f"whole row, so this head's Q̂ depends on the other heads' queries too.")
    else:
        formula = (r"\hat{q}_i = \frac{q_i}{\operatorname{rms}(q_i)} \odot w_q \qquad "
                   r"\hat{k}_j = \frac{k_j}{\operatorname{rms}(k_j)} \odot w_k, \qquad "
                   r"\operatorname{rms}(x) = \sqrt{\tfrac{1}{d_k}\textstyle\sum_a x_a^2 "
                   r"+ \varepsilon}")
        text = (f"QK-norm, per head: before the rotation, each head's query and key go "
                f"through an RMSNorm of their own over the head's width d_k = {dk} (one "
                f"learned weight w_q of width {dk} shared by every query head, another, w_k, "
                f"by the keys). It bounds the size of the scores.")
    return Step("Q_normed", "QK-norm", f"T × d_k = {t} × {dk} (Q and K)", formula,
                text + sizes + " The steps below read the normalized Q̂ and K̂.",
                "token", "dimension of d_k")


def rope_scaling_text(scaling) -> str:
    """A layer's RoPE scaling in words, a sentence ("" without one)."""
    if scaling is None or scaling.kind == "default":
        return ""
    factor = f"{scaling.factor:g}"
    return " This layer's frequencies are " + _scaling_words(scaling, factor) + "."


def _scaling_words(scaling, factor: str) -> str:
    if scaling.kind == "linear":
        return (f"scaled linearly by a factor {factor} (every frequency divided by "
                f"{factor}: positions interpolated)")
    if scaling.kind == "llama3":
        return (f"scaled as Llama 3 does (factor {factor}, original context "
                f"{scaling.original_max_positions:,}: wavelengths past "
                f"{scaling.original_max_positions:,} / {scaling.low_freq_factor:g} tokens "
                f"divided by {factor}, those under {scaling.original_max_positions:,} / "
                f"{scaling.high_freq_factor:g} kept, a blend between)")
    if scaling.kind == "yarn":
        return (f"scaled by YaRN (factor {factor}, original context "
                f"{scaling.original_max_positions:,}: each frequency interpolated or kept by "
                f"how many turns it makes in that context; cos and sin times "
                f"{scaling.attention_factor:.4g})")
    return f"scaled by '{scaling.kind}' (factor {factor})"


def rope_base_text(inside) -> str:
    """The layer's scaling and the other layers' bases when they differ, in sentences."""
    text = rope_scaling_text(inside.rope_scaling)
    thetas = inside.layer_rope_thetas
    if len(set(thetas)) < 2:
        return text
    local = set(inside.local_layers)
    groups = []
    for theta in dict.fromkeys(thetas):
        layers = [layer for layer, own in enumerate(thetas) if own == theta]
        kind = (" (local)" if set(layers) <= local else " (global)" if not local & set(layers)
                else "")
        groups.append(f"θ = {theta:g} on {_layers(layers)}{kind}")
    return (text + " Not every layer of this model turns alike: " + ", ".join(groups)
            + f"; this is layer {inside.layer}.")


def window_text(inside) -> str:
    """What the sliding window hides in this layer, or that it is a global one."""
    if inside.window:
        w, t = inside.window, inside.n_tokens
        hidden = int(np.tril(np.isneginf(inside.mask)).sum())  # -inf on or below the diagonal
        return (f" Layer {inside.layer} is a local layer with a sliding window of {w} "
                f"tokens: query i sees only keys i − {w - 1} … i, so keys j ≤ i − {w} are −∞ "
                f"too and the weights lie in a band below the diagonal. "
                + (f"Here the window hides {hidden:,} scores the causal mask would have kept."
                   if hidden else
                   f"This text's {t} tokens fit in the window, so here it hides nothing."))
    if inside.local_layers:
        return (f" Layer {inside.layer} is a global layer: it sees every earlier key. This "
                f"model's {_layers(inside.local_layers)} are local, with a sliding window of "
                f"{inside.local_window} tokens.")
    return ""


def softcap_step(inside) -> Step:
    """The soft-cap of the scores (Gemma 2), with what it did to these."""
    c, t, s = inside.softcap, inside.n_tokens, len(inside.columns)
    effect = inside.softcap_effect()
    return Step(
        "scores", "soft-cap", f"T × T = {t} × {s}",
        rf"\tilde{{S}} = c \cdot \tanh(S / c), \qquad c = {c:g}",
        f"Soft-capping (Gemma 2's attn_logit_softcapping, c = {c:g}): every score goes "
        f"through c · tanh(s / c), which leaves small scores almost as they are and bends "
        f"large ones towards ±{c:g}, so no score leaves (−{c:g}, {c:g}). Here the largest "
        f"raw score a query sees is {effect['largest_raw']:.4g}, capped to "
        f"{effect['largest_capped']:.4g}; of the {effect['seen']:,} scores the mask keeps, "
        f"the cap changed {effect['changed']:,} ({effect['changed'] / effect['seen']:.0%}) "
        f"by more than 1%. The mask and the softmax read the capped scores.",
        "query token", "key token")


def _bias(letter: str, bias) -> str:
    """" + b_Q^{h}" when the model has that bias, else nothing (LaTeX)."""
    return "" if bias is None else rf" + b_{letter}^{{h}}"


def head_steps(inside, ref=lambda key: f"step {STEP_NUMBERS[key]}") -> list[Step]:
    """The steps in order, with shapes written in the page's notation; ref(key) names
    another step as the screen numbers it ("step 5b" on the page, "step 7" in a lesson)."""
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
                  "layer's self-attention" + (f" (normalized, {symbol})" if inside.pre_ln
                                              else "") + "; the keys and values come from "
                  "M, the encoder's output.")
    scale_text = (r"\frac{1}{\sqrt{d_k}}" if abs(inside.scale - dk ** -0.5) < 1e-9
                  else f"{inside.scale:.4g}")
    scale_note = (f"scaled by {inside.scale:.4g} so the scores do not grow with d_k = {dk}."
                  if inside.scale != 1.0 else
                  "not scaled: T5 folds 1/√d_k into its initialisation of W_Q.")
    if inside.softcap:
        scale_note += f" This model soft-caps them next ({ref('softcap')})."
    mask_text = ("Causal: query i may only see keys j ≤ i, so every score above "
                 "the diagonal becomes −∞ (its weight will be exactly 0)."
                 + window_text(inside)
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
                 + rope_base_text(inside)
                 + (f" What is rotated is Q̂ and K̂, after the QK-norm ({ref('qknorm')})."
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
        Step("Q", "Q", f"T × d_k = {t} × {dk}", r"Q = X\,W_Q^{h}" + _bias("Q", inside.b_Q),
             f"Queries: what each token is looking for. W_Q^h (d_model × d_k = {d} × {dk}) "
             f"is this head's slice of the query projection.",
             "token", "dimension of d_k"),
        Step("K", "K", f"{'S' if inside.cross else 'T'} × d_k = {s} × {dk}",
             f"K = {kv_from}" + r"\,W_K^{h}" + _bias("K", inside.b_K),
             "Keys: what each token offers to be found by." + shared, "token",
             "dimension of d_k"),
        Step("V", "V", f"{'S' if inside.cross else 'T'} × d_k = {s} × {dk}",
             f"V = {kv_from}" + r"\,W_V^{h}" + _bias("V", inside.b_V),
             "Values: what each token passes on when it is attended to.", "token",
             "dimension of d_k"),
        *([qk_norm_step(inside)] if inside.Q_normed is not None else []),
        *rotary_steps,
        # soft-capped: the scores before the cap are a step, the cap the next
        Step("scores_before_cap" if inside.softcap else "scores",
             "Q Kᵀ / √d_k" if inside.scale != 1.0 else "Q Kᵀ",
             f"T × {'S' if inside.cross else 'T'} = {t} × {s}",
             r"S = Q\,K^{\top}" + ("" if inside.scale == 1.0 else r" \cdot " + scale_text),
             f"How well query i matches key j, {scale_note}", "query token", "key token"),
        *([softcap_step(inside)] if inside.softcap else []),
        *bias_steps,
        Step("masked_scores", "mask", f"T × {'S' if inside.cross else 'T'} = {t} × {s}",
             r"S' = \tilde{S} + M" if inside.softcap else
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
             f"over all {inside.n_head} heads of C W_O^h"
             + (", plus the output bias b_O" if inside.output_bias is not None else "")
             + "; it is "
             f"then added to the residual stream.", "token", "dimension of d_model"),
    ]


# ------------------------------------------------------------ the lesson's wider screens

MOVES_NOT_HERE = ("What a head moves is computed for encoder-only and decoder-only models "
                  "traced from the sidebar's text: pick one to see this head both ways.")


def textbook_text(case, labels: list[str], score: float, parts: list[tuple[str, float]],
                  shown_on_toy: bool, writers: list[tuple[str, float]], probe_score: float,
                  peers: list[str]) -> str:
    """The induction head's score at its target, and where it comes from: the key sides of
    the previous-token heads it reads (writers: each of them, when several write nearly as
    much). Its induction score on this text and on the Training page's probe (probe_score;
    peers: the heads that score as high there)."""
    name = f"L{case.layer}.H{case.head}"
    q, k = case.query, case.key
    where = ("On this text" if shown_on_toy else
             "On the bundled **induction toy** (two layers, trained on repeated passages)")
    also = (f", as {' and '.join(peers)} {'does' if len(peers) == 1 else 'do'}" if peers
            else "")
    said = (f"{where}, **{name}** is an induction head: it scores {probe_score:.2f} on the "
            f"Training page's probe (repeated random tokens){also}, {case.induction_score:.2f} "
            f"on this text. At query {q} '{labels[q]}' it puts {case.weight:.2f} of its "
            f"weight on key {k} '{labels[k]}', the token that followed the earlier "
            f"'{labels[q]}'. Its score there is {score:+.1f}. ")
    if not writers:
        top, value = parts[0]
        return said + (f"The largest part of it comes from the key side of "
                       f"{source_words(top, {})} ({value:+.1f}).")
    heads = " and ".join(f"{s} ({v:+.1f})" for s, v in writers)
    total = sum(v for _, v in writers)
    sides = "the key side of" if len(writers) == 1 else "the key sides of"
    return said + (f"**{total:+.1f} of it comes from {sides} {heads}**, the layer-0 heads "
                   f"that wrote into key {k} the token before it, '{labels[k - 1]}' "
                   f"(the strongest previous-token head, L{case.previous_layer}."
                   f"H{case.previous_head}, scores {case.previous_score:.2f}); {name}'s query "
                   f"at '{labels[q]}' asks for exactly that: K-composition (Elhage et al. "
                   f"2021), the circuit that copies what followed before (Olsson et al. "
                   f"2022).")


def side_label(side: str, source_label: str) -> str:
    """A bar of the textbook figure: "K: L0.H0" (key side), "Q: embed" (query side)."""
    return f"{side[0].upper()}: {source_label}"


def moves_text(name: str, first_token: str, took: float, sent: float,
               chosen: tuple[str, float, float] | None = None) -> str:
    """The first-token share of the weights and of what it moves of the head shown (the one
    where they differ most), what the difference says, and the chosen head's (name, took,
    sent) when it is another."""
    said = (f"A weight says where a head looks; what reaches the query is the weight times "
            f"the vector the key sends, ‖α_ij · f(x_j)‖ with f the value and output "
            f"projections (Kobayashi et al. 2020). The second map gives each row those sizes "
            f"as shares. In {name} the first token ('{first_token}') takes {took:.2f} of the "
            f"weight and {sent:.2f} of what moves")
    if sent < 0.8 * took:
        said += (": it is a sink, a place to put weight that sends back little. Where a map "
                 "of weights is dark at the first token, the head mostly reads nothing.")
    else:
        said += ": here the two agree."
    if chosen is not None:
        own, own_took, own_sent = chosen
        said += (f" {name} is the head of this text where the two differ most; {own}, the "
                 f"head you follow, gives the first token {own_took:.2f} and "
                 f"{own_sent:.2f}.")
    return said


# The KV cache's figure (analysis.one_head.kv_cache_size.cache_roles): each cell's role
CACHE_ROLES = ("not kept", "cached", "computed now")
CACHE_COLOURS = ("#d9d9d9", "#2f6db5", "#c8102e")  # grey, blue, red: the figure's key
KV_CACHE_WHAT = ("**What is cached, and why.** A new token's query is scored against the "
                 "keys of every token so far and mixes their values. Those keys and values "
                 "do not change, so they are kept instead of recomputed; a past query is "
                 "never read again: not kept.")


def kv_cache_title(new_token: str) -> str:
    return f"Writing '{new_token}': what each layer holds"

# step 10's link: the toy's lesson, in a tab of its own (this session's model and text stay)
TOY_LESSON_LINK = "Open the lesson on the toy in a new tab"
TEXTBOOK_NOTE = "K: key side, Q: query side; red raises it"
TOKEN_BOXES_PX = 280  # the toy's text in boxes above the figure, on a lesson's screen
