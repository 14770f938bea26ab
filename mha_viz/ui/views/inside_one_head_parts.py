"""Inside one head's own pieces: which steps the page shows and in what order, the texts it
writes from the head's sizes and numbers, a step's matrix (whole when small, a corner and a
summary when large) and the sections on the gradients and on flash attention."""

from __future__ import annotations

from functools import partial

import numpy as np
import streamlit as st

from ... import plots
from ...analysis.one_head import blockwise
from ...analysis.one_head import gradients as head_gradients
from ...analysis.one_head.steps import HeadInternals, summarise
from ...server import export
from ..selection import Selection
from ..stores import memo
from ..lesson import figure_place, on_lesson_screen
from ..output import download_csv, show_figure
from ..settings import md_escape, terms_in
from ..state import synced
from ..words.one_head import Step, layout_step

VALUES_MAX = 40  # matrices up to this many rows and columns show their values in the cells
VIEW_ROWS = 64  # larger matrices: this many rows (tokens) are drawn ...
VIEW_COLS = 768  # ... and this many columns; the CSV has everything
SHORT_TEXT = 40  # the page suggests texts up to about this many tokens
LESSON_LABEL_CHARS = 6  # a lesson's axis labels: tokens cut to this many characters

KIND_NAMES = {"encoder": " (encoder self-attention)", "decoder": " (decoder self-attention)",
              "cross": " (cross-attention)"}


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


def matrix_view(n_rows: int, n_cols: int, fmt: str) -> tuple[bool, int, int, str]:
    """How a step's matrix is drawn: (its values written in the cells, rows drawn, columns
    drawn, the values' format: wide rows get one decimal)."""
    small = n_rows <= VALUES_MAX and n_cols <= VALUES_MAX
    if small and n_cols > 20:
        fmt = ".1f"
    return small, min(n_rows, VIEW_ROWS), min(n_cols, VIEW_COLS), fmt


def summary_caption(array: np.ndarray, shown_rows: int, shown_cols: int) -> str:
    """A large matrix in one line: its size, the part drawn and summarise()'s numbers."""
    n_rows, n_cols = array.shape
    parts = [f"{name} {value:.4g}" if not name.startswith("−") else f"{int(value)} {name}"
             for name, value in summarise(array).items()]
    cut = (shown_rows, shown_cols) != (n_rows, n_cols)
    return (f"{n_rows} × {n_cols} = {n_rows * n_cols:,} numbers, too many to print: "
            + (f"showing the first {shown_rows} rows and {shown_cols} columns; " if cut else "")
            + "click a cell for its value. Whole array: " + " · ".join(parts) + ".")


def sections(inside: HeadInternals, lesson: bool, query: int, query_label: str,
             gradients: bool) -> list[tuple[str, str, bool]]:
    """The page's sections in order: (title, key, folded). On the whole page a folded section
    is computed and drawn when opened, so the page opens on the head's input and the list of
    steps; in a lesson each is a screen, and the steps the whole page draws inside another
    (the layout, the followed query, the contribution) get screens of their own. gradients:
    the model's W_QKV is fused (GPT-2, BERT, the Llama family), not an encoder-decoder's."""
    layout = layout_step(inside) is not None
    return [
        ("The whole head in one line", "overview", False),
        *([("M: the encoder's output", "memory", False)] if inside.memory is not None else []),
        ("X: what the head reads", "X", False),
        ("Q, K, V: three projections", "qkv", True),
        *([("How the checkpoint stores them, and the heads' shapes", "layout", True)]
          if lesson and layout else []),
        *([("QK-norm: " + ("all heads' queries and keys normalized together"
                            if inside.qk_norm == "full" else "each head's query and key "
                            "normalized"), "qknorm", True)] if inside.Q_normed is not None
          else []),
        *([("Rotary positions (RoPE)", "rope", True)] if inside.rotary else []),
        ("Scores: every query against every key", "scores", True),
        *([("Soft-capping: the scores through tanh", "softcap", True)] if inside.softcap
          else []),
        *([("T5's relative position bias", "bias", True)]
          if inside.position_bias is not None else []),
        ("The mask", "mask", True),
        ("Softmax: the attention weights", "softmax", True),
        *([(f"Follow query {query} '{query_label}'", "follow", True)] if lesson else []),
        # a cell clicked on the scores or the weights, by source (ui.why); the lesson's
        # screen shows the textbook case instead, on the induction toy
        ("Why an induction head attends where it does" if lesson else
         "Why this head attends there: its score split by source",
         "textbook" if lesson else "why", True),
        ("Chunked and flash attention: the same weights with less memory", "flash", True),
        ("Weights × V: each token's mix of values", "context", True),
        *([("What a head moves: the weights times the values' size", "moves", True)]
          if lesson else []),
        ("W_O: from one head back to the model's width", "output", True),
        *([("The head's contribution, and all heads together", "contribution", True)]
          if lesson else []),
        *([("How the head learns: the gradients of W_Q and W_O", "gradients", True)]
          if gradients else []),
        *([("Watch heads learn: induction heads across training", "learning", True)]
          if lesson else []),
        ("What attention costs: parameters and the KV cache", "cost", True),
    ]


