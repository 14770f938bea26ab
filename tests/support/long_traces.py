"""A text long enough for three blocks of query rows, and the pairs fixture (a module
imports it to use it): its full and on-demand traces per family, of the root conftest's
long_models."""

import pytest


# Long enough for three blocks of query rows (QUERY_CHUNK = 256) with a ragged last one.
LONG_TEXT = ("The committee met on Tuesday; it voted 7-2 to approve the budget, and the mayor "
             "thanked everyone. ") * 32


@pytest.fixture(scope="module")
def pairs(long_models):
    """(full trace, on-demand trace) of the long text per family."""
    found = {}
    for family, model in long_models.items():
        full = model.trace(LONG_TEXT, maps="full")
        lazy = model.trace(LONG_TEXT, maps="on_demand")
        assert not full.on_demand and lazy.on_demand
        assert full.n_tokens > 600
        found[family] = (full, lazy)
    return found
