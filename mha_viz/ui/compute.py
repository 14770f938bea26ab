"""Caching and jobs: the loaded models, traces and runs (kept within the server's memory
budget), analysis results per input, and long computations as jobs that outlive a script run.

Cached objects are shared between sessions: never mutate them."""

from __future__ import annotations

import gc
import os
import threading
import time
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
import streamlit as st

from .. import checkpoints
from ..core import budget
from ..core.digest import call_key, digest
from ..core.errors import MhaVizError, OfflineError
from ..engine.placement import placement_from_environment
from ..maps.trace import AttentionTrace
from ..models.generation import Generation, mark_written
from ..models.model import ForwardRun, Model, load_model
from ..server import export, jobs
from .messages import callback, show_error
from .settings import APP_DIR, WRITTEN_MARK, md_escape

# A result is stored under its function's qualified name and one digest of its arguments
# (core.digest.call_key): every store here, the warm start and the pages derive it alike.
result_key = call_key


def figure_tag(*values) -> str:
    """A short name of what a figure shows, for its meta (12 hex digits of core.digest):
    tests and benchmarks tell which input a figure was drawn for."""
    return digest(*values, size=6)


def set_figure_meta(selection: "Selection") -> None:
    """Tag every figure of this run with a short id of the input (see show_figure)."""
    st.session_state["_mv_meta"] = {"input": figure_tag(selection.key)}


@st.cache_resource(max_entries=3, show_spinner="Loading the model…")
def _load_model_cached(name: str) -> Model:
    where = placement_from_environment()  # MHA_VIZ_DTYPE, MHA_VIZ_DEVICE: the operator's
    return _freezing_the_heap(
        lambda: load_model(name, local_dirs=checkpoints.allowed_dirs(APP_DIR / "models"),
                           dtype=where.dtype, device=where.device))


_heap_lock = threading.Lock()


def _freezing_the_heap(load: Callable[[], Model]) -> Model:
    """load(), then the whole live heap moved out of the garbage collector's sight.

    Streamlit runs a full collection after every script run (runner.postScriptGC), holding
    the GIL, so the server sends nothing meanwhile. With the libraries and a model loaded that
    heap is ~400k objects and the collection took 0.2-0.5 s of every page's open. Frozen
    objects are still freed by reference counting; only cycles among them wait: the next load
    unfreezes, collects (a model the cache let go of goes then) and freezes again."""
    model = load()
    with _heap_lock:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
    return model


_OFFLINE_RETRY_SECONDS = 20.0
_offline_failures: dict[str, tuple[float, OfflineError]] = {}


def get_model(name: str) -> Model:
    """The loaded model (cached, at most 3 at once). Raises MhaVizError on a bad name.

    A hub id that failed because the hub is unreachable is not retried for 20 s: the check
    can take seconds, and every widget change reruns the page."""
    name = str(name).strip()
    failed = _offline_failures.get(name)
    if failed is not None and time.monotonic() - failed[0] < _OFFLINE_RETRY_SECONDS:
        raise failed[1]
    try:
        return _load_model_cached(name)
    except OfflineError as error:
        _offline_failures[name] = (time.monotonic(), error)
        raise


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
    turns = _forward_turns()
    waiting = None
    if not turns.acquire(blocking=False):
        # At most MHA_VIZ_MAX_JOBS forward passes at once (memory and cores): say so.
        waiting = st.info(f"The server is running other people's texts "
                          f"({jobs.default_max_running()} at a time); yours starts as soon as "
                          f"one of them finishes.", icon="⏳")
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
    return threading.BoundedSemaphore(jobs.default_max_running())


def cached_trace(name: str, text: str, pair: str | None, max_tokens: int | None,
                 weights: str = "attention") -> AttentionTrace:
    return _forward_cached("trace", name, text, pair, max_tokens, weights)


@dataclass(frozen=True)
class Selection:
    """What the sidebar chose. ``key`` identifies the input (a figure's meta names it)."""

    model_name: str  # what load_model() gets: "minilm", "gpt2", or a folder path
    text: str
    text_pair: str | None  # sentence B (BERT only), None when empty
    max_tokens: int | None
    model: Model | None = field(default=None, compare=False, repr=False)
    model_error: MhaVizError | None = field(default=None, compare=False)
    # a saved trace the person opened (pages that only read maps show it instead)
    uploaded: AttentionTrace | None = field(default=None, compare=False, repr=False)
    upload_digest: str | None = None
    # an encoder-decoder: the target (None: the model's own output) and the kind of
    # attention shown ("encoder", "decoder", "cross"); None for other models
    target: str | None = None
    kind: str | None = None
    # what the model wrote after the sidebar's text (Continue, on Home): ``text`` is the two
    # together, and the written tokens are marked in every trace and run the pages read
    generation: Generation | None = field(default=None, compare=False, repr=False)

    @property
    def typed_text(self) -> str:
        """The sidebar's text as typed, without the model's continuation."""
        if self.generation is None:
            return self.text
        return self.text[:len(self.text) - len(self.generation.text)]

    @property
    def key(self) -> tuple:
        if self.upload_digest is not None:
            return ("uploaded trace", self.upload_digest)
        pair = (self.model_name, self.text, self.text_pair, self.max_tokens)
        return pair if self.kind is None else (*pair, self.target, self.kind)

    @property
    def file_stem(self) -> str:
        """A short name for downloads: the model name, or the folder's last part."""
        name = self.model_name
        if os.sep in name or name.startswith((".", "~")):
            name = Path(name).name or "model"
        return export.safe_filename(name)


