"""The Inside one head page's view, for the classroom: every step of one head's computation
with the real tensors of the chosen layer, head and text (X, Q, K, V, the scores, the mask,
the softmax, the weighted values, W_O and the head's contribution; RoPE, QK-norm, soft-caps
and T5's position bias where the model has them), chunked and flash attention, the gradients
and the KV cache; in lesson mode one step per screen (inside_one_head_parts, ui.lesson)."""

from __future__ import annotations

from functools import partial

import streamlit as st

from ... import plots, ui
from ...analysis.one_head.seq2seq_steps import inside_one_head_seq2seq
from ...analysis.one_head.steps import inside_bytes_per_squared_token, inside_one_head
from ...server import export
from .. import lesson as lesson_mode
from ..words import one_head as words
from . import inside_one_head_lesson as lesson_steps
from . import inside_one_head_parts as parts


def show() -> None:
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
        refused = ui.too_long_for(parts.too_long_what(trace.n_head, trace.n_tokens),
                                  trace.n_tokens, inside_bytes_per_squared_token(trace.n_head))
        if refused:
            st.info(refused)
            st.stop()
        t = trace.n_tokens
        short_note = parts.short_text_note(t)
        if short_note:  # in a lesson, with the other notes, out of the class's way
            (st.sidebar if lesson else st).info(short_note)
        # opens on the token the text is about ('it', else the last) and the head that links it
        # most strongly to the token it reads most, not on L0.H0 (analysis.opening_view)
        focus, linked_key, *linking_head = ui.opening(trace)
        # in a lesson the choices wait in the sidebar, out of the class's way
        pick_col, query_col = (st.sidebar, st.sidebar) if lesson else st.columns([2, 1])
        with pick_col:
            layer, head = ui.head_picker(trace, default=tuple(linking_head))
        labels = list(trace.display_tokens)
        with query_col:
            query = ui.synced(st.selectbox, "query", "Follow one query token", focus,
                              options=list(range(t)), valid=lambda q: 0 <= int(q) < t,
                              format_func=lambda i: f"{i}: {labels[i]}",
                              help="The softmax's step spells out this token's row: its scores, "
                                   "its weights and the value vectors they mix.")
        if seq is None:
            inside = ui.memo(inside_one_head, model, selection.text, large=True, layer=layer,
                             head=head, text_pair=selection.text_pair,
                             max_tokens=selection.max_tokens)
            the_map = trace.head_map(layer, head)
        else:
            inside = ui.memo(inside_one_head_seq2seq, model, large=True, source=selection.text,
                             target=selection.target, kind=kind, layer=layer, head=head)
            the_map = seq.head_map(kind, layer, head)
        name = plots.head_name(layer, head)
        d, dk = inside.d_model, inside.d_k
        stem = export.safe_filename(selection.file_stem, name)
        # a lesson's screen has little height: long tokens ('<|endoftext|>') are cut
        cut = parts.LESSON_LABEL_CHARS if lesson else None
        tok = export.position_labels(labels, max_chars=cut)
        key_tok = export.position_labels(list(inside.columns),  # cross-attention: the source's
                                         max_chars=cut)
        s_keys = len(key_tok)
        d_cols, k_cols = parts.dims(d, "d"), parts.dims(dk, "k")
        sections = parts.sections(inside, lesson, query, labels[query], gradients=seq is None)
        # one numbering on the screen: the page's steps (1, 4b, 5b, ...) or the lesson's screens
        numbers = parts.step_numbers(inside, sections, lesson)
        ref = partial(parts.step_ref, numbers)  # "step 4b" on the page, "step 5" in a lesson

        def num(key: str) -> str | None:  # a heading's number: none in a lesson (its line has it)
            return None if lesson else numbers[key]

        steps = {s.key: s for s in words.head_steps(inside, ref)}
        layout = words.layout_step(inside)
        show_matrix = parts.show_matrix
        csv_button = partial(parts.csv_button, stem=stem, lesson=lesson)

        def pick(chart: str):
            """A click on a query x key matrix: follow that query, ask why about that key."""
            return partial(ui.pick_cell, chart, "query", "wk")

        def matrix_step(number: int | str, step: str, array, rows, cols, title: str, what: str,
                        row_title: str, col_title: str, key: str | None = None,
                        span: float | None = None, on_select=None, explain: bool = True
                        ) -> None:
            """A step's heading, its matrix and the matrix as CSV (key: the figure's and the
            download's, the step's own by default; span: its colour scale's reach; explain:
            False leaves the step's sentence to the text that follows)."""
            parts.step_header(number, steps[step], explain=explain)
            with lesson_mode.figure_place():
                show_matrix(array, rows, cols, title, key or step, row_title=row_title,
                            col_title=col_title, span=span, on_select=on_select,
                            share=ui.column_share(0.6) if lesson else 1.0)
                csv_button(array, rows, cols, what, key or step)

        # Each step of the head draws itself; lesson_mode.show_steps shows them all in order, or,
        # in lesson mode, one per screen (Back / Next, the arrow keys, ?lstep= in the URL).
        def overview() -> None:
            st.subheader(parts.overview_heading(inside, kind))
            if kind == "cross":
                st.info(parts.cross_note(t, s_keys))
            if inside.position_bias is not None:
                st.info("This model has no position embeddings: a learned bias for each distance "
                        "between query and key is added to the scores (T5's relative position "
                        f"bias, {ref('bias')}).")
            st.markdown(parts.pipeline_text(inside, kind, t))
            st.latex(parts.head_formula(inside, kind))
            st.caption(parts.overview_caption(inside, ref))

        def memory_step() -> None:  # cross-attention: the encoder's output, where K and V come from
            matrix_step(num("memory"), "memory", inside.memory, key_tok, d_cols,
                        f"M, the encoder's output: {s_keys} × {d}", "M", "source token", "d_model")

        def x_step() -> None:
            matrix_step(num("X"), "X", inside.X, tok, d_cols, f"X: {t} × {d}", "X", "token", "d_model")

        def qkv_step() -> None:
            st.markdown(f"#### {parts.numbered(num('qkv'))}Q, K, V: T × d_k = {t} × {dk} each")
            st.latex(parts.qkv_formula(inside, lesson))
            st.markdown(f"{steps['Q'].explanation} {steps['K'].explanation} "
                        f"{steps['V'].explanation}" + ("" if lesson else  # Q's says it there
                                                       f" Each W^h is d_model × d_k = {d} × {dk}: "
                                                       f"the {dk} columns of the layer's "
                                                       f"projection that belong to head {head}."))
            # a lesson's screen: the three side by side, beside the words
            with lesson_mode.figure_place():
                places = st.columns(3) if lesson else [st.container() for _ in range(3)]
            for letter, place in zip("QKV", places):
                array = getattr(inside, letter)
                rows = tok if letter == "Q" else key_tok
                with place:
                    # a lesson's narrow three: the columns' names k0, k1, ... say d_k
                    show_matrix(array, rows, k_cols, f"{letter} of {name}: {array.shape[0]} × {dk}",
                                letter, row_title="token", col_title="" if lesson else "d_k",
                                share=0.2 if lesson else 1.0)
                    csv_button(array, rows, k_cols, letter, letter)
            if layout is not None and not lesson:
                layout_step()

        def layout_step() -> None:  # how the checkpoint stores them; the einsum of the notation
            parts.step_header(num("layout"), layout, help_terms=False)

        def q_and_k_step(key: str, suffix: str, title: str, what: str, mark: str) -> None:
            """A step on Q and K between the projections and the scores (the QK-norm, RoPE): its
            text, then Q's and K's arrays after it (Q_<suffix>, K_<suffix>)."""
            parts.step_header(num(key), steps[f"Q_{suffix}"], title=title, help_terms=False)
            with lesson_mode.figure_place():
                places = st.columns(2) if lesson else [st.container(), st.container()]
            for letter, place in zip(("Q", "K"), places):
                array = getattr(inside, f"{letter}_{suffix}")
                with place:
                    show_matrix(array, tok, k_cols, f"{letter} {what}, {letter}{mark}: {t} × {dk}",
                                f"{letter}_{suffix}", row_title="token", col_title="d_k",
                                share=0.3 if lesson else 1.0)
                    csv_button(array, tok, k_cols, f"{letter} {what}", f"{letter}_{suffix}")

        def scores_step() -> None:  # soft-capped: these are the scores before the cap
            key = "scores_before_cap" if inside.softcap else "scores"
            matrix_step(num("scores"), key, getattr(inside, key), tok, key_tok,
                        f"scores Q Kᵀ × {inside.scale:.4g}"
                        + (" before the cap" if inside.softcap else "") + f": {t} × {s_keys}",
                        key.replace("_", " "), "query", "key", span=parts.score_span(inside),
                        on_select=pick(key))

        def softcap_step() -> None:  # Gemma 2: the scores through c·tanh(S / c)
            c = inside.softcap
            span = parts.score_span(inside)
            matrix_step(num("softcap"), "scores", inside.scores, tok, key_tok,
                        f"soft-capped scores {c:g}·tanh(S / {c:g}): {t} × {s_keys}",
                        "capped scores", "query", "key", key="capped", span=span)
            st.caption(f"On {ref('scores')}'s colour scale (±{span:.3g}): where "
                       f"the cap bent a score, its cell is paler than it was there.")

        def bias_step() -> None:  # T5: the relative position bias, a step of its own
            parts.step_header(num("bias"), steps["position_bias"], help_terms=False)
            st.caption("Without the bias a T5 head cannot tell positions apart at all: its "
                       "scores depend only on what the tokens are.")
            with lesson_mode.figure_place():
                if not lesson:  # a lesson's screen: the bias added and what it does
                    show_matrix(inside.buckets.astype(float), tok, key_tok,
                                f"the bucket of each pair (query i, key j): {t} × {t}",
                                "buckets", diverging=False, fmt=".0f", row_title="query",
                                col_title="key")
                    show_matrix(inside.bias_table[None, :], [f"H{head}"],
                                parts.dims(len(inside.bias_table), "bucket "),
                                f"{name}'s learned bias per bucket (the stack's first layer "
                                f"holds the table)", "bias_table", row_title="head",
                                col_title="bucket")
                places = st.columns(3) if lesson else [st.container(), *ui.figure_columns(2)]
                maps = ((inside.position_bias, f"the bias added to the scores: {t} × {t}",
                         "position_bias", True),
                        (inside.weights_without_bias, "the map without the bias",
                         "without_bias", False),
                        (inside.weights, f"the map with it ({ref('softmax')})", "with_bias",
                         False))
                for place, (array, title, key, signed) in zip(places, maps):
                    with place:
                        show_matrix(array, tok, key_tok, title, key, diverging=signed,
                                    colorscale=None if signed else plots.WEIGHT_SCALE,
                                    row_title="query", col_title="key",
                                    share=0.2 if lesson else 1.0 if signed
                                    else ui.column_share(0.5))
                csv_button(inside.position_bias, tok, key_tok, "position bias",
                           "position_bias")

        def mask_step() -> None:
            if inside.causal or inside.position_bias is not None:
                matrix_step(num("mask"), "masked_scores", inside.masked_scores, tok, key_tok,
                            "scores + "
                            + ("bias + " if inside.position_bias is not None else "")
                            + f"mask: {t} × {s_keys}", "masked scores", "query", "key",
                            key="masked")
            else:
                parts.step_header(num("mask"), steps["masked_scores"])
                st.caption("Here S' = S: the matrix is the one above.")

        def softmax_step() -> None:
            parts.step_header(num("softmax"), steps["weights"])
            difference = inside.largest_difference(the_map)
            st.caption(f"These are exactly the weights of {name} on the Attention maps page "
                       f"(largest difference {difference:.1e}). Every row sums to 1.")
            with lesson_mode.figure_place():
                show_matrix(inside.weights, tok, key_tok,
                            f"softmax: the attention weights, {t} × {s_keys}", "weights",
                            diverging=False, colorscale=plots.WEIGHT_SCALE, row_title="query",
                            col_title="key", on_select=pick("weights"),
                            share=ui.column_share(0.6) if lesson else 1.0)
                csv_button(inside.weights, tok, key_tok, "weights", "weights")
            if not lesson:  # already in a folded section, which cannot hold another
                st.markdown(f"**Follow query {query} '{ui.md_escape(labels[query])}' through "
                            f"steps 5–8**")
                follow_step()

        def follow_step() -> None:
            followed = inside.followed_query(query)
            st.markdown(parts.followed_text(inside, query, labels[query], followed.strongest,
                                            ref))
            st.dataframe({"key": key_tok, **followed.table}, hide_index=True,
                         width="stretch", height=min(300 if lesson else 420, 38 + 35 * s_keys))

        def output_step() -> None:
            matrix_step(num("output"), "W_O", inside.W_O, k_cols, d_cols, f"W_O slice of {name}: {dk} × {d}",
                        "W_O slice", "d_k", "d_model")
            if not lesson:
                contribution_step()

        def contribution_step() -> None:
            # a lesson's screen: all_heads_text says what the step's sentence says, and more
            matrix_step(num("contribution"), "contribution", inside.contribution, tok, d_cols,
                        f"contribution of {name}: {t} × {d}", "contribution", "token", "d_model",
                        explain=not lesson)
            st.markdown(parts.all_heads_text(inside, lesson))

        draw = {
            "overview": overview, "memory": memory_step, "X": x_step, "qkv": qkv_step,
            "layout": layout_step, "scores": scores_step, "softcap": softcap_step,
            "qknorm": lambda: q_and_k_step("qknorm", "normed", "QK-norm", "normalized",
                                           "\u0302"),  # Q̂
            "rope": lambda: q_and_k_step("rope", "rot", "Rotary positions (RoPE)", "rotated",
                                         "'"),
            "bias": bias_step,
            "mask": mask_step, "softmax": softmax_step, "follow": follow_step,
            "flash": lambda: parts.flash_section(inside, query, labels[query]),
            "context": lambda: matrix_step(num("context"), "context", inside.context, tok, k_cols,
                                           f"weights × V: {t} × {dk}", "context", "token", "d_k"),
            "output": output_step, "contribution": contribution_step,
            "gradients": lambda: parts.gradients_section(model, selection, layer, head,
                                                               d_cols, k_cols),
            "cost": lambda: ui.attention_cost(model.info),
            "learning": lambda: parts.learning_step(ref),
            "why": lambda: ui.why_body(selection, trace, layer, head, (query, linked_key),
                                       query=query, key_name="wk"),
            "textbook": lambda: lesson_steps.textbook_step(selection),
            "moves": lambda: lesson_steps.moves_step(selection, layer, head),
        }
        lesson_mode.show_steps(sections, draw, lesson, words_only=parts.WORDS_ONLY)

        st.divider()
        ui.download_bytes(partial(inside.npz_bytes, labels), f"{stem}_inside.npz",
                          "⬇ Every array of this head (.npz)",
                          key="dl_inside_all",
                          help="X, W_Q, W_K, W_V, Q, K, V, (Q_normed, K_normed under QK-norm; "
                               "Q_rot, K_rot under RoPE), scores (scores_before_cap when they "
                               "are soft-capped), mask, masked_scores, weights, context, W_O, "
                               "contribution, "
                               "layer_output and the biases; "
                               "numpy.load() reads it.")
        st.caption(parts.in_code(kind, layer, head))
        ui.caveat()
