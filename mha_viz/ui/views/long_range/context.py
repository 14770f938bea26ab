"""What every section of the Long range page reads, built once: the sidebar's selection, the
needle prompts and what one pass over them measured, and the long text the sinks and the
windows read with its sink and window."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from .... import analysis as A
from .... import ui
from ...words import long_range as words

DEFAULTS = ui.LONG_RANGE_DEFAULTS
MAX_DEPTHS = 11


@dataclass(frozen=True)
class LongRange:
    """The page's input and choices: the needle cases and their study (None while it waits
    for its button or was cancelled), the long text's ids, the sink and the window."""
    selection: ui.Selection
    cases: tuple
    study: object
    text_ids: tuple
    text_source: str
    sink: int
    window: int

    @property
    def model(self):
        return self.selection.model

    @property
    def info(self):
        return self.selection.model.info

    @property
    def n_tokens(self) -> int:
        return len(self.text_ids)


def needle_choices(model) -> tuple[list[int], int, int]:
    """(prompt lengths, number of depths, seed) from the page's widgets; no lengths when
    the model's context cannot hold a needle."""
    options = ui.memo(A.needle_length_options, model)
    if not options:
        st.info(words.no_room(model.info.max_positions, ui.memo(A.shortest_prompt, model)))
        return [], DEFAULTS["depths"], DEFAULTS["seed"]
    default = [n for n in DEFAULTS["lengths"] if n in options] or options[:1]
    length_col, depth_col, seed_col = st.columns([3, 2, 1])
    lengths = ui.synced(length_col.multiselect, "lr_len", "Prompt lengths (tokens)", default,
                        options=options, format_func=lambda n: f"{n:,}",
                        help=words.LENGTHS_HELP)
    depths = ui.synced(depth_col.slider, "lr_depths", "Needle depths", DEFAULTS["depths"],
                       min_value=1, max_value=MAX_DEPTHS, help=words.DEPTHS_HELP,
                       valid=lambda n: 1 <= int(n) <= MAX_DEPTHS)
    seed = ui.synced(seed_col.number_input, "lr_seed", "Seed", DEFAULTS["seed"], min_value=0,
                     max_value=1_000_000, step=1, help=words.SEED_HELP,
                     valid=lambda n: 0 <= int(n) <= 1_000_000)
    return sorted(lengths), int(depths), int(seed)


def needle_study(model, lengths: list[int], depths: int, seed: int):
    """(cases, their study or None): one forward per case, as a job."""
    if not lengths:
        return (), None
    cases = tuple(ui.memo(A.needle_cases, model, lengths=tuple(lengths),
                          depths=A.needle_depths(depths), seed=seed))
    longest = max(lengths)
    study = ui.run_or_wait(A.needle_study, model, cases, name="lr_needles",
                           label=words.needle_label(len(cases)),
                           auto=ui.runs_on_open("long_range.needles", longest),
                           button=words.needle_button(len(cases), longest))
    return cases, study


def text_choices(selection, trace) -> tuple[tuple, str, int, int]:
    """(the long text's ids, where it comes from, sink, window) from the page's widgets."""
    model = selection.model
    source_col, tokens_col, sink_col, window_col = st.columns([3, 2, 1, 1])
    source = ui.synced(source_col.radio, "lr_text", "Long text", "docs",
                       options=list(words.TEXT_SOURCES), format_func=words.TEXT_SOURCES.get,
                       horizontal=True)
    sizes = A.text_lengths(model.info.max_positions)
    tokens = ui.synced(tokens_col.select_slider, "lr_tokens", "Tokens",
                       DEFAULTS["tokens"] if DEFAULTS["tokens"] in sizes else sizes[-1],
                       options=sizes, help=words.TOKENS_HELP, disabled=source != "docs")
    sink = ui.synced(sink_col.number_input, "lr_sink", "Sink", DEFAULTS["sink"], min_value=0,
                     max_value=1024, step=1, help=words.SINK_HELP,
                     valid=lambda n: 0 <= int(n) <= 1024)
    window = ui.synced(window_col.number_input, "lr_window", "Window",
                       ui.long_range_window(model.info.max_positions),
                       min_value=1, max_value=model.info.max_positions, step=1,
                       help=words.WINDOW_HELP,
                       valid=lambda n: 1 <= int(n) <= model.info.max_positions)
    ids = (tuple(trace.token_ids) if source == "sidebar"
           else ui.memo(A.haystack_ids, model, int(tokens)))
    return ids, words.TEXT_SOURCES[source], int(sink), int(window)


def build(selection) -> LongRange | None:
    """The page's context, or None (with the reason shown) for a model it cannot read."""
    trace = ui.get_trace(selection)  # the sidebar's text, checked as every page checks it
    model = selection.model
    if not (model.info.causal and model.info.has_lm_head):
        st.info(words.not_causal(ui.md_escape(model.info.name)))
        return None
    with st.expander(words.CHOICES, expanded=True):
        st.markdown(words.NEEDLE_CHOICES)
        lengths, depths, seed = needle_choices(model)
        st.markdown(words.TEXT_CHOICES)
        ids, source, sink, window = text_choices(selection, trace)
    cases, study = needle_study(model, lengths, depths, seed)
    return LongRange(selection, cases, study, ids, source, sink, window)
