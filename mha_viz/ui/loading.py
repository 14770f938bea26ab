"""Loading a model for the pages: at most three held at once, shared by every session, the
heap frozen after each load, and a hub that cannot be reached not asked again for a while.

Cached objects are shared between sessions: never mutate them."""

from __future__ import annotations

import gc
import threading
import time
from contextlib import contextmanager
from typing import Callable

import plotly.graph_objects as go
import streamlit as st

from .. import checkpoints
from ..core.errors import OfflineError
from ..engine.placement import placement_from_environment
from ..models.model import Model, load_model
from .settings import APP_DIR


@st.cache_resource(max_entries=3, show_spinner="Loading the model…")
def _load_model_cached(name: str) -> Model:
    where = placement_from_environment()  # MHA_VIZ_DTYPE, MHA_VIZ_DEVICE: the operator's
    model = _freezing_the_heap(
        lambda: load_model(name, local_dirs=checkpoints.allowed_dirs(APP_DIR / "models"),
                           dtype=where.dtype, device=where.device))
    _loaded.add(name)
    return model


_loaded: set[str] = set()  # names loaded once (the cache may have let one go since)


@contextmanager
def charts_code_meanwhile(name: str):
    """While the model `name` loads (seconds, the first time), the visitor's browser fetches
    and compiles the charts' code: plotly.js, ~4 MB, which a tab fetches only when its first
    chart arrives, and then compiles for a second or more before drawing it. An empty chart,
    a few pixels high, stands on the page meanwhile and is removed when the model is there."""
    if str(name).strip() in _loaded:
        yield
        return
    holder = st.empty()
    holder.plotly_chart(go.Figure(layout=dict(height=10, margin=dict(l=0, r=0, t=0, b=0),
                                              xaxis_visible=False, yaxis_visible=False)),
                        theme=None, config={"staticPlot": True, "displayModeBar": False},
                        key="_mv_charts_code")
    try:
        yield
    finally:
        holder.empty()


_heap_lock = threading.Lock()


def _freezing_the_heap(load: Callable[[], Model]) -> Model:
    """load(), then the whole live heap moved out of the garbage collector's sight.

    A full collection holds the GIL, so the server sends nothing meanwhile. With the libraries
    and a model loaded that heap is ~400k objects, and the collection Streamlit ran after every
    script run (runner.postScriptGC, now off in .streamlit/config.toml) took 0.2-0.5 s of
    every page's open; Python's own full collections would walk them too. Frozen
    objects are still freed by reference counting; only cycles among them wait: the next load
    unfreezes, collects (a model the cache let go of goes then) and freezes again. With
    nothing frozen yet (the server's first load) it freezes without collecting: nothing frozen
    can hold a model let go of, and that collection (0.14 s, finding a few dozen objects) sat
    on the way to a server's first figure."""
    model = load()
    with _heap_lock:
        if gc.get_freeze_count():
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