def run_cached(name: str, text: str, pair: str | None, max_tokens: int | None) -> ForwardRun:
    return _forward_cached("run", name, text, pair, max_tokens)


def get_run(selection: Selection) -> ForwardRun:
    """One forward pass kept whole (model.run): its trace, predictions, target metrics and
    attribution cost nothing more. For pages that show a model's outputs beside its maps; on
    bad input it shows the error and stops the page, as get_trace does."""
    return _computed_or_stop(selection, run_cached)


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


def cached_seq2seq_trace(name: str, source: str, target: str | None):
    """An encoder-decoder's trace of a source and target, kept in the server's store."""
    model = get_model(name)
    return results_store().get_or_compute(result_key(model.trace, source, target=target),
                                          lambda: model.trace(source, target=target))


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


CROSS_ON_MAPS_PAGE = ("Cross-attention maps are target × source, and this page reads the "
                      "self-attention of one stack: pick *encoder self-attention* or *decoder "
                      "self-attention* in the sidebar.")


def get_trace(selection: Selection, cross_view: Callable | None = None,
              weights: str = "attention") -> AttentionTrace:
    """The trace for the selection (computed once per (model, text, pair, max_tokens,
    weights) and cached), or the saved trace the person opened in the sidebar. On bad input
    it shows the error on the page and stops the page. For an encoder-decoder: the
    self-attention of the stack the sidebar picked, as an AttentionTrace; for its
    cross-attention, the page's cross_view(EncoderDecoderTrace) draws the page, which then
    stops. weights: "attention" or "value" (its rows what each head moves from each key,
    normalized: controls.weights_switch); an encoder-decoder's and a saved trace's maps are
    what they are (the switch says so)."""
    if selection.kind is not None and selection.uploaded is None:
        if selection.kind == "cross":
            if cross_view is None:
                st.info(CROSS_ON_MAPS_PAGE)
            else:
                cross_view(get_seq2seq_trace(selection))
            st.stop()
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


# ----------------------------------------------------------------------- memo



def memo(fn: Callable, *args, large: bool = False, **kwargs):
    """``fn(*args, **kwargs)``, computed once and shared by every session, stored under
    result_key: the function's qualified name and one digest of its arguments (a model, a
    trace and a run name themselves by their input; numbers, strings and arrays by value), so
    any page asking the same call gets the same result. fn must be named at module level.
    large=True for results the size of a trace (kept in the server's byte-bounded store, see
    mha_viz.core.budget), else 64 are kept. Treat the result as read-only."""
    key = result_key(fn, *args, **kwargs)
    store = results_store() if large else _small_store()
    return store.get_or_compute(key, lambda: fn(*args, **kwargs))


# ----------------------------------------------------------- results and jobs


def _one(value) -> int:
    return 1


@st.cache_resource(show_spinner=False)
def _small_store() -> budget.ByteLRU:
    """Results smaller than a trace: the 64 used last (a store bounded by count)."""
    return budget.ByteLRU(64, size=_one)


@st.cache_resource(show_spinner=False)
def results_store() -> budget.ByteLRU:
    """Traces, runs and results the size of a trace, in one store bounded by bytes (half the
    memory budget; the rest is for the forward passes running)."""
    return budget.ByteLRU(int(budget.RESULTS_SHARE * budget.budget_bytes()))


@st.cache_resource(show_spinner=False)
def job_runner() -> jobs.JobRunner:
    """The server's one job runner: at most MHA_VIZ_MAX_JOBS heavy computations at once."""
    return jobs.JobRunner(jobs.default_max_running())


def clear() -> None:
    """Forget every stored result and cancel every job (tests; a fresh start)."""
    for store in (_small_store(), results_store()):
        store.clear()
    job_runner().cancel_all()


_CANCELLED = "_mv_cancelled_jobs"  # keys this session cancelled: not restarted by themselves


def peek(key: str, large: bool = False):
    """The result stored under key (result_key of its call), or None."""
    return (results_store() if large else _small_store()).get(key)[1]


def cancelled(key: str) -> bool:
    """Whether this session cancelled the computation under key (and has not restarted it)."""
    return key in st.session_state.get(_CANCELLED, set())


def _cancel(key: str) -> None:
    st.session_state.setdefault(_CANCELLED, set()).add(key)
    job_runner().cancel(key)


