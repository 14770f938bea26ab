"""Inside one head, for the classroom: every step of one head's computation with the real
tensors of the chosen layer, head and text."""

from functools import partial

import numpy as np
import streamlit as st

from mha_viz import plots, ui
from mha_viz.analysis.one_head import blockwise
from mha_viz.analysis.one_head import gradients as head_gradients
from mha_viz.analysis.one_head.seq2seq_steps import inside_one_head_seq2seq
from mha_viz.analysis.one_head.steps import (inside_bytes_per_squared_token, inside_one_head,
                                             summarise)
from mha_viz.server import export

VALUES_MAX = 40  # matrices up to this many rows and columns show their values in the cells
VIEW_ROWS = 64  # larger matrices: this many rows (tokens) are drawn ...
VIEW_COLS = 768  # ... and this many columns; the CSV has everything
SHORT_TEXT = 40  # the page suggests texts up to about this many tokens

ui.page_setup("Inside one head")
selection = ui.sidebar(shows_saved_traces=False, encoder_decoders=True)
lesson = ui.synced(st.toggle, "lesson", "Lesson mode: one step per screen", False,
                   help="For a class: one step of the head per screen, with Back and Next "
                        "(or the arrow keys ← →, or a presenter's clicker), and the layer, "
                        "head "
                        "and query in the sidebar. The link keeps the step, so a lesson can "
                        "be prepared as links.")
if not lesson:  # a lesson's screen is for the step itself
    st.markdown(
        "What one attention head computes, step by step, with the real numbers of the chosen "
        "layer, head and text. Notation: T tokens, d_model the width of the model, d_k = "
        "d_model ÷ heads the width of one head. Every shape below is written as rows × "
        "columns.")


def dims(n: int, prefix: str) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def show_matrix(array: np.ndarray, rows: list[str], cols: list[str], title: str, key: str,
                diverging: bool = True, colorscale: str | None = None, fmt: str = ".2f",
                row_title: str = "", col_title: str = "", share: float = 1.0) -> None:
    """Small: a heatmap with the values written in. Large: the top-left corner as a heatmap
    without values, plus a one-line summary of the whole array."""
    n_rows, n_cols = array.shape
    small = n_rows <= VALUES_MAX and n_cols <= VALUES_MAX
    shown = array[:VIEW_ROWS, :VIEW_COLS]
    cut = shown.shape != array.shape
    if small and n_cols > 20:
        fmt = ".1f"  # wide rows: one decimal fits the cells
    fig = plots.tensor_figure(shown, rows[:shown.shape[0]], cols[:shown.shape[1]], title,
                              show_values=small, diverging=diverging, colorscale=colorscale,
                              fmt=fmt, row_title=row_title, col_title=col_title)
    ui.show_figure(fig, key=key, alt=title, share=share)
    if not small:
        stats = summarise(array)
        parts = [f"{name} {value:.4g}" if not name.startswith("−") else f"{int(value)} {name}"
                 for name, value in stats.items()]
        st.caption(f"{n_rows} × {n_cols} = {n_rows * n_cols:,} numbers, too many to print: "
                   + ("showing the first "
                      f"{shown.shape[0]} rows and {shown.shape[1]} columns; " if cut else "")
                   + "hover a cell for its value. Whole array: " + " · ".join(parts) + ".")


