"""The why panel's arithmetic (issue 57 items 8, 10, 11, 14): ScoreAttribution.parts states a
score (or its contrast with another key) as named parts, "others" and T5's position bias, with
the totals of every row and column, and each sum equals the score transformers' own softmax
reads (GPT-2, Llama, T5's encoder: random checkpoints from their config classes, eager
attention, the softmax's input read by wrapping it here), 1e-6 between the sums themselves.
For RoPE, unrotated_scores is the score of transformers' own q_proj and k_proj outputs (read
with forward hooks, before its rotation), written here as q . k / sqrt(d_k)."""

import numpy as np
import pytest
import torch
from tests.support.hf_reference import capture_output, hooked

from mha_viz import load_model
from mha_viz.analysis import score_attribution
from mha_viz.analysis.why.scores import OTHER, POSITION_BIAS
from mha_viz.testing import make_seq2seq_checkpoint

TEXT = "the cat sat on the mat and the dog ran to the tree"
EXACT = 1e-6  # between the parts' sums: they are the same float64 numbers added up


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    from transformers import T5ForConditionalGeneration

    folder = make_seq2seq_checkpoint(tmp_path_factory.mktemp("parts_t5"), "t5", n_layer=2)
    return load_model(folder), T5ForConditionalGeneration.from_pretrained(
        folder, attn_implementation="eager").eval()


def softmax_inputs(run) -> list[np.ndarray]:
    """Every 4-D input of transformers' softmax while run() runs: each layer's scores (+
    the mask), in order."""
    softmax, store = torch.nn.functional.softmax, []

    def read(x, *args, **kwargs):
        if x.dim() == 4:
            store.append(x.detach().double()[0].numpy())
        return softmax(x, *args, **kwargs)

    torch.nn.functional.softmax = read
    try:
        with torch.no_grad():
            run()
    finally:
        torch.nn.functional.softmax = softmax
    return store


def check_sums(parts, score: float) -> None:
    """Every sum the panel states, against the score and against each other."""
    assert abs(parts.total - score) <= 1e-4 * max(1.0, abs(score)), (parts.total, score)
    for value in (parts.cells.sum(), parts.row_totals.sum(), parts.col_totals.sum(),
                  parts.named + parts.others + parts.position_bias,
                  parts.query_named + parts.query_others + parts.position_bias,
                  parts.key_named + parts.key_others + parts.position_bias):
        assert abs(value - parts.total) <= EXACT, (value, parts.total)
    np.testing.assert_allclose(parts.row_totals, parts.cells.sum(1), atol=EXACT)
    np.testing.assert_allclose(parts.col_totals, parts.cells.sum(0), atol=EXACT)
    named_rows = [i for i, name in enumerate(parts.rows) if name not in (OTHER, POSITION_BIAS)]
    assert abs(parts.row_totals[named_rows].sum() - parts.query_named) <= EXACT


@pytest.mark.parametrize("case", ["gpt2", "llama"])
def test_the_parts_add_up_to_transformers_score(patch_models, case):
    model, hf, _ = patch_models[case]
    ids = model.encode(TEXT).input_ids
    scores = softmax_inputs(lambda: hf(torch.tensor([ids])))
    layer, head, query, key = 1, 1, len(ids) - 1, 3
    found = score_attribution(model, ids, layer, head, query, contrast=5)
    for k in (2, 6, 100):  # some sources left over, and none
        parts = found.parts(key, k)
        check_sums(parts, scores[layer][head, query, key])
        assert (OTHER in parts.rows) == (k < len(found.query_sources))
        assert parts.position_bias == 0.0 and POSITION_BIAS not in parts.rows
        gap = found.parts(key, k, contrasted=True)
        check_sums(gap, scores[layer][head, query, key] - scores[layer][head, query, 5])
    # the named query sources are the strongest by |share|, strongest first
    shares = found.terms[:, :, key].sum(1)
    named = found.parts(key, 3).rows[:3]
    expected = [found.query_sources[i] for i in np.argsort(-np.abs(shares))[:3]]
    assert named == expected


def test_t5s_position_bias_is_a_part_of_its_own_on_neither_side(t5):
    model, hf = t5
    ids = model.encode_source(TEXT)[0]
    scores = softmax_inputs(lambda: hf.encoder(input_ids=torch.tensor([ids])))
    with torch.no_grad():
        bias = hf.encoder.block[0].layer[0].SelfAttention.compute_bias(len(ids), len(ids))
    layer, head, query, key = 0, 1, 4, 2
    parts = score_attribution(model, ids, layer, head, query).parts(key, 3)
    check_sums(parts, scores[layer][head, query, key])
    assert parts.rows[-1] == parts.cols[-1] == POSITION_BIAS
    np.testing.assert_allclose(parts.position_bias, float(bias[0, head, query, key]),
                               rtol=1e-5)
    # its row and its column hold it alone: the named and "others" sums leave it out
    assert np.count_nonzero(parts.cells[-1]) == np.count_nonzero(parts.cells[:, -1]) == 1
    assert POSITION_BIAS not in parts.rows[:-1] and POSITION_BIAS not in parts.cols[:-1]


def test_unrotated_scores_are_transformers_queries_and_keys_before_rope(patch_models):
    model, hf, where = patch_models["llama"]
    ids = model.encode(TEXT).input_ids
    layer, head, query = 2, 4, len(ids) - 1
    seen = {}
    attn = hf.model.layers[layer].self_attn
    with torch.no_grad(), hooked([capture_output(attn.q_proj, seen, "q"),
                                  capture_output(attn.k_proj, seen, "k")]):
        hf(torch.tensor([ids]))
    d_k = hf.config.head_dim
    kv = head // (hf.config.num_attention_heads // hf.config.num_key_value_heads)
    q = seen["q"][0, query, head * d_k:(head + 1) * d_k].double().numpy()
    k = seen["k"][0, :, kv * d_k:(kv + 1) * d_k].double().numpy()
    found = score_attribution(model, ids, layer, head, query)
    np.testing.assert_allclose(found.unrotated_scores, k @ q / np.sqrt(d_k), rtol=1e-4,
                               atol=1e-5)
    assert not np.allclose(found.unrotated_scores, found.scores, atol=1e-3)  # RoPE turned them
    gpt2, _, _ = patch_models["gpt2"]
    assert score_attribution(gpt2, TEXT, 1, 0, 4).unrotated_scores is None  # no RoPE
