"""What every section of Inside one head reads (``Head``): the selection, the stack's trace
(an encoder-decoder's too), the layer, head and query chosen, every array of the head's
computation (HeadInternals), the sections this head, page or lesson shows and their numbers.
Built once per run by ``head_of``, which draws the choices (in a lesson: in the sidebar)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import streamlit as st

from .... import plots, ui
from ....analysis.one_head.steps import (HeadInternals, inside_bytes_per_squared_token,
                                         inside_one_head)
from ....server import export
from ...words import inside_one_head as words
from ...words import one_head as step_words
from .contents import sections

LESSON_LABEL_CHARS = 6  # a lesson's axis labels: tokens cut to this many characters


@dataclass(frozen=True)
class Head:
    """One head of one text, as every section draws it."""
    selection: ui.Selection
    trace: object  # the AttentionTrace whose layers, heads and query rows the head has
    seq: object | None  # an encoder-decoder's EncoderDecoderTrace (None: one stack)
    lesson: bool
    layer: int
    head: int
    query: int
    linked_key: int  # the key the opening view links the query to (why's first cell)
    inside: HeadInternals
    the_map: np.ndarray  # this head's map as the Attention maps page shows it

    @property
    def model(self):
        return self.selection.model

    @property
    def kind(self) -> str | None:
        return self.selection.kind

    @property
    def name(self) -> str:
        return plots.head_name(self.layer, self.head)

    @property
    def t(self) -> int:
        return self.trace.n_tokens

    @property
    def d(self) -> int:
        return self.inside.d_model

    @property
    def dk(self) -> int:
        return self.inside.d_k

    @cached_property
    def labels(self) -> list[str]:
        return list(self.trace.display_tokens)

    @property
    def query_label(self) -> str:
        return self.labels[self.query]

    @cached_property
    def tok(self) -> list[str]:
        """The query rows' labels (a lesson's screen cuts long tokens)."""
        return export.position_labels(self.labels, max_chars=self._cut)

    @cached_property
    def key_tok(self) -> list[str]:
        """The keys' labels: the text's tokens, or cross-attention's source tokens."""
        return export.position_labels(list(self.inside.columns), max_chars=self._cut)

    @property
    def _cut(self) -> int | None:
        return LESSON_LABEL_CHARS if self.lesson else None

    @property
    def s_keys(self) -> int:
        return len(self.key_tok)

    @cached_property
    def d_cols(self) -> list[str]:
        return words.dims(self.d, "d")

    @cached_property
    def k_cols(self) -> list[str]:
        return words.dims(self.dk, "k")

    @property
    def stem(self) -> str:
        return export.safe_filename(self.selection.file_stem, self.name)

    @cached_property
    def sections(self) -> list[tuple[str, str, bool]]:
        return sections(self.inside, self.lesson, self.query, self.query_label,
                        gradients=self.seq is None, kv_cache=self.model is not None
                        and self.model.info.writes_with_kv_cache)

    @cached_property
    def numbers(self) -> dict[str, str]:
        """One numbering on the screen: the page's steps (1, 4b, 5b, ...) or the lesson's
        screens."""
        return words.step_numbers(self.inside, self.sections, self.lesson)

    def ref(self, key: str) -> str:
        """"step 4b" on the page, "step 5" in a lesson ("" for a step not shown)."""
        return words.step_ref(self.numbers, key)

    def num(self, key: str) -> str | None:
        """A heading's number: none in a lesson (its progress line has it)."""
        return None if self.lesson else self.numbers[key]

    @cached_property
    def steps(self) -> dict:
        """Each step's words (symbol, shape, formula, explanation), by key."""
        return {s.key: s for s in step_words.head_steps(self.inside, self.ref)}

    @cached_property
    def layout(self):
        return step_words.layout_step(self.inside)


def head_of(selection: ui.Selection, lesson: bool) -> Head:
    """The head the page shows: the trace, the notes on it, the choices, its arrays. A text
    too long for one head's steps is refused here (the page stops)."""
    trace, seq = stack_trace(selection)
    with st.sidebar if lesson else st.container():
        ui.trace_notes(trace)
    refused = ui.too_long_for(words.too_long_what(trace.n_head, trace.n_tokens),
                              trace.n_tokens, inside_bytes_per_squared_token(trace.n_head))
    if refused:
        st.info(refused)
        st.stop()
    short_note = words.short_text_note(trace.n_tokens)
    if short_note:  # in a lesson, with the other notes, out of the class's way
        (st.sidebar if lesson else st).info(short_note)
    layer, head, query, linked_key = choices(trace, lesson)
    # every head's steps, of any set of the model's maps (an encoder-decoder's: its source
    # and target); its map as the Attention maps page shows it
    inside = ui.memo(inside_one_head, selection.model, selection.text, large=True, layer=layer,
                     head=head, text_pair=selection.text_pair, max_tokens=selection.max_tokens,
                     target=selection.target, maps=selection.kind)
    the_map = (trace.head_map(layer, head) if seq is None else
               seq.head_map(selection.kind, layer, head))
    return Head(selection, trace, seq, lesson, layer, head, query, linked_key, inside, the_map)


def stack_trace(selection: ui.Selection):
    """(the trace of the stack whose layers hold the chosen maps, the encoder-decoder's trace
    or None): cross-attention's heads and query rows are the decoder's."""
    if selection.kind is None:
        return ui.get_trace(selection), None
    seq = ui.get_seq2seq_trace(selection)
    return seq.as_trace(selection.map_set.stack), seq


def choices(trace, lesson: bool) -> tuple[int, int, int, int]:
    """The layer, head and query followed (in a lesson: in the sidebar, out of the class's
    way), opening on the token the text is about ('it', else the last) and the head that
    links it most strongly to the token it reads most (analysis.opening_view). -> (layer,
    head, query, the key it links to)."""
    focus, linked_key, *linking_head = ui.opening(trace)
    pick_col, query_col = (st.sidebar, st.sidebar) if lesson else st.columns([2, 1])
    with pick_col:
        layer, head = ui.head_picker(trace, default=tuple(linking_head))
    labels = list(trace.display_tokens)
    t = trace.n_tokens
    with query_col:
        query = ui.synced(st.selectbox, "query", "Follow one query token", focus,
                          options=list(range(t)), valid=lambda q: 0 <= int(q) < t,
                          format_func=lambda i: f"{i}: {labels[i]}", help=words.QUERY_HELP)
    return layer, head, query, linked_key
