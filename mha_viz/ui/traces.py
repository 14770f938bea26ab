"""The traces and runs the pages read: one forward per (model, text, choices), kept in the
server's byte-bounded store (the forward store), at most MHA_VIZ_MAX_JOBS at once; read
through the Selection with the page's messages (bad input shown and the page stopped, a saved
trace said, the model's continuation marked), each figure tagged with the input it shows.

Cached objects are shared between sessions: never mutate them."""

from __future__ import annotations

import threading
from dataclasses import replace
from functools import partial
from typing import Callable

import numpy as np
import streamlit as st

from ..core.digest import digest
from ..core.errors import MhaVizError
from ..maps.trace import AttentionTrace
from ..models.generation import Generation, mark_written
from ..models.model import ForwardRun
from ..models.batched import MAPS_BYTES_A_BATCH, batchable, maps_bytes
from ..server import jobs as server_jobs
from ..server.batching import Batches
from .jobs import computed
from .loading import get_model
from .messages import show_error
from .selection import Selection
from .settings import WRITTEN_MARK, md_escape
from .stores import result_key, results_store


def figure_tag(*values) -> str:
    """A short name of what a figure shows, for its meta (12 hex digits of core.digest):
    tests and benchmarks tell which input a figure was drawn for."""
    return digest(*values, size=6)


def set_figure_meta(selection: Selection) -> None:
    """Tag every figure of this run with a short id of the input (see show_figure)."""
    st.session_state["_mv_meta"] = {"input": figure_tag(selection.key)}


# ----------------------------------------------------------------- the forward store

# Short texts traced together at most (models.batched: 16 texts of SmolLM2 at once cost 0.09 s
# of one core a text against 0.16 s alone)
TRACES_A_BATCH = 16


def _forward_cached(kind: str, name: str, text: str, pair: str | None,
                    max_tokens: int | None, weights: str = "attention"):
    """model.trace(...) or model.run(...), kept in the server's byte-bounded store. An input
    whose maps would not fit the memory budget gets on-demand maps (maps="budget"); one whose
    on-demand trace would not fit either is refused with a message first. weights: the
    maps' rows, "attention" or "value" (what heads move), as Model.trace takes it."""
    model = get_model(name)
    forward = getattr(model, kind)
    key = result_key(forward, text, text_pair=pair, max_tokens=max_tokens, maps="budget",
                     weights=weights)
    store = results_store()
    found, value = store.get(key)
    if found:
        return value
    # maps held whole while they fit the budget's share for one input, else on demand; an
    # input that fits neither way is refused now, before it waits for a turn (a run, which
    # keeps more per token, checks its own share again before its forward)
    n_tokens = model.plan(text, pair, max_tokens).check().n_tokens
    if kind == "trace" and batchable(model, n_tokens):
        # a short text's trace shares a forward with the texts sent while another runs (a
        # class pressing Run together: one read of the weights for all of them)
        with st.spinner(f"Running the model on {n_tokens:,} tokens…"):
            return store.get_or_compute(key, lambda: _trace_batches(name, weights)(
                (model, text, pair, max_tokens, maps_bytes(model, n_tokens))))
    turns = _forward_turns()
    waiting = None
    if not turns.acquire(blocking=False):
        # At most MHA_VIZ_MAX_JOBS forward passes at once (memory and cores): say so.
        waiting = st.info(f"The server is running other people's texts "
                          f"({server_jobs.default_max_running()} at a time); yours starts as "
                          f"soon as one of them finishes.", icon="⏳")
        turns.acquire()
    try:  # from here the turn is always given back, even when the page run is stopped
        if waiting is not None:
            waiting.empty()
        # Model serialises its tokenizer calls itself; forwards of several sessions may overlap.
        with st.spinner(f"Running the model on {n_tokens:,} tokens…"):
            return store.get_or_compute(key, lambda: forward(
                text, text_pair=pair, max_tokens=max_tokens, maps="budget", weights=weights))
    finally:
        turns.release()


@st.cache_resource(show_spinner=False)
def _forward_turns() -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(server_jobs.default_max_running())


@st.cache_resource(show_spinner=False)
def _trace_batches(name: str, weights: str) -> Batches:
    """The short texts' traces of one model, batched (server.batching), each batch a forward
    turn of its own."""
    return Batches(partial(_trace_together, weights), max_items=TRACES_A_BATCH,
                   turn=_forward_turns(), size=lambda item: item[-1],
                   max_size=MAPS_BYTES_A_BATCH)