def _progress_text(job: jobs.Job, label: str, runner: jobs.JobRunner,
                   unit: tuple[str, float] | None = None) -> str:
    """unit: (what a step is, e.g. "segments"; tokens per step) adds the steps' name and a
    rate in tokens per second."""
    if job.state == jobs.QUEUED:
        ahead = runner.queue_position(job)
        return (f"{label}: waiting its turn ({ahead} in line; the server runs "
                f"{runner.max_running} heavy computation(s) at once)")
    if job.cancelling:
        return f"{label}: cancelling…"
    elapsed = f"{job.elapsed:.0f} s"
    if not job.total:
        return f"{label}: running, {elapsed}"
    left = job.seconds_left
    eta = f", about {left:.0f} s left" if left is not None else ""
    steps, rate = "", ""
    if unit is not None:
        steps = f" {unit[0]}"
        if job.done and job.elapsed > 0:
            rate = f", {job.done * unit[1] / job.elapsed:,.0f} tokens/s"
    return f"{label}: {job.done} of {job.total}{steps} ({elapsed}{rate}{eta})"


def _wait_showing_progress(job: jobs.Job, key: str, label: str, where,
                           unit: tuple[str, float] | None = None) -> None:
    """Draw the job's progress until it ends. A Cancel button stops a job that reports
    progress; anything else that stops this script run (a widget change, a page switch)
    leaves the job running."""
    runner = job_runner()
    holder = (where or st).empty()
    with holder.container():
        if job.reports_progress:
            bar_col, button_col = st.columns([5, 1], vertical_alignment="center")
            button_col.button("Cancel", key=f"_mv_cancel_{key}",
                              on_click=callback(_cancel), args=(key,),
                              help="Stop this computation. Changing a widget or switching "
                                   "pages does not stop it.")
        else:
            bar_col = st.container()
        bar = bar_col.empty()
    while not job.wait(0.25):
        if job.reports_progress:
            bar.progress(job.fraction, text=_progress_text(job, label, runner, unit))
        else:
            bar.info(_progress_text(job, label, runner, unit), icon="⏳")
    holder.empty()


def computed(fn: Callable, *args, label: str, large: bool = False, where=None,
             restart: bool = False, unit: tuple[str, float] | None = None, **kwargs):
    """``fn(*args, **kwargs)`` computed once (stored under result_key, shared by all
    sessions, as memo is), as a job that outlives this script run. While it runs the page
    shows ``label`` with its progress (when fn takes ``progress``: steps done, time left and
    a Cancel button) or the time so far. Returns the result, or None when this session
    cancelled it (until restart=True: the person asked for it again).
    large=True: kept in the byte-bounded store with the traces (mha_viz.core.budget).
    unit: (what a step is, tokens per step), to show steps by name and tokens per second."""
    key = result_key(fn, *args, **kwargs)
    store = results_store() if large else _small_store()
    found, value = store.get(key)
    if found:
        return value
    if restart:
        st.session_state.get(_CANCELLED, set()).discard(key)
    elif cancelled(key):
        return None
    runner = job_runner()
    job = runner.submit(key, fn, *args, label=label, **kwargs)
    if not job.finished_state:
        _wait_showing_progress(job, key, label, where, unit)
    runner.forget(key, job)
    if job.state == jobs.DONE:
        store.put(key, job.result)
        return job.result
    if job.state == jobs.FAILED:
        raise job.error
    st.session_state.setdefault(_CANCELLED, set()).add(key)
    return None


def run_or_wait(fn: Callable, *args, label: str, auto: bool, button: str,
                name: str | None = None, large: bool = False, where=None,
                unit: tuple[str, float] | None = None, **kwargs):
    """The stored result of ``fn(*args, **kwargs)``, or compute it now: by itself when
    ``auto`` (unless the person cancelled it), else when the button is pressed. None while it
    waits for the button. name: the button's widget key is run_<name> (default: fn's name);
    large, where, unit: as computed takes them."""
    key = result_key(fn, *args, **kwargs)
    found = peek(key, large)
    if found is not None:
        return found
    was_cancelled = cancelled(key)
    job = job_runner().get(key)
    # started earlier (by a click before a widget change or a page switch): wait on it again
    started = job is not None and not job.cancelling and job.state in (
        jobs.QUEUED, jobs.RUNNING, jobs.DONE)
    pressed = False
    if not started and (was_cancelled or not auto):
        holder = st.empty()
        pressed = holder.button(f"{button} (cancelled: run again)" if was_cancelled else button,
                                key=f"run_{name or fn.__name__}")
        if pressed:
            holder.empty()  # the progress and its Cancel button take its place
    if pressed or started or (auto and not was_cancelled):
        return computed(fn, *args, label=label, large=large, where=where, restart=pressed,
                        unit=unit, **kwargs)
    return None


def masked_trace(selection, mask: np.ndarray, ablation: str = "zero"):
    """The selection's trace with the heads where mask == 0 switched off (stored per mask)."""
    model = get_model(selection.model_name)
    return computed(model.trace, selection.text, text_pair=selection.text_pair,
                    max_tokens=selection.max_tokens,
                    head_mask=np.asarray(mask, dtype=np.float32), ablation=ablation,
                    maps="budget", label="Running the model with those heads switched off…",
                    large=True)
