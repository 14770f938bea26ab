"""The stores every result is kept in, shared by every session: the traces, runs and results
the size of a trace in one store bounded by bytes (core.budget), smaller results in one
bounded by count; ``memo`` computes a call once and keeps it under the key of that call.

A result is stored under its function's qualified name and one digest of its arguments
(core.digest.call_key): every store here, the jobs, the warm start and the pages derive it
alike. Cached objects are shared between sessions: never mutate them."""

from __future__ import annotations

from typing import Callable

import streamlit as st

from ..core import budget
from ..core.digest import call_key

result_key = call_key


def _one(value) -> int:
    return 1


@st.cache_resource(show_spinner=False)
def _small_store() -> budget.ByteLRU:
    """Results smaller than a trace: the 64 used last (a store bounded by count)."""
    return budget.ByteLRU(64, size=_one)


@st.cache_resource(show_spinner=False)
def figure_store() -> budget.ByteLRU:
    """Figures built and laid out for a screen (ui.show_built): the 48 used last (thirty
    visitors' maps), apart from the results so that they do not push those out."""
    return budget.ByteLRU(48, size=_one)


@st.cache_resource(show_spinner=False)
def results_store() -> budget.ByteLRU:
    """Traces, runs and results the size of a trace, in one store bounded by bytes (half the
    memory budget; the rest is for the forward passes running)."""
    return budget.ByteLRU(int(budget.RESULTS_SHARE * budget.budget_bytes()))


def store_for(large: bool) -> budget.ByteLRU:
    """The store a result goes to: the byte-bounded one when it is the size of a trace."""
    return results_store() if large else _small_store()


def memo(fn: Callable, *args, large: bool = False, **kwargs):
    """``fn(*args, **kwargs)``, computed once and shared by every session, stored under
    result_key: the function's qualified name and one digest of its arguments (a model, a
    trace and a run name themselves by their input; numbers, strings and arrays by value), so
    any page asking the same call gets the same result. fn must be named at module level.
    large=True for results the size of a trace (kept in the server's byte-bounded store, see
    mha_viz.core.budget), else 64 are kept. Treat the result as read-only."""
    key = result_key(fn, *args, **kwargs)
    return store_for(large).get_or_compute(key, lambda: fn(*args, **kwargs))


def peek(key: str, large: bool = False):
    """The result stored under key (result_key of its call), or None."""
    return store_for(large).get(key)[1]