def gradients_section(model, layer: int, head: int, d_cols: list, k_cols: list) -> None:
    """dL/dW_Q and dL/dW_O of this head by autograd, and the two formulas that give them."""
    losses = head_gradients.losses_for(model)
    loss = ui.synced(st.radio, "gloss", "Loss", losses[0], options=list(losses),
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
    if not ui.synced(st.toggle, "grads", "Compute the gradients (one backward pass)", False):
        st.caption("One backward pass through the whole model; switch it on to see them.")
        return
    found = ui.memo(head_gradients.head_gradients, model, key=(selection.key, layer, head,
                                                                 "gradients", loss),
                    text=selection.text, layer=layer, head=head, loss=loss)
    st.markdown(f"Loss L = {found.loss:.4f}. Largest difference between autograd and the "
                f"two formulas: {found.largest_difference:.1e}.")
    show_matrix(found.d_W_Q, d_cols, k_cols, "dL/dW_Q of this head", "grad_q",
                fmt=".2g", row_title="d_model", col_title="d_k")
    show_matrix(found.d_W_O, k_cols, d_cols, "dL/dW_O of this head", "grad_o",
                fmt=".2g", row_title="d_k", col_title="d_model")


def flash_section(inside, query: int, query_label: str, key_labels: list) -> None:
    """Chunked attention and flash attention's online softmax on this head's own scores:
    the running maximum and sum of the followed query, and the memory each way needs."""
    n_rows, n_keys = inside.masked_scores.shape
    block = int(ui.synced(st.number_input, "fblock", "Block size (rows, or keys)",
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
    st.markdown(f"Query {query} '{ui.md_escape(query_label)}', {block} keys at a time:")
    st.dataframe(blockwise.running_table(online, query, key_labels), hide_index=True,
                 width="stretch")
    memory = blockwise.memory_table(n_rows, n_keys, inside.d_k, block)
    st.dataframe(memory, hide_index=True, width="stretch")
    st.caption("Working memory of one head's scores in float32. On a short input the "
               "online softmax's running output (a row of d_k floats per query) can cost "
               "more than it saves; the saving grows with the square of the length: at 8,192 "
               "tokens the plain softmax holds 256 MiB per head, the online one a few hundred "
               "KiB.")


with ui.guard():
    kind = selection.kind  # an encoder-decoder's encoder, decoder or cross-attention
    if kind is None:
        seq = None
        trace = ui.get_trace(selection)
    else:
        seq = ui.get_seq2seq_trace(selection)
        # its layers, heads and query rows (cross-attention's rows are the decoder's)
        trace = seq.as_trace("encoder" if kind == "encoder" else "decoder")
    model = selection.model
    with st.sidebar if lesson else st.container():
        ui.trace_notes(trace)
    refused = ui.too_long_for(f"Inside one head (every step of one layer's attention: "
                              f"{trace.n_head} heads' weights and this head's scores, "
                              f"{trace.n_tokens:,}² each)", trace.n_tokens,
                              inside_bytes_per_squared_token(trace.n_head))
    if refused:
        st.info(refused)
        st.stop()
    t = trace.n_tokens
    if t > SHORT_TEXT:
        st.info(f"This text has {t} tokens. The page is easiest to read with a short sentence "
                f"(up to about {SHORT_TEXT} tokens): then every small matrix prints its "
                f"numbers. Larger matrices are summarised.")
    # opens on the token the text is about ('it', else the last) and the head that links it
    # most strongly to the token it reads most, not on L0.H0 (analysis.opening_view)
    focus, _, *linking_head = ui.opening(trace)
    # in a lesson the choices wait in the sidebar, out of the class's way
    pick_col, query_col = (st.sidebar, st.sidebar) if lesson else st.columns([2, 1])
    with pick_col:
        layer, head = ui.head_picker(trace, default=tuple(linking_head))
    labels = list(trace.display_tokens)
    with query_col:
        query = ui.synced(st.selectbox, "query", "Follow one query token", focus,
                          options=list(range(t)), valid=lambda q: 0 <= int(q) < t,
                          format_func=lambda i: f"{i}: {labels[i]}",
                          help="Step 7 spells out this token's row: its scores, its weights "
                               "and the value vectors they mix.")
    if seq is None:
        inside = ui.memo(inside_one_head, model, selection.text, key=(selection.key, "inside"),
                         large=True, layer=layer, head=head, text_pair=selection.text_pair,
                         max_tokens=selection.max_tokens)
        the_map = trace.head_map(layer, head)
    else:
        inside = ui.memo(inside_one_head_seq2seq, model, key=(selection.key, "inside"),
                         large=True, source=selection.text, target=selection.target,
                         kind=kind, layer=layer, head=head)
        the_map = seq.head_map(kind, layer, head)
    name = plots.head_name(layer, head)
    d, dk = inside.d_model, inside.d_k
    stem = export.safe_filename(selection.file_stem, name)
    tok = export.position_labels(labels)
    key_labels = list(inside.columns)  # the keys: the source's tokens for cross-attention
    key_tok = export.position_labels(key_labels)
    s_keys = len(key_labels)
    d_cols, k_cols = dims(d, "d"), dims(dk, "k")
    steps = {s.key: s for s in inside.steps()}
    layout = inside.layout_step()
    scaled = inside.scaled_by_sqrt_d_k
    divide = " / √d_k" if scaled else ""

    # Each step of the head draws itself; the page shows them all in order, or, in lesson
    # mode, one per screen (ui.lesson_step: Back / Next, the arrow keys, ?lstep= in the URL).
    def overview() -> None:
        st.subheader(f"Head {name}: layer {layer}, head {head} of {inside.n_head}"
                     + {"encoder": " (encoder self-attention)", "decoder": " (decoder "
                        "self-attention)", "cross": " (cross-attention)"}.get(kind or "", ""))
        if kind == "cross":
            st.info(f"A cross-attention head: its {t} queries come from the decoder (the "
                    f"target tokens) and its {s_keys} keys and values from the encoder's "
                    f"output M (the source tokens), so its scores and weights are {t} × "
                    f"{s_keys}.")
        if inside.position_bias is not None:
            st.info("This model has no position embeddings: a learned bias for each distance "
                    "between query and key is added to the scores (T5's relative position "
                    "bias, step 5b).")
        bias_word = " → **+ relative position bias**" if inside.position_bias is not None else ""
        st.markdown(
            f"**X** (T × d_model = {t} × {d}) → **Q, K, V** of this head (T × d_k = {t} × {dk} "
            f"each{'; K and V from M, S × d_k' if kind == 'cross' else ''}) → **scores** "
            f"Q Kᵀ{divide} ({t} × {s_keys}){bias_word} → **mask** → **softmax** = the weights "
            f"({t} × {s_keys}) → "
            f"**weights × V** ({t} × {dk}) → × this head's slice of the output projection "
            f"**W_O** ({dk} × {d}) → its **contribution** ({t} × {d}).")
        keys_from = "M" if kind == "cross" else "X"
        scores_tex = rf"(XW_Q^h)({keys_from}W_K^h)^{{\top}}"
        if scaled:
            scores_tex = rf"\frac{{{scores_tex}}}{{\sqrt{{d_k}}}}"
        elif inside.scale != 1.0:  # a checkpoint's own scale (GPT-2 variants)
            scores_tex += rf" \cdot {inside.scale:.4g}"
        bias_tex = " + B^h" if inside.position_bias is not None else ""
        st.latex(rf"\mathrm{{head}}_h = \operatorname{{softmax}}\!\left({scores_tex}{bias_tex}"
                 rf" + M\right) {keys_from} W_V^h \; W_O^h")
        st.caption(f"Scaled dot-product attention, as in Vaswani et al. 2017 (*Attention Is All "
                   f"You Need*). d_k = {dk}; √d_k = {dk ** 0.5:.3f}"
                   + ("" if scaled else " (T5 does not divide by it: the scale is folded into "
                                        "its initialisation of W_Q)") + ". "
                   + ("Q and K are rotated by position (RoPE, step 4b) before the scores. "
                      if inside.rotary else "")
                   + (f"Key/value heads are shared: query heads "
                      f"{', '.join(f'H{h}' for h in inside.sharing)} read the same K and V "
                      f"(key/value head {inside.kv_head}). "
                      if inside.n_kv_head and inside.n_kv_head < inside.n_head else "") +
                   "Rows are tokens throughout (row i = token i), as in the library's code; "
                   "biases are included (b_Q, b_K, b_V, and b_O once for the whole layer).")

    def step_header(number: int, key: str) -> None:
        step = steps[key]
        st.markdown(f"#### {number}. {step.symbol}: {step.shape_text}")
        st.latex(step.formula)
        st.markdown(step.explanation, help=ui.terms_in(step.explanation))

    def csv_button(array, rows, cols, what, key):
        if lesson:  # a lesson's screen holds the step; the whole page has the downloads
            return
        ui.download_csv(partial(export.matrix_csv, array, rows, cols, corner=""),
                        export.safe_filename(stem, what, suffix=".csv"), f"{what} as CSV",
                        key=f"dl_{key}")

    def memory_step() -> None:  # cross-attention: the encoder's output, where K and V come from
        step_header(0, "memory")
        show_matrix(inside.memory, key_tok, d_cols, f"M, the encoder's output: {s_keys} × {d}",
                    "memory", row_title="source token", col_title="d_model")
        csv_button(inside.memory, key_tok, d_cols, "M", "memory")

    def x_step() -> None:
        step_header(1, "X")
        show_matrix(inside.X, tok, d_cols, f"X: {t} × {d}", "X", row_title="token",
                    col_title="d_model")
        csv_button(inside.X, tok, d_cols, "X", "X")

    def qkv_step() -> None:
        st.markdown(f"#### 2–4. Q, K, V: T × d_k = {t} × {dk} each")
        st.latex(r"Q = XW_Q^h + b_Q^h \qquad K = XW_K^h + b_K^h \qquad V = XW_V^h + b_V^h")
        st.markdown(f"{steps['Q'].explanation} {steps['K'].explanation} "
                    f"{steps['V'].explanation} Each W^h is d_model × d_k = {d} × {dk}: the {dk} "
                    f"columns of the layer's projection that belong to head {head}.")
        # a lesson's step fits two screens: the three side by side
        places = st.columns(3) if lesson else [st.container() for _ in range(3)]
        for letter, place in zip("QKV", places):
            array = getattr(inside, letter)
            rows = tok if letter == "Q" else key_tok
            with place:
                show_matrix(array, rows, k_cols, f"{letter} of {name}: {array.shape[0]} × {dk}",
                            letter, row_title="token", col_title="d_k",
                            share=1 / 3 if lesson else 1.0)
                csv_button(array, rows, k_cols, letter, letter)
        if layout is not None and not lesson:
            layout_step()

    def layout_step() -> None:  # how the checkpoint stores them; the einsum of the notation
        st.markdown(f"#### 4a. {layout.symbol}: {layout.shape_text}")
        st.latex(layout.formula)
        st.markdown(layout.explanation)

    def rope_step() -> None:  # RoPE: a step of its own, between the projections and the scores
        step = steps["Q_rot"]
        st.markdown(f"#### 4b. Rotary positions (RoPE): {step.shape_text}")
        st.latex(step.formula)
        st.markdown(step.explanation)
        for letter, place in zip(("Q", "K"), st.columns(2) if lesson else
                                 [st.container(), st.container()]):
            array = getattr(inside, f"{letter}_rot")
            with place:
                show_matrix(array, tok, k_cols, f"{letter} rotated, {letter}': {t} × {dk}",
                            f"{letter}_rot", row_title="token", col_title="d_k",
                            share=0.5 if lesson else 1.0)
                csv_button(array, tok, k_cols, f"{letter} rotated", f"{letter}_rot")

    def scores_step() -> None:
        step_header(5, "scores")
        show_matrix(inside.scores, tok, key_tok,
                    f"scores Q Kᵀ × {inside.scale:.4g}: {t} × {s_keys}", "scores",
                    row_title="query", col_title="key")
        csv_button(inside.scores, tok, key_tok, "scores", "scores")

    def bias_step() -> None:  # T5: the relative position bias, a step of its own
        st.markdown(f"#### 5b. {steps['position_bias'].symbol}: "
                    f"{steps['position_bias'].shape_text}")
        st.latex(steps["position_bias"].formula)
        st.markdown(steps["position_bias"].explanation)
        show_matrix(inside.buckets.astype(float), tok, key_tok,
                    f"the bucket of each pair (query i, key j): {t} × {t}", "buckets",
                    diverging=False, fmt=".0f", row_title="query", col_title="key")
        show_matrix(inside.bias_table[None, :], [f"H{head}"],
                    dims(len(inside.bias_table), "bucket "),
                    f"{name}'s learned bias per bucket (the stack's first layer holds the "
                    f"table)", "bias_table", row_title="head", col_title="bucket")
        show_matrix(inside.position_bias, tok, key_tok,
                    f"the bias added to the scores: {t} × {t}", "position_bias",
                    row_title="query", col_title="key")
        csv_button(inside.position_bias, tok, key_tok, "position bias", "position_bias")
        without, with_bias = ui.figure_columns(2)
        with without:
            show_matrix(inside.weights_without_bias, tok, key_tok,
                        "the map without the bias", "without_bias", diverging=False,
                        colorscale=plots.WEIGHT_SCALE, row_title="query", col_title="key",
                        share=ui.column_share(0.5))
        with with_bias:
            show_matrix(inside.weights, tok, key_tok, "the map with it (step 7)", "with_bias",
                        diverging=False, colorscale=plots.WEIGHT_SCALE, row_title="query",
                        col_title="key", share=ui.column_share(0.5))
        st.caption("Without the bias a T5 head cannot tell positions apart at all: its "
                   "scores depend only on what the tokens are.")

    def mask_step() -> None:
        step_header(6, "masked_scores")
        if inside.causal or inside.position_bias is not None:
            show_matrix(inside.masked_scores, tok, key_tok, "scores + "
                        + ("bias + " if inside.position_bias is not None else "")
                        + f"mask: {t} × {s_keys}", "masked", row_title="query",
                        col_title="key")
            csv_button(inside.masked_scores, tok, key_tok, "masked scores", "masked")
        else:
            st.caption("Here S' = S: the matrix is the one above.")

    def softmax_step() -> None:
        step_header(7, "weights")
        show_matrix(inside.weights, tok, key_tok,
                    f"softmax: the attention weights, {t} × {s_keys}", "weights",
                    diverging=False, colorscale=plots.WEIGHT_SCALE, row_title="query",
                    col_title="key")
        difference = inside.largest_difference(the_map)
        st.caption(f"These are exactly the weights of {name} on the Attention maps page "
                   f"(largest difference {difference:.1e}). Every row sums to 1.")
        csv_button(inside.weights, tok, key_tok, "weights", "weights")
        if not lesson:  # already in a folded section, which cannot hold another
            st.markdown(f"**Follow query {query} '{ui.md_escape(labels[query])}' through "
                        f"steps 5–8**")
            follow_step()

    def follow_step() -> None:
        followed = inside.followed_query(query)
        st.dataframe({"key": key_tok, **followed.table}, hide_index=True,
                     width="stretch", height=min(420, 38 + 35 * s_keys))
        st.markdown(
            f"Token {query} '{ui.md_escape(labels[query])}' puts "
            + ", ".join(f"{share:.0%} on {j} '{ui.md_escape(key_labels[j])}'"
                        for j, share in followed.strongest)
            + f". Its output from this head (row {query} of step 8) is the weighted "
              f"average of the value rows: Σⱼ weightⱼ · Vⱼ.")

    def context_step() -> None:
        step_header(8, "context")
        show_matrix(inside.context, tok, k_cols, f"weights × V: {t} × {dk}", "context",
                    row_title="token", col_title="d_k")
        csv_button(inside.context, tok, k_cols, "context", "context")

    def output_step() -> None:
        step_header(9, "W_O")
        show_matrix(inside.W_O, k_cols, d_cols, f"W_O slice of {name}: {dk} × {d}", "W_O",
                    row_title="d_k", col_title="d_model")
        csv_button(inside.W_O, k_cols, d_cols, "W_O slice", "W_O")
        if not lesson:
            contribution_step()

    def contribution_step() -> None:
        step_header(10, "contribution")
        show_matrix(inside.contribution, tok, d_cols, f"contribution of {name}: {t} × {d}",
                    "contribution", row_title="token", col_title="d_model")
        csv_button(inside.contribution, tok, d_cols, "contribution", "contribution")
        st.markdown(
            f"**Putting the heads together.** The attention output of layer {layer} is the sum "
            f"of the {inside.n_head} heads' contributions plus the output bias b_O (this is the "
            f"same as concatenating the heads' outputs, T × d_model, and multiplying by the "
            f"full W_O). {name}'s contribution has {inside.share_of_output:.0%} of the size "
            f"(Frobenius norm) of all heads' contributions together. "
            + ("A pre-norm model then adds it to the residual stream: h ← h + attention output."
               if inside.pre_ln else
               "A post-norm model (BERT) then adds it to the residual stream and normalises: "
               "h ← LN(h + attention output).")
            + " Because of that residual path a token keeps much of its own information "
              "whatever its heads attend to; attention rollout (Abnar & Zuidema 2020, on the "
              "Attention maps page) models it as 0.5·A + 0.5·I per layer.")

    def cost_step() -> None:
        ui.attention_cost(model.info)

    # (title, key, draw): on the whole page a step with a key is a folded section, computed
    # and drawn when opened, so the page opens on the head's input and the list of steps
    titles_and_steps = [
        ("The whole head in one line", None, overview),
        *([("M: the encoder's output", None, memory_step)] if inside.memory is not None
          else []),
        ("X: what the head reads", None, x_step),
        ("Q, K, V: three projections", "qkv", qkv_step),
        *([("How the checkpoint stores them, and the heads' shapes", "layout", layout_step)]
          if lesson and layout is not None else []),
        *([("Rotary positions (RoPE)", "rope", rope_step)] if inside.rotary else []),
        ("Scores: every query against every key", "scores", scores_step),
        *([("T5's relative position bias", "bias", bias_step)]
          if inside.position_bias is not None else []),
        ("The mask", "mask", mask_step),
        ("Softmax: the attention weights", "softmax", softmax_step),
        *([(f"Follow query {query} '{labels[query]}'", "follow", follow_step)] if lesson
          else []),
        ("Chunked and flash attention: the same weights with less memory", "flash",
         lambda: flash_section(inside, query, labels[query], key_labels)),
        ("Weights × V: each token's mix of values", "context", context_step),
        ("W_O: from one head back to the model's width", "output", output_step),
        *([("The head's contribution, and all heads together", "contribution",
            contribution_step)] if lesson else []),
        *([("How the head learns: the gradients of W_Q and W_O", "gradients",
            lambda: gradients_section(model, layer, head, d_cols, k_cols))]
          if seq is None else []),  # a fused W_QKV: GPT-2, BERT, the Llama family
        ("What attention costs: parameters and the KV cache", "cost", cost_step),
    ]
    if lesson:  # one step per screen
        number = ui.lesson_step([title for title, _, _ in titles_and_steps])
        titles_and_steps[number - 1][2]()
        st.stop()
    for title, key, draw in titles_and_steps:
        if key is None:
            draw()
        else:
            ui.drawn_when_opened(title, key, draw)

    st.divider()
    ui.download_bytes(partial(inside.npz_bytes, labels), f"{stem}_inside.npz",
                      "⬇ Every array of this head (.npz)",
                      key="dl_inside_all",
                      help="X, W_Q, W_K, W_V, Q, K, V, (Q_rot, K_rot under RoPE), scores, "
                           "mask, masked_scores, weights, context, W_O, contribution, "
                           "layer_output and the biases; "
                           "numpy.load() reads it.")
    st.caption("In code: " + (
        "`from mha_viz.analysis.one_head.steps import inside_one_head; "
        f"inside_one_head(model, text, layer={layer}, head={head})`" if seq is None else
        "`from mha_viz.analysis.one_head.seq2seq_steps import inside_one_head_seq2seq; "
        f"inside_one_head_seq2seq(model, source, target, '{kind}', layer={layer}, "
        f"head={head})`") + " returns every array shown here.")
    ui.caveat()
