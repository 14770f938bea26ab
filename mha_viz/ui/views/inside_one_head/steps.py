"""Inside one head's sections on the head's own computation, in order, each taking the page's
``Head``: the whole head in one line, M (cross-attention's encoder output), X, Q K V and how
the checkpoint stores them, the QK-norm and RoPE, the scores (soft-capped, T5's position
bias), the mask, the softmax and one query followed, weights × V, W_O and the head's
contribution. On the whole page a step may draw the next inside its own section; a lesson
gives each its own screen."""

from __future__ import annotations

import numpy as np
import streamlit as st

from .... import plots, ui
from ... import lesson as lesson_mode
from ...words import inside_one_head as words
from .head import Head
from .matrices import csv_button, matrix_step, pick, show_matrix, step_header


def overview(h: Head) -> None:
    inside = h.inside
    st.subheader(words.overview_heading(inside, h.kind))
    if inside.memory is not None:  # cross-attention: its keys and values are another stack's
        st.info(words.cross_note(h.t, h.s_keys))
    if inside.position_bias is not None:
        st.info(words.POSITION_BIAS_NOTE.format(ref=h.ref("bias")))
    st.markdown(words.pipeline_text(inside, h.kind, h.t))
    st.latex(words.head_formula(inside, h.kind))
    st.caption(words.overview_caption(inside, h.ref))


def memory(h: Head) -> None:
    """Cross-attention: the encoder's output, where K and V come from."""
    matrix_step(h, "memory", "memory", h.inside.memory, h.key_tok, h.d_cols,
                f"M, the encoder's output: {h.s_keys} × {h.d}", "M", "source token", "d_model")


def x(h: Head) -> None:
    matrix_step(h, "X", "X", h.inside.X, h.tok, h.d_cols, f"X: {h.t} × {h.d}", "X", "token",
                "d_model")


def qkv(h: Head) -> None:
    steps, dk, lesson = h.steps, h.dk, h.lesson
    st.markdown(f"#### {words.numbered(h.num('qkv'))}Q, K, V: T × d_k = {h.t} × {dk} each")
    st.latex(words.qkv_formula(h.inside, lesson))
    st.markdown(f"{steps['Q'].explanation} {steps['K'].explanation} "
                f"{steps['V'].explanation}" + ("" if lesson else  # Q's says it there
                                               f" Each W^h is d_model × d_k = {h.d} × {dk}: "
                                               f"the {dk} columns of the layer's "
                                               f"projection that belong to head {h.head}."))
    # a lesson's screen: the three side by side, beside the words
    with lesson_mode.figure_place():
        places = st.columns(3) if lesson else [st.container() for _ in range(3)]
    for letter, place in zip("QKV", places):
        array = getattr(h.inside, letter)
        rows = h.tok if letter == "Q" else h.key_tok
        with place:
            # a lesson's narrow three: the columns' names k0, k1, ... say d_k
            show_matrix(array, rows, h.k_cols, f"{letter} of {h.name}: {array.shape[0]} × {dk}",
                        letter, row_title="token", col_title="" if lesson else "d_k",
                        share=0.2 if lesson else 1.0)
            csv_button(h, array, rows, h.k_cols, letter, letter)
    if h.layout is not None and not lesson:
        layout(h)


def layout(h: Head) -> None:
    """How the checkpoint stores them; the einsum of the notation."""
    step_header(h.num("layout"), h.layout, help_terms=False)


def q_and_k(h: Head, key: str, suffix: str, title: str, what: str, mark: str) -> None:
    """A step on Q and K between the projections and the scores (the QK-norm, RoPE): its
    text, then Q's and K's arrays after it (Q_<suffix>, K_<suffix>)."""
    step_header(h.num(key), h.steps[f"Q_{suffix}"], title=title, help_terms=False)
    with lesson_mode.figure_place():
        places = st.columns(2) if h.lesson else [st.container(), st.container()]
    for letter, place in zip(("Q", "K"), places):
        array = getattr(h.inside, f"{letter}_{suffix}")
        with place:
            show_matrix(array, h.tok, h.k_cols, f"{letter} {what}, {letter}{mark}: {h.t} × {h.dk}",
                        f"{letter}_{suffix}", row_title="token", col_title="d_k",
                        share=0.3 if h.lesson else 1.0)
            csv_button(h, array, h.tok, h.k_cols, f"{letter} {what}", f"{letter}_{suffix}")


def qk_norm(h: Head) -> None:
    q_and_k(h, "qknorm", "normed", "QK-norm", "normalized", "\u0302")  # Q̂


def rope(h: Head) -> None:
    q_and_k(h, "rope", "rot", "Rotary positions (RoPE)", "rotated", "'")


def score_span(inside) -> float | None:
    """One colour scale for the scores before and after a soft-cap (the largest |raw score|),
    so the cap's bend shows as paler cells; None without a cap."""
    if inside.scores_before_cap is None:
        return None
    raw = inside.scores_before_cap
    return float(np.abs(raw[np.isfinite(raw)]).max())


def scores(h: Head) -> None:
    """Soft-capped: these are the scores before the cap."""
    inside = h.inside
    key = "scores_before_cap" if inside.softcap else "scores"
    matrix_step(h, "scores", key, getattr(inside, key), h.tok, h.key_tok,
                f"scores Q Kᵀ × {inside.scale:.4g}"
                + (" before the cap" if inside.softcap else "") + f": {h.t} × {h.s_keys}",
                key.replace("_", " "), "query", "key", span=score_span(inside),
                on_select=pick(key))