def _trace_together(weights: str, items) -> list[AttentionTrace]:
    """(model, text, pair, max_tokens, maps' bytes) items -> their traces from one forward (a
    model loaded again between two of them: no batch, each runs alone)."""
    model = items[0][0]
    if any(item[0] is not model for item in items):
        raise ValueError("the texts of one batch are for different loads of the model")
    return model.trace_batch([item[1:4] for item in items], weights=weights)


def cached_trace(name: str, text: str, pair: str | None, max_tokens: int | None,
                 weights: str = "attention") -> AttentionTrace:
    return _forward_cached("trace", name, text, pair, max_tokens, weights)


def run_cached(name: str, text: str, pair: str | None, max_tokens: int | None) -> ForwardRun:
    return _forward_cached("run", name, text, pair, max_tokens)


def cached_seq2seq_trace(name: str, source: str, target: str | None):
    """An encoder-decoder's trace of a source and target, kept in the server's store."""
    model = get_model(name)
    return results_store().get_or_compute(result_key(model.trace, source, target=target),
                                          lambda: model.trace(source, target=target))


# ------------------------------------------------------- read through the Selection


def _computed_or_stop(selection: Selection, compute: Callable):
    """compute(model name, text, pair, max_tokens), or the error shown and the page stopped."""
    try:
        if selection.model_error is not None:
            raise selection.model_error
        value = compute(selection.model_name, selection.text, selection.text_pair,
                        selection.max_tokens)
        set_figure_meta(selection)
        return value if selection.generation is None else _marked(value, selection.generation)
    except MhaVizError as error:
        show_error(error)
        st.stop()


def _marked(value, generation: Generation):
    """A trace or run of a text and the model's continuation, its written tokens marked (a
    view of the stored one: the maps are not copied, and the stored one is not changed)."""
    if isinstance(value, ForwardRun):
        return value if value.trace is None else replace(
            value, trace=_marked(value.trace, generation))
    return mark_written(value, generation.prompt_ids, WRITTEN_MARK)


def get_run(selection: Selection) -> ForwardRun:
    """One forward pass kept whole (model.run): its trace, predictions, target metrics and
    attribution cost nothing more. For pages that show a model's outputs beside its maps; on
    bad input it shows the error and stops the page, as get_trace does."""
    return _computed_or_stop(selection, run_cached)


def get_seq2seq_trace(selection: Selection):
    """The encoder-decoder trace (EncoderDecoderTrace) of the sidebar's source and target;
    on bad input the error is shown and the page stopped."""
    seq = _computed_or_stop(selection, lambda name, text, pair, max_tokens:
                            cached_seq2seq_trace(name, text, selection.target))
    if seq.unknown_source_tokens:
        st.warning(f"{seq.unknown_source_tokens} of the source's {len(seq.source_ids)} tokens "
                   f"are unknown to this model's tokenizer (shown as <unk>): it reads them "
                   f"all as one token it never learned a meaning for. A small model such as "
                   f"the toy T5 knows only its own vocabulary: try its example in the "
                   f"sidebar.")
    return seq


def get_trace(selection: Selection, weights: str = "attention") -> AttentionTrace:
    """The trace for the selection (computed once per (model, text, pair, max_tokens,
    weights) and cached), or the saved trace the person opened in the sidebar. On bad input
    it shows the error on the page and stops the page. For an encoder-decoder: the
    self-attention of the stack the sidebar picked (a square set of its maps), as an
    AttentionTrace; a page draws cross-attention from get_seq2seq_trace. weights:
    "attention" or "value" (its rows what each head moves from each key, normalized:
    controls.weights_switch); an encoder-decoder's and a saved trace's maps are what they
    are (the switch says so)."""
    if selection.kind is not None and selection.uploaded is None:
        return get_seq2seq_trace(selection).as_trace(selection.kind)
    if selection.uploaded is not None:
        st.info(f"Showing the saved trace **{md_escape(selection.uploaded.model_name)}** "
                f"({selection.uploaded.n_tokens} tokens) opened in the sidebar; close it "
                f"there to trace the text again.")
        if (weights == "value") != selection.uploaded.value_weighted:
            st.caption("The saved trace holds "
                       + ("what heads move" if selection.uploaded.value_weighted
                          else "attention weights") + ": its maps are shown as saved.")
        set_figure_meta(selection)
        return selection.uploaded
    return _computed_or_stop(selection, partial(cached_trace, weights=weights))


def masked_trace(selection, mask: np.ndarray, ablation: str = "zero"):
    """The selection's trace with the heads where mask == 0 switched off (stored per mask)."""
    model = get_model(selection.model_name)
    return computed(model.trace, selection.text, text_pair=selection.text_pair,
                    max_tokens=selection.max_tokens,
                    head_mask=np.asarray(mask, dtype=np.float32), ablation=ablation,
                    maps="budget", label="Running the model with those heads switched off…",
                    large=True)
