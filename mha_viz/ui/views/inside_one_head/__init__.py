"""The Inside one head page's view, for the classroom: every step of one head's computation
with the real tensors of the chosen layer, head and text (X, Q, K, V, the scores, the mask,
the softmax, the weighted values, W_O and the head's contribution; RoPE, QK-norm, soft-caps
and T5's position bias where the model has them), chunked and flash attention, the gradients
and the KV cache; in lesson mode one step per screen (ui.lesson).

``show()`` builds the page's context once (``head.Head``: the selection, the trace, the head
and query chosen, every array of the head) and hands its sections to ui.lesson, which draws
them in order (folded below the first screen) or, in a lesson, one per screen. Which
sections this head shows, in what order and under which title: ``contents.sections``; what
draws each: DRAW below (``steps``: the head's own computation; ``beyond``: why it attends,
flash attention, the gradients, the cost and the lesson's screens). A new section is one
function, its line in ``contents.sections`` and its line in DRAW."""

from __future__ import annotations

from functools import partial

import streamlit as st

from .... import ui
from ... import lesson as lesson_mode
from ...words import inside_one_head as words
from . import beyond, feature_step, steps
from .contents import WORDS_ONLY
from .head import Head, head_of

MAPS = ("self", "encoder", "decoder", "cross")  # the sets of maps the page reads (maps.sets)
DRAW = {
    "overview": steps.overview, "memory": steps.memory, "X": steps.x, "qkv": steps.qkv,
    "layout": steps.layout, "qknorm": steps.qk_norm, "rope": steps.rope,
    "scores": steps.scores, "softcap": steps.softcap, "bias": steps.bias, "mask": steps.mask,
    "softmax": steps.softmax, "follow": steps.follow, "context": steps.context,
    "output": steps.output, "contribution": steps.contribution,
    "why": beyond.why, "flash": beyond.flash, "gradients": beyond.gradients,
    "cost": beyond.cost, "kvcache": beyond.kv_cache, "learning": beyond.learning,
    "textbook": beyond.textbook, "moves": beyond.moves,
    "features": feature_step.induction_feature,
}


def show() -> None:
    lesson = ui.synced(st.toggle, "lesson", "Lesson mode: one step per screen", False,
                       help=words.LESSON_HELP)
    # a lesson's screen keeps its rows: what marks the written tokens goes to the sidebar
    selection = ui.sidebar(shows_saved_traces=False, reads=MAPS,
                           explains_mark="sidebar" if lesson else True)
    if not lesson:  # a lesson's screen is for the step itself
        st.markdown(words.INTRO)
    with ui.guard():
        h = head_of(selection, lesson)
        # each section draws itself: all in order, or in a lesson one per screen (Back /
        # Next, the arrow keys, ?lstep= in the URL)
        lesson_mode.show_steps(h.sections, {key: partial(DRAW[key], h) for _, key, _ in
                                            h.sections}, lesson, words_only=WORDS_ONLY)
        downloads(h)


def downloads(h: Head) -> None:
    """Every array of this head, and the library call that gives them."""
    st.divider()
    ui.download_bytes(partial(h.inside.npz_bytes, h.labels), f"{h.stem}_inside.npz",
                      "⬇ Every array of this head (.npz)", key="dl_inside_all",
                      help=words.DOWNLOAD_HELP)
    st.caption(words.in_code(h.kind, h.layer, h.head))
    ui.caveat()
