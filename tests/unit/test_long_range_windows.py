"""What a sink + window costs (issue 56): StreamingLLM's table (full, sink + window, window
only) and every head's cost restricted alone, against transformers' own Llama handed the
same 4-D masks (1e-4), on a long text (the blockwise path) of a random grouped-query Llama;
the key/value cache a restriction saves, against the arithmetic written here."""

import numpy as np
import pytest
from tests.support.long_range import llama_pair  # noqa: F401
from tests.support.long_traces import LONG_TEXT
from tests.support.window_reference import restricted_loss

from mha_viz.analysis import kv_cache_saved, streaming_heads, window_costs, window_losses
from mha_viz.core.errors import InputError

LOSS_TOL = 1e-4
SINK, WINDOW = 4, 64


def no_heads(model) -> np.ndarray:
    return np.zeros((model.info.n_layer, model.info.n_head), dtype=bool)


def test_the_streaming_table_against_transformers(llama_pair):
    model, ref = llama_pair
    ids = model.encode(LONG_TEXT).input_ids
    assert len(ids) > 600
    every = ~no_heads(model)
    got = window_losses(model, LONG_TEXT, SINK, WINDOW)
    assert got.n_tokens == len(ids) and got.n_restricted == every.size
    assert got.full == pytest.approx(restricted_loss(ref, ids, 0, WINDOW, no_heads(model)),
                                     abs=LOSS_TOL)
    assert got.sink_window == pytest.approx(restricted_loss(ref, ids, SINK, WINDOW, every),
                                            abs=LOSS_TOL)
    assert got.window_only == pytest.approx(restricted_loss(ref, ids, 0, WINDOW, every),
                                            abs=LOSS_TOL)
    assert abs(got.window_only - got.sink_window) > 10 * LOSS_TOL


def test_a_chosen_set_of_heads(llama_pair):
    model, ref = llama_pair
    ids = model.encode(LONG_TEXT).input_ids
    chosen = [(0, 1), (2, 3), (2, 4)]
    heads = no_heads(model)
    for layer, head in chosen:
        heads[layer, head] = True
    got = window_losses(model, LONG_TEXT, SINK, WINDOW, heads=chosen)
    assert got.n_restricted == 3
    assert got.sink_window == pytest.approx(restricted_loss(ref, ids, SINK, WINDOW, heads),
                                            abs=LOSS_TOL)
    assert got.window_only == pytest.approx(restricted_loss(ref, ids, 0, WINDOW, heads),
                                            abs=LOSS_TOL)


@pytest.mark.parametrize("length, window", [(500, 24), (None, WINDOW)],
                         ids=["rows-at-once", "blockwise"])
def test_every_head_alone_against_transformers(llama_pair, length, window):
    """Each head restricted alone: the sweep reuses the stream below each layer, runs only
    the positions from sink + window on (reading the earlier ones' keys and values) and a
    layer's heads in batches (4, then the last 2 here); past 512 tokens a block of query
    rows at a time after that past."""
    model, ref = llama_pair
    text = LONG_TEXT[:length]
    ids = model.encode(text).input_ids
    assert (len(ids) - SINK - window > 512) == (length is None)
    got = window_costs(model, text, SINK, window, batch_size=4)
    full = restricted_loss(ref, ids, SINK, window, no_heads(model))
    assert got.full == pytest.approx(full, abs=LOSS_TOL)
    expected = np.zeros_like(got.costs)
    for layer, head in np.ndindex(*expected.shape):
        alone = no_heads(model)
        alone[layer, head] = True
        expected[layer, head] = restricted_loss(ref, ids, SINK, window, alone) - full
    np.testing.assert_allclose(got.costs, expected, atol=LOSS_TOL)
    assert np.ptp(expected) > 10 * LOSS_TOL  # heads differ
    progress = []
    window_costs(model, text, SINK, window, batch_size=4,
                 progress=lambda done, total: progress.append((done, total)))
    assert progress[-1] == (6, 6)  # 3 layers x 2 batches


def test_the_cache_a_restriction_saves(llama_pair):
    """6 query heads on 2 key/value heads (3 each): a key/value head keeps sink + window
    positions only when its three query heads are all restricted."""
    model, _ = llama_pair
    d_head, n = model.info.d_head, 1000
    heads = no_heads(model)
    heads[0, [0, 1, 2, 3]] = True  # group 0 whole, group 1 in part
    heads[2] = True  # both groups
    got = kv_cache_saved(model, n, SINK, WINDOW, heads)
    per_position = 2 * d_head * 2  # K and V, 16-bit
    assert got.kv_heads == 6 and got.streaming_kv_heads == 3
    assert got.full_bytes == 6 * n * per_position
    assert got.restricted_bytes == (3 * n + 3 * (SINK + WINDOW)) * per_position
    assert got.saved_bytes == 3 * (n - SINK - WINDOW) * per_position
    assert got.saved_share == pytest.approx(3 * (n - 68) / (6 * n))
    short = kv_cache_saved(model, 50, SINK, WINDOW, heads, bytes_per_value=4)
    assert short.saved_bytes == 0  # 50 tokens fit the sink and the window
    assert kv_cache_saved(model, n, SINK, WINDOW).streaming_kv_heads == 6


def test_streaming_heads_keep_the_costliest_whole():
    costs = np.array([[0.5, -0.1, 2.0], [0.0, 1.5, 0.3]])
    np.testing.assert_array_equal(streaming_heads(costs, 2),
                                  [[True, True, False], [True, False, True]])
    assert streaming_heads(costs, 0).all() and not streaming_heads(costs, 6).any()
    with pytest.raises(InputError, match="from 0 to 6"):
        streaming_heads(costs, 7)


@pytest.mark.parametrize("call, words", [
    (lambda m: window_losses(m, LONG_TEXT, 4, 0), "at least 1 token"),
    (lambda m: window_costs(m, LONG_TEXT, -2, 64), "0 or more"),
    (lambda m: window_costs(m, "a short text of a few tokens", 4, 64), "cover all"),
    (lambda m: window_losses(m, LONG_TEXT, 4, 64, heads=[(5, 0)]), "out of range"),
    (lambda m: kv_cache_saved(m, 0, 4, 64), "at least 1"),
])
def test_bad_input_is_refused_in_words(llama_pair, call, words):
    model, _ = llama_pair
    with pytest.raises(InputError, match=words):
        call(model)


def test_a_bidirectional_model_is_refused(bert_model):
    with pytest.raises(InputError, match="causal language model"):
        window_costs(bert_model, "the cat sat on the mat " * 20, 1, 4)
