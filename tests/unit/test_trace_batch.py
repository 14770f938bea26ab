"""Several texts traced in one padded forward (mha_viz.models.batched): every text's maps equal
transformers' own attentions for that text alone (eager attention, random checkpoints from the
config classes: grouped-query heads, rotary positions, Gemma 2's soft-caps and windows), and
BERT's sentence pairs and value-weighted maps equal the text's own trace."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_viz.models.batched import BATCH_MAX_TOKENS, batchable

pytestmark = pytest.mark.unit

TEXTS = ["The cat sat on the mat.",
         "When Mary and John went to the store, John gave a drink to Mary because she asked.",
         "Hi",
         "Déjà vu: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and emoji 🙂 in one line, with a tab\there."]


@pytest.mark.parametrize("family", ["gpt2", "llama", "gemma2", "neox"])
def test_each_text_of_a_batch_has_the_maps_transformers_gives_it_alone(patch_models, family):
    model, reference, _ = patch_models[family]
    traces = model.trace_batch([(text, None, None) for text in TEXTS])
    lengths = [t.n_tokens for t in traces]
    assert len(set(lengths)) == len(TEXTS)  # every text padded to the longest but one
    for text, trace in zip(TEXTS, traces):
        ids = model.encode(text).input_ids
        assert list(trace.token_ids) == list(ids) and trace.text == text
        with torch.no_grad():
            out = reference(torch.tensor([ids]), output_attentions=True)
        expected = torch.stack([a[0] for a in out.attentions]).numpy()
        np.testing.assert_allclose(trace.attentions, expected, atol=2e-5, err_msg=text)


def test_sentence_pairs_and_value_weighted_maps_equal_each_texts_own_trace(bert_model):
    requests = [("The cat sat on the mat.", "It was warm.", None),
                ("A much longer first sentence about the weather today.", None, None),
                ("Cut short by max_tokens, this text loses its end.", None, 8)]
    for weights in ("attention", "value"):
        batch = bert_model.trace_batch(requests, weights=weights)
        for (text, pair, max_tokens), got in zip(requests, batch):
            alone = bert_model.trace(text, text_pair=pair, max_tokens=max_tokens, maps="full",
                                     weights=weights)
            assert got.tokens == alone.tokens and got.truncated == alone.truncated
            assert list(got.segment_ids) == list(alone.segment_ids)
            assert (got.weights, got.text, got.text_pair, got.origin) == (
                alone.weights, alone.text, alone.text_pair, alone.origin)
            np.testing.assert_allclose(got.attentions, alone.attentions, atol=2e-6)


def test_only_short_texts_with_maps_held_whole_share_a_batch(gpt2_model, monkeypatch):
    assert batchable(gpt2_model, 20) and not batchable(gpt2_model, BATCH_MAX_TOKENS + 1)
    monkeypatch.setattr(gpt2_model, "maps_kind", lambda n, maps="auto": "on_demand")
    assert not batchable(gpt2_model, 20)
