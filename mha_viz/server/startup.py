"""What a server's start puts off until its first page is drawn (issue 59: the first figure
within 5 s of the start), measured on this 2-core machine with benchmarks/cold_start.py:

- The garbage collector's passes. The start makes ~270k objects that live as long as the
  server (the modules of torch, Streamlit, plotly and ours): the imports alone trigger ~600
  young and four full collections, each full one walking everything made so far (0.1-0.2 s).
  app.py turns the collector off before the library's import; settle_heap() freezes what is
  alive (ui.loading froze the heap at the model's load already, and a collection then found
  a few dozen objects: not worth 0.1 s) and turns it on again.
- Not put off but skipped: Streamlit's scan of installed packages for components
  (skip_installed_components).
- pandas (0.3-0.45 s of import once torch and Streamlit are loaded), which the first figure
  does not need (plotly 7 only reads it when it is imported already). It cannot simply be
  imported whenever: plotly reads ``sys.modules["pandas"]`` without importing it, and a module
  being imported is in sys.modules half built (seen: "partially initialized module 'pandas'
  has no attribute 'Series'"; even an empty figure's template reads it), so it is imported
  by PAGE_RUNS.between_runs, when no script run (the only code that builds figures in a
  server) is in flight.

app.py imports this module by its path, under its own name, before the library (its
package's import would import torch first): every script run, from its first line, holds
PAGE_RUNS, and the library's later import of this module finds the same one. It imports
nothing of the library.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Callable, Iterator


def skip_installed_components() -> None:
    """Streamlit's runtime, when a server makes it, scans the metadata of every installed
    distribution for packaged components (streamlit.components.v2.manifest_scanner: 0.36 s
    of a start on this machine, 139 distributions, before the server answers). mha-viz's
    components are its own, declared in its code (st.components.v2, inline HTML and
    JavaScript); it serves no installed package's, so the server is told there are none."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:  # another Streamlit: its own way
        return
    scan = getattr(manifest_scanner, "scan_component_manifests", None)
    if callable(scan):
        def no_packaged_components(max_workers=None) -> list:
            return []

        no_packaged_components.__wrapped__ = scan  # Streamlit's own, for a test of it
        manifest_scanner.scan_component_manifests = no_packaged_components


def settle_heap() -> None:
    """Freeze what is alive (never walked again by a full collection) and turn the collector
    on: the end of a start that ran with it off (with it on, as in a notebook or a test,
    nothing is done)."""
    if gc.isenabled():
        return
    gc.freeze()
    gc.enable()


class PageRuns:
    """Page runs, any number at once, and work that must not overlap any of them: that work
    waits for a moment when no run is in flight (it never stops a run, nor keeps new ones
    waiting while it waits), and runs that start while it works wait for it."""

    def __init__(self):
        self._changed = threading.Condition()
        self._in_flight = 0
        self._working = False

    @contextmanager
    def running(self) -> Iterator[None]:
        """One page run."""
        with self._changed:
            self._changed.wait_for(lambda: not self._working)
            self._in_flight += 1
        try:
            yield
        finally:
            with self._changed:
                self._in_flight -= 1
                self._changed.notify_all()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def between_runs(self, work: Callable[[], object], patience: float) -> bool:
        """work() once no run is in flight, if that moment comes within patience seconds.
        -> whether it ran (an error in work propagates, the runs released)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._in_flight == 0, timeout=patience):
                return False
            self._working = True
        try:
            work()
        finally:
            with self._changed:
                self._working = False
                self._changed.notify_all()
        return True


# every script run of the app (app.py; a fragment's reruns: ui.as_page_run), and between
# them what the start put off
PAGE_RUNS = PageRuns()