# the lesson's screens of words alone (the others: words beside their figures)
WORDS_ONLY = frozenset({"overview", "layout", "follow", "cost", "learning"})


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


# ------------------------------------------------------------------ the overview's texts


def score_span(inside: HeadInternals) -> float | None:
    """One colour scale for the scores before and after a soft-cap (the largest |raw score|),
    so the cap's bend shows as paler cells; None without a cap."""
    if inside.scores_before_cap is None:
        return None
    raw = inside.scores_before_cap
    return float(np.abs(raw[np.isfinite(raw)]).max())


def rope_number(inside: HeadInternals) -> str:
    """The rotary step's number: 4b, or 4c after a QK-norm (4b)."""
    return "4c" if inside.Q_normed is not None else "4b"


def overview_heading(inside: HeadInternals, kind: str | None) -> str:
    return (f"Head {plots.head_name(inside.layer, inside.head)}: layer {inside.layer}, head "
            f"{inside.head} of {inside.n_head}" + KIND_NAMES.get(kind or "", ""))


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
    return (f"**X** (T × d_model = {t} × {d}) → **Q, K, V** of this head (T × d_k = {t} × "
            f"{dk} each{'; K and V from M, S × d_k' if kind == 'cross' else ''}){norm_word} → "
            f"**scores** Q Kᵀ{divide} ({t} × {s_keys}){bias_word} → **mask** → **softmax** = the "
            f"weights ({t} × {s_keys}) → "
            f"**weights × V** ({t} × {dk}) → × this head's slice of the output projection "
            f"**W_O** ({dk} × {d}) → its **contribution** ({t} × {d}).")


def head_formula(inside: HeadInternals, kind: str | None) -> str:
    """The head as one LaTeX formula, with the model's own scale and position bias."""
    keys_from = "M" if kind == "cross" else "X"
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


# ------------------------------------------------------------------ the later steps' texts


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
    name = plots.head_name(inside.layer, inside.head)
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


# ------------------------------------------------------------------ widgets


def show_matrix(array: np.ndarray, rows: list[str], cols: list[str], title: str, key: str,
                diverging: bool = True, colorscale: str | None = None, fmt: str = ".2f",
                row_title: str = "", col_title: str = "", share: float = 1.0,
                span: float | None = None, on_select=None) -> None:
    """Small: a heatmap with the values written in. Large: the top-left corner as a heatmap
    without values, plus a one-line summary of the whole array. span: the diverging scale's
    ±reach (default the drawn part's largest |value|). on_select: a click on a cell calls it
    (a query x key map: ui.pick_cell)."""
    small, n_rows, n_cols, fmt = matrix_view(*array.shape, fmt)
    fig = plots.tensor_figure(array[:n_rows, :n_cols], rows[:n_rows], cols[:n_cols], title,
                              show_values=small, diverging=diverging, colorscale=colorscale,
                              fmt=fmt, row_title=row_title, col_title=col_title, span=span,
                              pickable=on_select is not None)
    show_figure(fig, key=key, alt=title, share=share, on_select=on_select)
    if not small and not on_lesson_screen():  # a lesson's screen holds the figure alone
        st.caption(summary_caption(array, n_rows, n_cols))


def step_header(number: int | str | None, step: Step, title: str | None = None,
                help_terms: bool = True, explain: bool = True) -> None:
    """A step's heading (its number, none on a lesson's screen; symbol and shape), formula
    and explanation (unless explain is False)."""
    st.markdown(f"#### {numbered(number)}{title or step.symbol}: {step.shape_text}")
    st.latex(step.formula)
    if explain:
        st.markdown(step.explanation, help=terms_in(step.explanation) if help_terms else None)


def csv_button(array, rows, cols, what: str, key: str, stem: str, lesson: bool) -> None:
    """A step's matrix as CSV (none in a lesson: its screen holds the step, the whole page
    has the downloads)."""
    if lesson:
        return
    download_csv(partial(export.matrix_csv, array, rows, cols, corner=""),
                 export.safe_filename(stem, what, suffix=".csv"), f"{what} as CSV",
                 key=f"dl_{key}")


