"""A visitor's page run as app.py runs it: profiled when asked (MHA_VIZ_PROFILE) and, once it
has drawn its page, told to the warm start, whose longer work waits for a first page. app.py
holds server.startup.PAGE_RUNS around the whole script run; a fragment's reruns, which
Streamlit runs without app.py, hold it through as_page_run."""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Callable, Iterator

from streamlit.runtime.scriptrunner_utils.exceptions import RerunException

from ..server.startup import PAGE_RUNS
from .profiling import profiled_run
from .warm import page_run_over


@contextmanager
def page_run() -> Iterator[None]:
    """One run of the app's pages (app.py's st.navigation). A run cut short by a rerun drew
    no page, the next one does; one that ended otherwise (st.stop() included) drew it."""
    with profiled_run():
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
