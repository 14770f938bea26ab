"""The words of the Inside one head page (the steps' own words are in one_head): its notes,
the overview's texts written from the head's sizes and numbers, a large matrix in one line,
the steps' numbers as the screen shows them ("step 4b" on the page, "step 5" in a lesson),
the sentences under the later steps and the library call that gives every array."""

from __future__ import annotations

import numpy as np

from ...analysis.heads import head_name
from ...analysis.one_head.steps import HeadInternals, summarise
from ...maps.sets import map_set
from ..settings import md_escape

SHORT_TEXT = 40  # the page suggests texts up to about this many tokens
INTRO = ("What one attention head computes, step by step, with the real numbers of the chosen "
         "layer, head and text. Notation: T tokens, d_model the width of the model, d_k = "
         "d_model ÷ heads the width of one head. Every shape below is written as rows × "
         "columns.")
LESSON_HELP = ("For a class: one step of the head per screen, with Back and Next (or the arrow "
               "keys ← →, or a presenter's clicker), and the layer, head and query in the "
               "sidebar. The link keeps the step, so a lesson can be prepared as links.")
QUERY_HELP = ("The softmax's step spells out this token's row: its scores, its weights and the "
              "value vectors they mix.")
DOWNLOAD_HELP = ("X, W_Q, W_K, W_V, Q, K, V, (Q_normed, K_normed under QK-norm; Q_rot, K_rot "
                 "under RoPE), scores (scores_before_cap when they are soft-capped), mask, "
                 "masked_scores, weights, context, W_O, contribution, layer_output and the "
                 "biases; numpy.load() reads it.")
POSITION_BIAS_NOTE = ("This model has no position embeddings: a learned bias for each distance "
                      "between query and key is added to the scores (T5's relative position "
                      "bias, {ref}).")


def dims(n: int, prefix: str) -> list[str]:
    """Names of n dimensions: prefix0, prefix1, ..."""
    return [f"{prefix}{i}" for i in range(n)]


def too_long_what(n_head: int, n_tokens: int) -> str:
    """What the page holds, for the message that refuses a too long input."""
    return (f"Inside one head (every step of one layer's attention: {n_head} heads' weights "
            f"and this head's scores, {n_tokens:,}² each)")


def short_text_note(n_tokens: int) -> str | None:
    """A hint towards a shorter text when this one prints few numbers (None: short enough)."""
    if n_tokens <= SHORT_TEXT:
        return None
    return (f"This text has {n_tokens} tokens. The page is easiest to read with a short "
            f"sentence (up to about {SHORT_TEXT} tokens): then every small matrix prints its "
            f"numbers. Larger matrices are summarised.")


def summary_caption(array: np.ndarray, shown_rows: int, shown_cols: int) -> str:
    """A large matrix in one line: its size, the part drawn and summarise()'s numbers."""
    n_rows, n_cols = array.shape
    parts = [f"{name} {value:.4g}" if not name.startswith("−") else f"{int(value)} {name}"
             for name, value in summarise(array).items()]
    cut = (shown_rows, shown_cols) != (n_rows, n_cols)
    return (f"{n_rows} × {n_cols} = {n_rows * n_cols:,} numbers, too many to print: "
            + (f"showing the first {shown_rows} rows and {shown_cols} columns; " if cut else "")
            + "click a cell for its value. Whole array: " + " · ".join(parts) + ".")


def step_numbers(inside: HeadInternals, sections: list[tuple[str, str, bool]],
                 lesson: bool) -> dict[str, str]:
    """Each step's number as the screen shows it, by key: the page's steps of the head's
    computation (X is 1, the scores 5, a soft-cap 5b, ...) or, in a lesson, its screens (1 to
    n, as its progress line counts them): one numbering on the screen, and every reference
    to a step ("RoPE, step 4b") names the step as it is shown."""
    if lesson:
        return {key: str(k) for k, (_, key, _) in enumerate(sections, 1)}
    return {"memory": "0", "X": "1", "qkv": "2–4", "layout": "4a", "qknorm": "4b",
            "rope": rope_number(inside), "scores": "5", "softcap": "5b", "bias": "5b",
            "mask": "6", "softmax": "7", "follow": "7", "why": "7", "flash": "7",
            "context": "8", "output": "9", "contribution": "10", "gradients": "10",
            "cost": "10"}


def step_ref(numbers: dict[str, str], key: str) -> str:
    """A reference to a step: "step 4b" (the page), "step 5" (a lesson's screen); "" for a
    step this page or lesson does not show."""
    return f"step {numbers[key]}" if key in numbers else ""


def numbered(number: str | int | None) -> str:
    """A heading's number and its dot ("5. "), or nothing (a lesson's screen)."""
    return "" if number is None else f"{number}. "


