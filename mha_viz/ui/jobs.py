"""Long computations as jobs that outlive a script run: the server's one job runner, a job's
progress with its Cancel button, ``computed`` (a call run as a job, its result kept as memo
keeps one) and ``run_or_wait`` (a job behind a button past a size).

A job is keyed by its call (stores.result_key), so a visitor who arrives while it runs waits
for the same computation instead of starting a second one."""

from __future__ import annotations

from typing import Callable

import streamlit as st

from ..server import jobs
from .messages import callback
from .stores import peek, result_key, store_for


@st.cache_resource(show_spinner=False)
def job_runner() -> jobs.JobRunner:
    """The server's one job runner: at most MHA_VIZ_MAX_JOBS heavy computations at once."""
    return jobs.JobRunner(jobs.default_max_running())


def clear() -> None:
    """Forget every stored result and cancel every job (tests; a fresh start)."""
    for store in (store_for(False), store_for(True)):
        store.clear()
    job_runner().cancel_all()


_CANCELLED = "_mv_cancelled_jobs"  # keys this session cancelled: not restarted by themselves


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
             restart: bool = False, unit: tuple[str, float] | None = None,
             hint: str | None = None, **kwargs):
    """``fn(*args, **kwargs)`` computed once (stored under result_key, shared by all
    sessions, as memo is), as a job that outlives this script run. While it runs the page
    shows ``label`` with its progress (when fn takes ``progress``: steps done, time left and
    a Cancel button) or the time so far. Returns the result, or None when this session
    cancelled it (until restart=True: the person asked for it again).
    large=True: kept in the byte-bounded store with the traces (mha_viz.core.budget).
    unit: (what a step is, tokens per step), to show steps by name and tokens per second.
    hint: a line shown while it runs (how to have it ready next time)."""
    key = result_key(fn, *args, **kwargs)
    store = store_for(large)
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
        note = (where or st).empty()
        if hint:
            note.caption(hint)
        _wait_showing_progress(job, key, label, where, unit)
        note.empty()
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
                unit: tuple[str, float] | None = None, hint: str | None = None, **kwargs):
    """The stored result of ``fn(*args, **kwargs)``, or compute it now: by itself when
    ``auto`` (unless the person cancelled it), else when the button is pressed. None while it
    waits for the button. name: the button's widget key is run_<name> (default: fn's name);
    large, where, unit, hint: as computed takes them (the hint is shown by the button too)."""
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
        elif hint:
            st.caption(hint)
    if pressed or started or (auto and not was_cancelled):
        return computed(fn, *args, label=label, large=large, where=where, restart=pressed,
                        unit=unit, hint=hint, **kwargs)
    return None