def learning_step(ref) -> None:
    """The lesson's link to the Training page: the same weights, watched as they trained
    (its title is the lesson's progress line)."""
    shown = ref("gradients")  # where they are, if this lesson shows them
    st.markdown(
        "Every number so far came from one trained checkpoint. Gradients "
        + (f"(those of {shown}) " if shown else "") + "are how it got there: step by step, "
        "W_Q, W_K, W_V and W_O move. mha-viz trained a small two-layer model in the open and "
        "kept its checkpoints along the way. Watch a **previous-token head** form in layer 0, "
        "then, suddenly, an **induction head** in layer 1 that reads it: the loss on repeated "
        "text drops at the same moment (the phase change of Olsson et al., 2022).")
    st.page_link("pages/10_Training.py", icon="▶", label="**Open Training: watch attention "
                 "learn**", query_params={"series": "induction-toy"})


def gradients_section(model, selection: Selection, layer: int, head: int, d_cols: list,
                      k_cols: list) -> None:
    """dL/dW_Q and dL/dW_O of this head by autograd, and the two formulas that give them."""
    losses = head_gradients.losses_for(model)
    loss = synced(st.radio, "gloss", "Loss", losses[0], options=list(losses),
                  horizontal=True, valid=lambda v: v in losses,
                  format_func={"next_token": "next-token loss of the text",
                               "output_norm": "½‖Y‖², Y this layer's attention output"}.get,
                  help="What the gradient is of. The next-token loss is what a causal "
                       "model is trained on; ½‖Y‖² has dL/dY = Y, easy to follow by hand.")
    st.markdown(
        "Training moves W_Q and W_O along the gradient of a loss. Autograd through the whole "
        "model gives dL/dW_Q^h and dL/dW_O^h; the chain rule gives them from what the head "
        "saw: **dL/dW_Q^h = Xᵀ dL/dQ^h** (X the head's input) and **dL/dW_O^h = C^hᵀ dL/dY** "
        "(C^h its context, Y the attention output).")
    if not synced(st.toggle, "grads", "Compute the gradients (one backward pass)", False):
        st.caption("One backward pass through the whole model; switch it on to see them.")
        return
    found = memo(head_gradients.head_gradients, model, text=selection.text, layer=layer,
                 head=head, loss=loss)
    st.markdown(f"Loss L = {found.loss:.4f}. Largest difference between autograd and the "
                f"two formulas: {found.largest_difference:.1e}.")
    with figure_place():
        show_matrix(found.d_W_Q, d_cols, k_cols, "dL/dW_Q of this head", "grad_q",
                    fmt=".2g", row_title="d_model", col_title="d_k")
        show_matrix(found.d_W_O, k_cols, d_cols, "dL/dW_O of this head", "grad_o",
                    fmt=".2g", row_title="d_k", col_title="d_model")


def flash_section(inside: HeadInternals, query: int, query_label: str) -> None:
    """Chunked attention and flash attention's online softmax on this head's own scores:
    the running maximum and sum of the followed query, and the memory each way needs."""
    n_rows, n_keys = inside.masked_scores.shape
    block = int(synced(st.number_input, "fblock", "Block size (rows, or keys)",
                       max(1, n_keys // 4), min_value=1, max_value=max(1, n_keys),
                       valid=lambda v: 1 <= int(v) <= max(1, n_keys),
                       help="Chunked attention takes this many query rows at a time; the "
                            "online softmax this many keys at a time."))
    online = blockwise.online_softmax_attention(inside.masked_scores, inside.V, block)
    checks = blockwise.blockwise_check(inside.masked_scores, inside.V, block)
    st.markdown(
        "**Chunked attention** computes the softmax a block of query rows at a time: a row "
        "needs only its own scores. **Flash attention** (Dao et al. 2022) also takes the keys "
        "a block at a time with the **online softmax** (Milakov & Gimelshein 2018): each row "
        "keeps a running maximum m and a running sum l = Σ exp(s − m); when a block raises m, "
        "l and the output so far are multiplied by exp(m_old − m_new). No row ever holds all "
        "its scores, and the result is the same: the largest difference from the plain "
        f"softmax here is {max(checks.values()):.1e}.")
    with figure_place():  # a lesson's screen: the tables beside the words
        st.markdown(f"Query {query} '{md_escape(query_label)}', {block} keys at a time:")
        running = blockwise.running_table(online, query, list(inside.columns))
        st.dataframe(running, hide_index=True, width="stretch",
                     height=min(180, 38 + 35 * len(running)) if on_lesson_screen() else "auto")
        memory = blockwise.memory_table(n_rows, n_keys, inside.d_k, block)
        st.dataframe(memory, hide_index=True, width="stretch")
        if not on_lesson_screen():  # a lesson's screen: the tables and their words alone
            st.caption("Working memory of one head's scores in float32. The online softmax's "
                       "running output (d_k floats per query) can cost more than it saves "
                       "on a short input; at 8,192 tokens the plain softmax holds 256 MiB per "
                       "head, the online one a few hundred KiB.")