def qkv_formula(inside: HeadInternals, lesson: bool = False) -> str:
    """Q, K and V as this model computes them: with their biases only when it has them (a
    lesson's narrow column: one under another)."""
    lines = [f"{letter} = XW_{letter}^h" + (f" + b_{letter}^h" if bias is not None else "")
             for letter, bias in (("Q", inside.b_Q), ("K", inside.b_K), ("V", inside.b_V))]
    if lesson:
        return r"\begin{gathered}" + r" \\ ".join(lines) + r"\end{gathered}"
    return r" \qquad ".join(lines)


def rope_number(inside: HeadInternals) -> str:
    """The rotary step's number: 4b, or 4c after a QK-norm (4b)."""
    return "4c" if inside.Q_normed is not None else "4b"


def overview_heading(inside: HeadInternals, kind: str | None) -> str:
    return (f"Head {head_name(inside.layer, inside.head)}: layer {inside.layer}, head "
            f"{inside.head} of {inside.n_head}" + (f" ({map_set(kind).label})" if kind else ""))


def cross_note(n_queries: int, n_keys: int) -> str:
    return (f"A cross-attention head: its {n_queries} queries come from the decoder (the "
            f"target tokens) and its {n_keys} keys and values from the encoder's output M "
            f"(the source tokens), so its scores and weights are {n_queries} × {n_keys}.")


def pipeline_text(inside: HeadInternals, kind: str | None, n_queries: int) -> str:
    """The head's steps in one line, with the real shapes."""
    t, d, dk, s_keys = n_queries, inside.d_model, inside.d_k, len(inside.columns)
    divide = " / √d_k" if inside.scaled_by_sqrt_d_k else ""
    bias_word = " → **+ relative position bias**" if inside.position_bias is not None else ""
    if inside.softcap:
        bias_word = f" → **soft-cap** {inside.softcap:g}·tanh(S / {inside.softcap:g})"
    norm_word = " → **QK-norm**" if inside.Q_normed is not None else ""
    norm_word += " → **RoPE** on Q and K" if inside.rotary else ""
    memory = "" if map_set(kind).square else "; K and V from M, S × d_k"  # cross-attention
    return (f"**X** (T × d_model = {t} × {d}) → **Q, K, V** of this head (T × d_k = {t} × "
            f"{dk} each{memory}){norm_word} → "
            f"**scores** Q Kᵀ{divide} ({t} × {s_keys}){bias_word} → **mask** → **softmax** = the "
            f"weights ({t} × {s_keys}) → "
            f"**weights × V** ({t} × {dk}) → × this head's slice of the output projection "
            f"**W_O** ({dk} × {d}) → its **contribution** ({t} × {d}).")


def head_formula(inside: HeadInternals, kind: str | None) -> str:
    """The head as one LaTeX formula, with the model's own scale and position bias."""
    keys_from = "X" if map_set(kind).square else "M"  # cross-attention: the encoder's output
    scores_tex = rf"(XW_Q^h)({keys_from}W_K^h)^{{\top}}"
    if inside.scaled_by_sqrt_d_k:
        scores_tex = rf"\frac{{{scores_tex}}}{{\sqrt{{d_k}}}}"
    elif inside.scale != 1.0:  # a checkpoint's own scale (GPT-2 variants)
        scores_tex += rf" \cdot {inside.scale:.4g}"
    bias_tex = " + B^h" if inside.position_bias is not None else ""
    if inside.softcap:  # Gemma 2
        cap = f"{inside.softcap:g}"
        scores_tex = rf"{cap} \tanh\!\left({scores_tex} \,/\, {cap}\right)"
    return (rf"\mathrm{{head}}_h = \operatorname{{softmax}}\!\left({scores_tex}{bias_tex}"
            rf" + M\right) {keys_from} W_V^h \; W_O^h")


def biases_text(inside: HeadInternals) -> str:
    """Which biases this head's layer adds, as it has them."""
    found = [name for name, bias in (("b_Q", inside.b_Q), ("b_K", inside.b_K),
                                     ("b_V", inside.b_V)) if bias is not None]
    if inside.output_bias is not None:
        found.append("b_O once for the whole layer")
    if not found:
        return "this model's attention has no biases (no b_Q, b_K, b_V or b_O)."
    return "its biases are included (" + ", ".join(found) + ")."


def overview_caption(inside: HeadInternals, ref) -> str:
    dk = inside.d_k
    return (f"Scaled dot-product attention, as in Vaswani et al. 2017 (*Attention Is All "
            f"You Need*). d_k = {dk}; √d_k = {dk ** 0.5:.3f}"
            + ("" if inside.scaled_by_sqrt_d_k else " (T5 does not divide by it: the scale is "
                                                    "folded into its initialisation of W_Q)")
            + ". "
            + (f"Q and K are normalized (QK-norm, {ref('qknorm')}) before the rotation. "
               if inside.Q_normed is not None else "")
            + (f"Q and K are rotated by position (RoPE, {ref('rope')}) before the scores. "
               if inside.rotary else "")
            + (f"The scores are soft-capped, {inside.softcap:g}·tanh(S / "
               f"{inside.softcap:g}), before the mask ({ref('softcap')}). " if inside.softcap
               else "")
            + (f"Key/value heads are shared: query heads "
               f"{', '.join(f'H{h}' for h in inside.sharing)} read the same K and V "
               f"(key/value head {inside.kv_head}). "
               if inside.n_kv_head and inside.n_kv_head < inside.n_head else "")
            + "Rows are tokens throughout (row i = token i), as in the library's code; "
            + biases_text(inside))


