"""Inside one head's sections that look beyond the head's own arithmetic, each taking the
page's ``Head``: why the head attends where it does (its score split by source, ui.why), the
same weights with less memory (chunked and flash attention), how the head learns (the
gradients of W_Q and W_O), what attention costs; and the lesson's screens: why an induction
head attends where it does, on the bundled induction toy (the textbook case of
docs/analyses.md), what a head moves beside where it looks (Kobayashi et al. 2020), and the
Training page, where heads learn."""

from __future__ import annotations

import numpy as np
import streamlit as st

from .... import analysis, plots, ui
from ....analysis.one_head import blockwise
from ....analysis.one_head import gradients as head_gradients
from ....analysis.one_head import kv_cache_size
from ....analysis.why import key_side_writers
from ....core.errors import MhaVizError
from ....plots import fit
from ... import lesson as lesson_mode
from ...token_boxes import token_boxes
from ...words import inside_one_head as page_words
from ...words import one_head as words
from ...words import why as why_words
from .head import Head
from .matrices import show_matrix

TOY = "induction-toy"  # the bundled run's last checkpoint (the model picker lists it)
# a passage repeated: in its second copy every query has an induction target
TOY_TEXT = "the cat sat on the mat. the cat sat on the mat."
LOSSES = {"next_token": "next-token loss of the text",
          "output_norm": "½‖Y‖², Y this layer's attention output"}


def why(h: Head) -> None:
    """A cell clicked on the scores or the weights, by source (ui.why)."""
    ui.why_body(h.selection, h.trace, h.layer, h.head, (h.query, h.linked_key), query=h.query,
                key_name="wk")


