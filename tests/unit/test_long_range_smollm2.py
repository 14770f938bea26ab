"""Heads at long range on the real SmolLM2 (issue 56's measured claims, slow): a minority of
heads are retrieval heads; switching the top retrieval heads off loses the needle far more
than switching off as many random heads; window-only attention is far worse than a sink and
a window, which is close to full attention. benchmarks/long_range.py prints the figures on
more needles."""

import numpy as np
import pytest
from tests.support.smollm2 import smollm2  # noqa: F401

from mha_viz.analysis import (haystack_ids, needle_cases, needle_study, retrieval_masking,
                              window_losses)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def needles(smollm2):
    cases = needle_cases(smollm2, lengths=[512, 1024], depths=[0.0, 0.5, 1.0], seed=0)
    return cases, needle_study(smollm2, cases)


def test_a_minority_of_heads_are_retrieval_heads(needles):
    _, study = needles
    counts = study.retrieval
    assert counts.counted >= 6  # the model copies some of the needles' tokens
    share = counts.retrieval_heads().mean()
    assert 0 < share < 0.15, share  # Wu et al.: 3-6%; SmolLM2 on 20 needles: 7.4%
    assert counts.scores.max() > 0.7  # and those few heads copy most of the time


def test_masking_the_top_retrieval_heads_loses_the_needle(smollm2, needles):
    cases, study = needles
    result = retrieval_masking(smollm2, cases, study.retrieval.scores, draws=3, seed=0,
                               full=study.grid.mean)
    lost_top = result.full - result.top
    lost_random = result.full - result.random_mean
    assert lost_top > 0.2, result
    assert lost_top > 2 * max(lost_random, 0.05), result
    assert result.top < result.random.min(), result


def test_a_sink_and_a_window_are_close_to_full_attention(smollm2):
    """2,048 tokens of the documentation, a window of 256 (at 1,024 and 128 the sink and
    window cost 0.26 nats, the window alone 0.81: docs/analyses.md)."""
    ids = haystack_ids(smollm2, 2048)
    table = window_losses(smollm2, ids, sink=4, window=256)
    assert table.window_only - table.full > 0.3, table  # window only falls apart
    assert table.sink_window - table.full < 0.25 * (table.window_only - table.full), table
    assert np.isfinite([table.full, table.sink_window, table.window_only]).all()