def softcap(h: Head) -> None:
    """Gemma 2: the scores through c·tanh(S / c)."""
    c = h.inside.softcap
    span = score_span(h.inside)
    matrix_step(h, "softcap", "scores", h.inside.scores, h.tok, h.key_tok,
                f"soft-capped scores {c:g}·tanh(S / {c:g}): {h.t} × {h.s_keys}",
                "capped scores", "query", "key", key="capped", span=span)
    st.caption(f"On {h.ref('scores')}'s colour scale (±{span:.3g}): where "
               f"the cap bent a score, its cell is paler than it was there.")


def bias(h: Head) -> None:
    """T5: the relative position bias, a step of its own."""
    inside, t, tok, key_tok = h.inside, h.t, h.tok, h.key_tok
    step_header(h.num("bias"), h.steps["position_bias"], help_terms=False)
    st.caption("Without the bias a T5 head cannot tell positions apart at all: its "
               "scores depend only on what the tokens are.")
    with lesson_mode.figure_place():
        if not h.lesson:  # a lesson's screen: the bias added and what it does
            show_matrix(inside.buckets.astype(float), tok, key_tok,
                        f"the bucket of each pair (query i, key j): {t} × {t}",
                        "buckets", diverging=False, fmt=".0f", row_title="query",
                        col_title="key")
            show_matrix(inside.bias_table[None, :], [f"H{h.head}"],
                        words.dims(len(inside.bias_table), "bucket "),
                        f"{h.name}'s learned bias per bucket (the stack's first layer "
                        f"holds the table)", "bias_table", row_title="head",
                        col_title="bucket")
        places = st.columns(3) if h.lesson else [st.container(), *ui.figure_columns(2)]
        maps = ((inside.position_bias, f"the bias added to the scores: {t} × {t}",
                 "position_bias", True),
                (inside.weights_without_bias, "the map without the bias",
                 "without_bias", False),
                (inside.weights, f"the map with it ({h.ref('softmax')})", "with_bias",
                 False))
        for place, (array, title, key, signed) in zip(places, maps):
            with place:
                show_matrix(array, tok, key_tok, title, key, diverging=signed,
                            colorscale=None if signed else plots.WEIGHT_SCALE,
                            row_title="query", col_title="key",
                            share=0.2 if h.lesson else 1.0 if signed
                            else ui.column_share(0.5))
        csv_button(h, inside.position_bias, tok, key_tok, "position bias", "position_bias")


def mask(h: Head) -> None:
    inside = h.inside
    if inside.causal or inside.position_bias is not None:
        matrix_step(h, "mask", "masked_scores", inside.masked_scores, h.tok, h.key_tok,
                    "scores + "
                    + ("bias + " if inside.position_bias is not None else "")
                    + f"mask: {h.t} × {h.s_keys}", "masked scores", "query", "key",
                    key="masked")
    else:
        step_header(h.num("mask"), h.steps["masked_scores"])
        st.caption("Here S' = S: the matrix is the one above.")


def softmax(h: Head) -> None:
    step_header(h.num("softmax"), h.steps["weights"])
    difference = h.inside.largest_difference(h.the_map)
    st.caption(f"These are exactly the weights of {h.name} on the Attention maps page "
               f"(largest difference {difference:.1e}). Every row sums to 1.")
    with lesson_mode.figure_place():
        show_matrix(h.inside.weights, h.tok, h.key_tok,
                    f"softmax: the attention weights, {h.t} × {h.s_keys}", "weights",
                    diverging=False, colorscale=plots.WEIGHT_SCALE, row_title="query",
                    col_title="key", on_select=pick("weights"),
                    share=lesson_mode.FIGURE_SHARE if h.lesson else 1.0)
        csv_button(h, h.inside.weights, h.tok, h.key_tok, "weights", "weights")
    if not h.lesson:  # already in a folded section, which cannot hold another
        st.markdown(f"**Follow query {h.query} '{ui.md_escape(h.query_label)}' through "
                    f"steps 5–8**")
        follow(h)


FOLLOW_TABLE_PX = 520  # a lesson's table of one query: all of 13 keys on a projector


def follow(h: Head) -> None:
    followed = h.inside.followed_query(h.query)
    st.markdown(words.followed_text(h.inside, h.query, h.query_label, followed.strongest,
                                    h.ref))
    with lesson_mode.figure_place():  # a lesson's screen: the whole table beside the words
        st.dataframe(followed.by_weight(h.key_tok) if h.lesson else
                     {"key": h.key_tok, **followed.table}, hide_index=True, width="stretch",
                     height=min(FOLLOW_TABLE_PX if h.lesson else 420, 38 + 35 * h.s_keys))


def context(h: Head) -> None:
    matrix_step(h, "context", "context", h.inside.context, h.tok, h.k_cols,
                f"weights × V: {h.t} × {h.dk}", "context", "token", "d_k")


def output(h: Head) -> None:
    matrix_step(h, "output", "W_O", h.inside.W_O, h.k_cols, h.d_cols,
                f"W_O slice of {h.name}: {h.dk} × {h.d}", "W_O slice", "d_k", "d_model")
    if not h.lesson:
        contribution(h)


def contribution(h: Head) -> None:
    # a lesson's screen: all_heads_text says what the step's sentence says, and more
    matrix_step(h, "contribution", "contribution", h.inside.contribution, h.tok, h.d_cols,
                f"contribution of {h.name}: {h.t} × {h.d}", "contribution", "token",
                "d_model", explain=not h.lesson)
    st.markdown(words.all_heads_text(h.inside, h.lesson))
