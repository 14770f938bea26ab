"""A visitor's page run as app.py runs it: kept apart from the one import that the server's
start puts off (mha_viz.server.startup), profiled when asked (MHA_VIZ_PROFILE), and, once it
has drawn its page, told to the warm start, whose longer work waits for a first page."""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Callable, Iterator

from streamlit.runtime.scriptrunner_utils.exceptions import RerunException

from .profiling import profiled_run
from .warm import PAGE_RUNS, page_run_over


@contextmanager
def page_run() -> Iterator[None]:
    """One run of the app's pages (app.py's st.navigation). A run cut short by a rerun drew
    no page, the next one does; one that ended otherwise (st.stop() included) drew it."""
    with PAGE_RUNS.running(), profiled_run():
        try:
            yield
        except RerunException:
            raise
        except BaseException:
            page_run_over()
            raise
        page_run_over()


def as_page_run(fn: Callable) -> Callable:
    """fn run as a page run: for a fragment's reruns, which Streamlit runs without app.py."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with PAGE_RUNS.running():
            return fn(*args, **kwargs)

    return run
