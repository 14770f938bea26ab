"""Chunked attention and the online softmax (issue 28): a head's real scores and values from
a GPT-2 trace, computed a block of rows or a block of keys at a time, equal torch's own
softmax and product (the independent reference), for every block size including ones that
do not divide the length, with a causal mask's -inf; the memory each way needs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_viz import InputError
from mha_viz.analysis.one_head.blockwise import (attention_memory, online_softmax_attention,
                                                 plain_attention, row_chunked_attention)
from mha_viz.analysis.one_head.steps import inside_one_head


@pytest.fixture(scope="module")
def head(gpt2_model):
    return inside_one_head(gpt2_model, "The cat sat on the mat because it was warm and tired.",
                           1, 2)


def reference(scores, values):
    weights = torch.softmax(torch.as_tensor(scores, dtype=torch.float64), dim=-1)
    return weights.numpy(), (weights @ torch.as_tensor(values, dtype=torch.float64)).numpy()


@pytest.mark.parametrize("block", [1, 3, 4, 7, 100])
def test_blockwise_equals_the_plain_softmax(head, block):
    weights, context = reference(head.masked_scores, head.V)
    np.testing.assert_allclose(weights, head.weights, atol=1e-6)  # the trace's own map
    for found_w, found_c in (plain_attention(head.masked_scores, head.V),
                             row_chunked_attention(head.masked_scores, head.V, block)):
        np.testing.assert_allclose(found_w, weights, atol=1e-12)
        np.testing.assert_allclose(found_c, context, atol=1e-12)
    online = online_softmax_attention(head.masked_scores, head.V, block)
    np.testing.assert_allclose(online.weights, weights, atol=1e-12)
    np.testing.assert_allclose(online.context, context, atol=1e-12)
    n = head.n_tokens
    assert online.n_blocks == -(-n // min(block, n))
    # the running maximum never falls, and its last value is each row's true maximum
    assert (np.diff(online.maxima, axis=0) >= 0).all()
    np.testing.assert_allclose(online.maxima[-1], head.masked_scores.max(axis=1))
    # the last running sum is sum_j exp(s_ij - m_i)
    np.testing.assert_allclose(online.sums[-1], np.exp(
        head.masked_scores - online.maxima[-1][:, None]).sum(axis=1), rtol=1e-12)


def test_memory_and_bad_input(head):
    n, d = head.n_tokens, head.d_k
    memory = attention_memory(n, n, d, rows=4, key_block=4)
    assert memory == {"plain": 4 * n * n, "chunked": 4 * 4 * n, "online": 4 * (16 + 4 * (2 + d))}
    assert attention_memory(8192, 8192, 64, 256, 256)["plain"] == 4 * 8192 ** 2
    with pytest.raises(InputError, match="positive whole number"):
        online_softmax_attention(head.masked_scores, head.V, 0)
    with pytest.raises(InputError, match="sees no key"):
        online_softmax_attention(np.full((2, 3), -np.inf), np.ones((3, 2)), 2)
    with pytest.raises(InputError, match="values must be"):
        row_chunked_attention(head.masked_scores, head.V[:-1], 2)


def test_the_tables_the_page_shows(head):
    from mha_viz.analysis.one_head.blockwise import blockwise_check, memory_table, running_table

    online = online_softmax_attention(head.masked_scores, head.V, 4)
    table = running_table(online, head.n_tokens - 1, head.tokens)
    assert len(table["block"]) == online.n_blocks
    assert table["running max m"][-1] == f"{head.masked_scores[-1].max():.4f}"
    first = running_table(online, 0, head.tokens)  # causal row 0 sees key 0 only
    assert first["running sum l"][-1] == "1.0000"
    checks = blockwise_check(head.masked_scores, head.V, 3)
    assert max(checks.values()) < 1e-12
    memory = memory_table(head.n_tokens, head.n_tokens, head.d_k, 4)
    online_bytes = 4 * (256 * 256 + 256 * (2 + head.d_k))
    assert memory["8,192 tokens (blocks of 256)"] == ["256.0 MiB", "8.0 MiB",
                                                      f"{online_bytes / 1024:.1f} KiB"]
