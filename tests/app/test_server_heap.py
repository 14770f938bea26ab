"""The server's heap: a loaded model is kept out of the full garbage collection Streamlit runs
after every script run (it held the GIL for 0.2-0.5 s of every page's open), without keeping
garbage alive past the next load."""

import gc
import weakref

import pytest

pytest.importorskip("streamlit")

from mha_viz.ui import loading  # noqa: E402


class _Node:
    pass


def test_a_load_freezes_the_live_heap_and_the_next_load_frees_cycles_let_go_of():
    cycle = _Node()
    cycle.me = cycle  # only a collection frees a cycle; reference counts never reach 0
    gone = weakref.ref(cycle)
    try:
        assert loading._freezing_the_heap([cycle].pop) is cycle
        assert gc.get_freeze_count() > 1000  # the libraries, the test session, the cycle
        del cycle
        gc.collect()  # what Streamlit runs after a script: it no longer looks at frozen objects
        assert gone() is not None
        loading._freezing_the_heap(lambda: None)  # the next model load
        assert gone() is None
    finally:
        gc.unfreeze()
