"""What a corpus batch measures of its maps at once (maps.summaries; issue 59 item 2): each
segment's sums of -p ln p, row sums, the mass each key receives and the previous / self / next
diagonals equal the formulas (docs/analyses.md) computed in float64 on transformers' own
attentions of each text run alone; and the accumulators that read a summary give the entropy
of renormalized rows as the formula does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_viz.analysis.entropy import RowEntropy
from mha_viz.maps.streaming import RowBlock
from mha_viz.maps.summaries import (DIAGONALS, ScoreEntropies, batch_summaries,
                                    entropy_sums_from_scores)

TEXTS = [
    "The cat sat on the mat, and the cat slept.",
    "Short one.",
    # over 64 tokens: a causal map's rows are summarized in bands of 64
    "When Mary and John went to the store, John gave a drink to Mary; she thanked him "
    "and they walked home along the river in the evening. " * 3,
]


def plogp(maps: np.ndarray) -> np.ndarray:
    """sum over keys of -p ln p, 0 ln 0 = 0, float64."""
    maps = maps.astype(np.float64)
    logs = np.log(np.where(maps > 0, maps, 1.0))
    return -(maps * logs).sum(-1)


@pytest.fixture(scope="module")
def hf_bert(bert_folder):
    from transformers import BertModel

    return BertModel.from_pretrained(bert_folder, attn_implementation="eager").eval()


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_a_padded_batchs_summaries_equal_the_formulas_on_transformers_maps(
        family, gpt2_model, hf_gpt2, bert_model, hf_bert):
    model, hf = {"gpt2": (gpt2_model, hf_gpt2), "bert": (bert_model, hf_bert)}[family]
    batch = [list(model.encode(text).input_ids) for text in TEXTS]
    lengths = [len(ids) for ids in batch]
    assert len(set(lengths)) == 3 and max(lengths) > 64  # padding; more than one band
    with torch.no_grad():
        alone = [hf(torch.tensor([ids]), output_attentions=True).attentions for ids in batch]
    seen = 0
    for layer, maps in model.attention_by_layer(batch):
        summaries = batch_summaries(maps, lengths, model.info.causal)
        for b, n in enumerate(lengths):
            reference = alone[b][layer][0].double().numpy()  # [H, n, n]
            found = summaries[b]
            np.testing.assert_allclose(found.plogp, plogp(reference), rtol=3e-6, atol=3e-6)
            np.testing.assert_allclose(found.row_sums, reference.sum(-1), atol=1e-6)
            np.testing.assert_allclose(found.received, reference.sum(-2), rtol=3e-6, atol=2e-6)
            for offset in DIAGONALS:
                along = np.diagonal(reference, offset, -2, -1).sum(-1)
                np.testing.assert_allclose(found.diagonals[offset], along, atol=1e-6)
            seen += 1
    assert seen == len(TEXTS) * model.info.n_layer
    # the entropies are not trivial: some rows spread over several keys
    assert plogp(alone[2][0][0].double().numpy()).max() > 0.5


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_entropies_measured_from_the_scores_equal_the_formula_on_transformers_maps(
        family, gpt2_model, hf_gpt2, bert_model, hf_bert):
    """ScoreEntropies, the engine's hooks during a padded batch's forward (what corpus mode
    reads), gives each segment's sum of -p ln p and row sums as the formula does on
    transformers' attentions of each text alone, closer than the logarithms of the maps do;
    a summary built from them carries them."""
    model, hf = {"gpt2": (gpt2_model, hf_gpt2), "bert": (bert_model, hf_bert)}[family]
    batch = [list(model.encode(text).input_ids) for text in TEXTS]
    lengths = [len(ids) for ids in batch]
    with torch.no_grad():
        alone = [hf(torch.tensor([ids]), output_attentions=True).attentions for ids in batch]
    scored = ScoreEntropies(model.info.causal)
    for layer, maps in model.attention_by_layer(batch, hooks=scored):
        sums = scored.sums.pop(layer)
        summaries = batch_summaries(maps, lengths, model.info.causal, from_scores=sums)
        for b, n in enumerate(lengths):
            reference = alone[b][layer][0].double().numpy()
            expected = plogp(reference)
            found = sums[0][b, :, :n].double().numpy()
            np.testing.assert_allclose(found, expected, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(sums[1][b, :, :n].numpy(), reference.sum(-1),
                                       atol=1e-6)
            np.testing.assert_array_equal(summaries[b].plogp, found)
    assert not scored.sums  # each layer's measured once, and let go


@pytest.mark.parametrize("causal", [True, False])
def test_entropies_from_scores_of_rows_with_hidden_keys_and_large_scores(causal):
    """Scores with -inf (a causal mask) and the dtype's lowest (padding) where keys are hidden
    and a sink's large score, rows summing below 1 (a softmax over one more, left-out key):
    the formula's numbers in float64, no NaN."""
    gen = torch.Generator().manual_seed(5)
    heads, n = 3, 150  # three bands of rows
    scores = torch.randn(2, heads, n, n + 1, generator=gen) * 4
    scores[..., 0] += 40.0  # a sink
    scores[..., n] = scores[..., 0] - 1.0  # the left-out key: a quarter of each row
    scores[1, :, :, n - 10:n] = torch.finfo(torch.float32).min  # padded keys
    if causal:
        scores[..., :n].masked_fill_(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    weights = scores.softmax(-1)[..., :n]  # the last key left out: rows sum below 1
    found, sums = entropy_sums_from_scores(scores[..., :n], weights, causal)
    reference = weights.double().numpy()
    assert np.isfinite(found.numpy()).all()
    np.testing.assert_allclose(found.double().numpy(), plogp(reference), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sums.numpy(), reference.sum(-1), atol=1e-6)
    assert reference.sum(-1).max() < 0.8


def test_only_what_is_asked_for_is_measured(gpt2_model):
    batch = [list(gpt2_model.encode(text).input_ids) for text in TEXTS]
    layer, maps = next(iter(gpt2_model.attention_by_layer(batch)))
    only = batch_summaries(maps, [len(ids) for ids in batch], parts=("diagonals",))
    assert all(s.plogp is None and s.row_sums is None and s.received is None for s in only)
    assert all(set(s.diagonals) == set(DIAGONALS) for s in only)


@pytest.mark.parametrize("causal", [True, False])
def test_the_entropy_read_from_a_summary_renormalizes_rows_as_the_formula(causal):
    """Rows whose weights sum below 1 (a model with a learned sink, or rows cut from a longer
    map): a causal map's rows are renormalized over the keys they see before the entropy,
    H(p / s); a bidirectional map's rows are taken as they are. The summary's sums give the
    same numbers as the rows themselves."""
    rng = np.random.default_rng(3)
    n_head, n = 3, 150  # three bands of a causal map's rows
    maps = rng.random((n_head, n, n)) ** 4
    if causal:
        maps = np.tril(maps)
    maps = (0.7 * maps / maps.sum(-1, keepdims=True)).astype(np.float32)  # rows sum to 0.7
    summary = batch_summaries(maps[None], [n], causal)[0]
    from_summary = RowEntropy(1, n_head, n, causal)
    from_summary.update(RowBlock(0, 0, n, maps.copy(), owned=True, summary=summary))
    from_rows = RowEntropy(1, n_head, n, causal)
    from_rows.update(RowBlock(0, 0, n, maps.copy(), owned=True))
    sums = maps.astype(np.float64).sum(-1, keepdims=True)
    expected = plogp(maps / sums) if causal else plogp(maps)
    np.testing.assert_allclose(from_summary.result()[0], expected, atol=2e-6)
    np.testing.assert_allclose(from_rows.result()[0], expected, atol=2e-6)
    assert np.abs(plogp(maps / sums) - plogp(maps)).max() > 0.1  # the renormalization counts