def followed_text(inside: HeadInternals, query: int, query_label: str,
                  strongest: list[tuple[int, float]], ref) -> str:
    """Where one query puts its weight, and what its output from the head is."""
    key_labels = inside.columns
    return (f"Token {query} '{md_escape(query_label)}' puts "
            + ", ".join(f"{share:.0%} on {j} '{md_escape(key_labels[j])}'"
                        for j, share in strongest)
            + f". Its output from this head (row {query} of {ref('context')}) is the weighted "
              f"average of the value rows: Σⱼ weightⱼ · Vⱼ.")


def all_heads_text(inside: HeadInternals, lesson: bool = False) -> str:
    """How the heads' contributions make the layer's output, and this head's share of it (a
    lesson's screen leaves the note on rollout, another page's, to the whole page)."""
    name = head_name(inside.layer, inside.head)
    return (f"**Putting the heads together.** The attention output of layer {inside.layer} is "
            f"the sum of the {inside.n_head} heads' contributions"
            + (" plus the output bias b_O" if inside.output_bias is not None else "")
            + f" (this is the same as concatenating the heads' outputs, T × d_model, and "
            f"multiplying by the full W_O). {name}'s contribution has "
            f"{inside.share_of_output:.0%} of the size (Frobenius norm) of all heads' "
            f"contributions together. "
            + ("A pre-norm model then adds it to the residual stream: h ← h + attention output."
               if inside.pre_ln else
               "A post-norm model (BERT) then adds it to the residual stream and normalizes: "
               "h ← LN(h + attention output).")
            + ("" if lesson else
               " Because of that residual path a token keeps much of its own information "
               "whatever its heads attend to; attention rollout (Abnar & Zuidema 2020, on the "
               "Attention maps page) models it as 0.5·A + 0.5·I per layer."))


def in_code(kind: str | None, layer: int, head: int) -> str:
    """The library call that returns every array the page shows."""
    return "In code: " + (
        "`from mha_viz.analysis.one_head.steps import inside_one_head; "
        f"inside_one_head(model, text, layer={layer}, head={head})`" if kind is None else
        "`from mha_viz.analysis.one_head.seq2seq_steps import inside_one_head_seq2seq; "
        f"inside_one_head_seq2seq(model, source, target, '{kind}', layer={layer}, "
        f"head={head})`") + " returns every array shown here."


# ------------------------------------------------------------- beyond the head's arithmetic

FLASH_MEMORY = ("Working memory of one head's scores in float32. The online softmax's running "
                "output (d_k floats per query) can cost more than it saves on a short input; at "
                "8,192 tokens the plain softmax holds 256 MiB per head, the online one a few "
                "hundred KiB.")
GRADIENTS = ("Training moves W_Q and W_O along the gradient of a loss. Autograd through the "
             "whole model gives dL/dW_Q^h and dL/dW_O^h; the chain rule gives them from what "
             "the head saw: **dL/dW_Q^h = Xᵀ dL/dQ^h** (X the head's input) and **dL/dW_O^h = "
             "C^hᵀ dL/dY** (C^h its context, Y the attention output).")


def flash_text(largest_difference: float) -> str:
    """Chunked and flash attention in words, with how far their weights are from the plain
    softmax's here."""
    return ("**Chunked attention** computes the softmax a block of query rows at a time: a row "
            "needs only its own scores. **Flash attention** (Dao et al. 2022) also takes the "
            "keys a block at a time with the **online softmax** (Milakov & Gimelshein 2018): "
            "each row keeps a running maximum m and a running sum l = Σ exp(s − m); when a "
            "block raises m, l and the output so far are multiplied by exp(m_old − m_new). No "
            "row ever holds all its scores, and the result is the same: the largest "
            f"difference from the plain softmax here is {largest_difference:.1e}.")


def learning_text(gradients_step: str) -> str:
    """The lesson's way to the Training page (gradients_step: where this lesson showed the
    gradients, "" when it did not)."""
    return ("Every number so far came from one trained checkpoint. Gradients "
            + (f"(those of {gradients_step}) " if gradients_step else "") + "are how it got "
            "there: step by step, W_Q, W_K, W_V and W_O move. mha-viz trained a small two-layer "
            "model in the open and kept its checkpoints along the way. Watch a **previous-token "
            "head** form in layer 0, then, suddenly, an **induction head** in layer 1 that reads "
            "it: the loss on repeated text drops at the same moment (the phase change of Olsson "
            "et al., 2022).")