def flash(h: Head) -> None:
    """Chunked attention and flash attention's online softmax on this head's own scores:
    the running maximum and sum of the followed query, and the memory each way needs."""
    inside = h.inside
    n_rows, n_keys = inside.masked_scores.shape
    # a lesson's screen: three blocks, so both tables fit beside the words
    blocks = 3 if h.lesson else 4
    block = int(ui.synced(st.number_input, "fblock", "Block size (rows, or keys)",
                          max(1, -(-n_keys // blocks)), min_value=1, max_value=max(1, n_keys),
                          valid=lambda v: 1 <= int(v) <= max(1, n_keys),
                          help="Chunked attention takes this many query rows at a time; the "
                               "online softmax this many keys at a time."))
    online = blockwise.online_softmax_attention(inside.masked_scores, inside.V, block)
    checks = blockwise.blockwise_check(inside.masked_scores, inside.V, block)
    st.markdown(page_words.flash_text(max(checks.values())))
    with lesson_mode.figure_place():  # a lesson's screen: the tables beside the words
        st.markdown(f"Query {h.query} '{ui.md_escape(h.query_label)}', {block} keys at a time:")
        running = blockwise.running_table(online, h.query, list(inside.columns))
        st.dataframe(running, hide_index=True, width="stretch",
                     height="auto")
        memory = blockwise.memory_table(n_rows, n_keys, inside.d_k, block)
        st.dataframe(memory, hide_index=True, width="stretch")
        if not lesson_mode.on_lesson_screen():  # a lesson's screen: the tables and words
            st.caption(page_words.FLASH_MEMORY)


def gradients(h: Head) -> None:
    """dL/dW_Q and dL/dW_O of this head by autograd, and the two formulas that give them."""
    losses = head_gradients.losses_for(h.model)
    loss = ui.synced(st.radio, "gloss", "Loss", losses[0], options=list(losses),
                     horizontal=True, valid=lambda v: v in losses, format_func=LOSSES.get,
                     help="What the gradient is of. The next-token loss is what a causal "
                          "model is trained on; ½‖Y‖² has dL/dY = Y, easy to follow by hand.")
    st.markdown(page_words.GRADIENTS)
    if not ui.synced(st.toggle, "grads", "Compute the gradients (one backward pass)", False):
        st.caption("One backward pass through the whole model; switch it on to see them.")
        return
    found = ui.memo(head_gradients.head_gradients, h.model, text=h.selection.text,
                    layer=h.layer, head=h.head, loss=loss)
    st.markdown(f"Loss L = {found.loss:.4f}. Largest difference between autograd and the "
                f"two formulas: {found.largest_difference:.1e}.")
    with lesson_mode.figure_place():
        show_matrix(found.d_W_Q, h.d_cols, h.k_cols, "dL/dW_Q of this head", "grad_q",
                    fmt=".2g", row_title="d_model", col_title="d_k")
        show_matrix(found.d_W_O, h.k_cols, h.d_cols, "dL/dW_O of this head", "grad_o",
                    fmt=".2g", row_title="d_k", col_title="d_model")


def cost(h: Head) -> None:
    """Parameters and, on the whole page, the KV cache (kv_cache)."""
    ui.attention_cost(h.model.info, kv_cache=not h.lesson)
    if h.model.info.writes_with_kv_cache and not h.lesson:
        kv_cache(h)


def kv_cache(h: Head) -> None:
    """What a model that writes a token at a time keeps, as the text's last token is
    written: the figure beside the words (a lesson's screen of its own)."""
    if h.lesson:
        ui.kv_cache_card(h.model.info)
    st.markdown(words.KV_CACHE_WHAT)
    title = words.kv_cache_title(h.labels[-1])
    with lesson_mode.figure_place():
        ui.show_figure(plots.kv_cache_figure(kv_cache_size.cache_roles(h.t), h.tok,
                                             words.CACHE_ROLES, title, words.CACHE_COLOURS),
                       key="kv_roles", alt=title,
                       share=lesson_mode.FIGURE_SHARE if h.lesson else 1.0)


def learning(h: Head) -> None:
    """The lesson's link to the Training page: the same weights, watched as they trained
    (its title is the lesson's progress line)."""
    st.markdown(page_words.learning_text(h.ref("gradients")))  # where they are, if shown
    st.page_link("pages/10_Training.py", icon="▶", label="**Open Training: watch attention "
                 "learn**", query_params={"series": "induction-toy"})


def toy_case(selection: ui.Selection):
    """(selection, its trace, the textbook case, the toy's induction scores on the Training
    page's probe) on the toy: the sidebar's own model and text when they are a toy and
    repeat something, else the toy on TOY_TEXT. The case's head is the one the probe
    names, as the Training page does."""
    if selection.model is not None and selection.model_name == TOY \
            and selection.uploaded is None:
        trace = ui.get_trace(selection)
        probe = ui.memo(analysis.probe_induction, selection.model)
        try:
            return (selection, trace,
                    ui.memo(analysis.induction_example, trace, probe.head()), probe)
        except MhaVizError:  # the sidebar's text repeats nothing: the toy's own text
            pass
    toy = ui.Selection(model_name=TOY, text=TOY_TEXT, text_pair=None, max_tokens=None,
                       model=ui.get_model(TOY))
    trace = ui.get_trace(toy)
    probe = ui.memo(analysis.probe_induction, toy.model)
    return toy, trace, ui.memo(analysis.induction_example, trace, probe.head()), probe


def textbook(h: Head) -> None:
    """The induction head's score at its target, split by source: most of it comes from the
    key side of the previous-token heads (K-composition); the head named as the Training
    page names it (its probe), the toy's text with positions beside the figure."""
    toy, trace, case, probe = toy_case(h.selection)
    found = ui.memo(analysis.score_attribution, toy.model, toy.text, case.layer, case.head,
                    case.query, contrast="mean")
    parts = found.strongest_sources(case.key, "key", k=4)
    asks = found.strongest_sources(case.key, "query", k=3)
    labels = list(trace.display_tokens)
    writers = key_side_writers(parts, case.layer, trace.n_head)
    st.markdown(words.textbook_text(
        case, labels, float(found.capped_scores[found.column(case.key)]), parts,
        toy is h.selection, writers, float(probe.scores[case.layer, case.head]),
        [plots.head_name(*p) for p in probe.peers(case.layer, case.head)]))
    if toy is not h.selection:
        lesson_mode.lesson_in_new_tab(
            words.TOY_LESSON_LINK, "Inside_One_Head",
            {"model": TOY, "text": TOY_TEXT, "layer": str(case.layer), "head": str(case.head),
             "query": str(case.query), "wk": str(case.key)})
    with lesson_mode.figure_place():
        token_boxes(labels)  # the positions the sentence names
        name = plots.head_name(case.layer, case.head)
        bars = [(words.side_label("key", why_words.source_label(s)), v) for s, v in parts] + \
            [(words.side_label("query", why_words.source_label(s)), v) for s, v in asks]
        with lesson_mode.room_taken(words.TOKEN_BOXES_PX):
            ui.show_figure(plots.source_bars(
                [label for label, _ in bars], np.array([v for _, v in bars]),
                f"{name}'s score at query {case.query} → key {case.key}, by source",
                words.TEXTBOOK_NOTE), key="textbook",
                alt="The induction head's score by source, key side and query side",
                share=lesson_mode.FIGURE_SHARE)


def moves(h: Head) -> None:
    """This head's map of weights beside its map of what moves, and the first token's share
    of each."""
    selection, model = h.selection, h.model
    if model is None or "value" not in model.map_weights or selection.uploaded is not None:
        st.info(words.MOVES_NOT_HERE)
        return
    looks = ui.get_trace(selection)
    moved = ui.get_trace(selection, weights="value")
    shares = ui.memo(analysis.sink_shares, looks, moved)
    layer, head = shares.widest_gap()  # the example where the two views differ
    name = plots.head_name(layer, head)
    chosen = None if (layer, head) == (h.layer, h.head) else (
        h.name, float(shares.of_weights[h.layer, h.head]),
        float(shares.of_moved[h.layer, h.head]))
    st.markdown(words.moves_text(name, looks.display_tokens[0],
                                 float(shares.of_weights[layer, head]),
                                 float(shares.of_moved[layer, head]), chosen))
    screen = ui.figure_screen(lesson_mode.FIGURE_SHARE)
    narrow = screen is not None and screen.width < fit.NARROW_PX  # a phone: stacked
    with lesson_mode.figure_place():
        title = f"{name}: where it looks, what it moves"
        ui.show_figure(plots.head_heatmap_row(
            [looks.head_map(layer, head), moved.head_map(layer, head)],
            list(looks.display_tokens), ["weights", "share moved"], causal=looks.causal,
            title=title, max_ticks=40, per_row=1 if narrow else None,
            height=int(screen.width + 40) if narrow else 420),
            key="moves", alt=title, share=lesson_mode.FIGURE_SHARE)
