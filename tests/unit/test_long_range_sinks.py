"""Attention sinks (issue 56, Gu et al. 2025): each head's attention to the first token, the
sink heads over epsilon and their share, the first key's norm and the queries' cosine with
it, on a text and on one token repeated, against formulas written here over transformers'
own eager attentions and rotated queries and keys (a random grouped-query Llama)."""

import numpy as np
import pytest
from tests.support.long_range import kv_of, llama_pair, rotated_queries_keys  # noqa: F401

from mha_viz.analysis import SINK_EPSILON, sink_scores
from mha_viz.core.errors import InputError

TEXT = ("Every morning the baker opened the shop, lit the ovens, and sold warm bread to the "
        "people who came in from the cold street before work.")


def reference_stats(ref, ids, n_kv_head):
    """{name: [L, H]} from the definitions, in float64."""
    attentions, qk, _ = rotated_queries_keys(ref, ids)
    n_layer, n_head = attentions.shape[:2]
    kv = kv_of(n_head, n_kv_head)
    out = {name: np.zeros((n_layer, n_head)) for name in
           ("first_attention", "first_key_norm", "other_key_norm", "first_cosine",
            "other_cosine")}
    out["first_attention"] = attentions[..., 0].mean(-1)  # every row, the first included
    n = len(ids)
    for layer, (q, k) in enumerate(qk):
        for head in range(n_head):
            keys, queries = k[kv[head]], q[head]
            norms = np.linalg.norm(keys, axis=-1)
            out["first_key_norm"][layer, head] = norms[0]
            out["other_key_norm"][layer, head] = norms[1:].mean()
            unit_q = queries / np.linalg.norm(queries, axis=-1, keepdims=True)
            unit_k = keys / norms[:, None]
            cosines = unit_q @ unit_k.T  # [T, T]
            out["first_cosine"][layer, head] = cosines[1:, 0].mean()
            out["other_cosine"][layer, head] = np.mean([cosines[i, 1:i + 1].mean()
                                                        for i in range(1, n)])
    return out


@pytest.fixture(scope="module")
def measured(llama_pair):
    model, _ = llama_pair
    return sink_scores(model, TEXT)


@pytest.mark.parametrize("which", ["natural", "repeated"])
def test_sink_statistics_equal_the_definitions_on_transformers(llama_pair, measured, which):
    model, ref = llama_pair
    ids = model.encode(TEXT).input_ids
    if which == "repeated":  # the text's first token, as many times (no BOS here)
        assert not model.encode(TEXT).special_mask[0]
        ids = [ids[0]] * len(ids)
        assert measured.repeated_token == ids[0]
    got = getattr(measured, which)
    expected = reference_stats(ref, ids, model.info.n_kv_head)
    assert got.n_tokens == len(ids)
    for name, values in expected.items():
        np.testing.assert_allclose(getattr(got, name), values, rtol=1e-5, atol=1e-5,
                                   err_msg=name)
    assert np.array_equal(got.sink_heads, expected["first_attention"] > SINK_EPSILON)
    assert got.share == pytest.approx((expected["first_attention"] > SINK_EPSILON).mean())
    assert got.n_sink_heads == int((expected["first_attention"] > SINK_EPSILON).sum())
    np.testing.assert_allclose(got.key_norm_ratio, expected["first_key_norm"]
                               / expected["other_key_norm"], rtol=1e-5)
    np.testing.assert_allclose(got.cosine_gap, expected["first_cosine"]
                               - expected["other_cosine"], atol=2e-5)
    # the numbers are not trivial: heads differ, and the two inputs differ
    assert np.ptp(got.first_attention) > 0.05 and np.ptp(got.first_cosine) > 0.05


def test_the_repeated_input_differs_from_the_text(measured):
    assert np.abs(measured.natural.first_attention - measured.repeated.first_attention).max() \
        > 0.05


def test_epsilon_and_a_chosen_repeated_token(llama_pair, measured):
    model, _ = llama_pair
    loose = sink_scores(model, TEXT, epsilon=0.05, repeated_token=" the")
    assert loose.repeated_token == model.token_id(" the")
    np.testing.assert_array_equal(loose.natural.first_attention,
                                  measured.natural.first_attention)
    assert loose.natural.share >= measured.natural.share
    assert np.array_equal(loose.natural.sink_heads, measured.natural.first_attention > 0.05)


@pytest.mark.parametrize("kwargs, words", [
    ({"epsilon": 0.0}, "between 0 and 1"),
    ({"epsilon": 1.5}, "between 0 and 1"),
    ({"repeated_token": " the cat"}, "single token"),
])
def test_bad_input_is_refused_in_words(llama_pair, kwargs, words):
    model, _ = llama_pair
    with pytest.raises(InputError, match=words):
        sink_scores(model, TEXT, **kwargs)


def test_a_text_of_one_token_is_refused(llama_pair):
    model, _ = llama_pair
    with pytest.raises(InputError, match="at least two tokens"):
        sink_scores(model, [model.encode(TEXT).input_ids[0]])  # token ids are read too
