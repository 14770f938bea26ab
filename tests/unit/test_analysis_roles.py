"""Head-role scores and token-class mass (mha_viz.analysis.roles / token_classes), on planted
patterns and hand-built traces; induction_scores through a tiny fake model."""

import numpy as np
import pytest
from tests.support.role_maps import (FakeModel, induction_map, make_trace, previous_token_map,
                                     uniform)

from mha_viz.analysis import (TOKEN_CLASSES, duplicate_token_scores, induction_pattern_scores,
                              induction_scores, is_punctuation, next_token_scores,
                              previous_token_scores, token_class_mass)
from mha_viz.core.errors import InputError


# --- previous / next token ---------------------------------------------------------------------

def test_previous_and_next_token_scores():
    n = 10
    nxt = np.zeros((n, n), dtype=np.float32)
    nxt[np.arange(n - 1), np.arange(1, n)] = 1.0
    nxt[n - 1, n - 1] = 1.0
    a = np.stack([np.stack([previous_token_map(n), uniform(n), nxt, uniform(n, causal=True)])])
    prev = previous_token_scores(a)
    assert prev.shape == (1, 4)
    np.testing.assert_allclose(prev[0, :3], [1.0, 1 / n, 0.0], atol=1e-7)
    # uniform causal: row i gives 1 / (i + 1) to i - 1
    assert prev[0, 3] == pytest.approx(np.mean(1 / np.arange(2, n + 1)), rel=1e-6)
    np.testing.assert_allclose(next_token_scores(a)[0], [0.0, 1 / n, 1.0, 0.0], atol=1e-7)
    # several inputs: the mean
    b = np.stack([np.stack([uniform(4), uniform(4), uniform(4), uniform(4)])])
    np.testing.assert_allclose(previous_token_scores([a, b])[0, 0], (1.0 + 0.25) / 2, rtol=1e-6)
    with pytest.raises(InputError):
        previous_token_scores(np.ones((1, 1, 1, 1)))


# --- duplicate token ---------------------------------------------------------------------------

def test_duplicate_token_scores_on_planted_pattern():
    ids = [5, 7, 5, 9, 7, 5]
    n = len(ids)
    dup = np.zeros((n, n), dtype=np.float32)  # looks at the previous copy of its token
    for i, j in [(0, 0), (1, 1), (2, 0), (3, 3), (4, 1), (5, 2)]:
        dup[i, j] = 1.0
    half = uniform(n, causal=True)
    a = np.stack([np.stack([dup, half])])
    scores = duplicate_token_scores(a, ids)
    # queries with an earlier duplicate: 2 (5 @ 0), 4 (7 @ 1), 5 (5 @ 0, 2)
    expected_uniform = np.mean([1 / 3, 1 / 5, 2 / 6])
    np.testing.assert_allclose(scores[0], [1.0, expected_uniform], rtol=1e-6)
    # include_later: every query whose token occurs elsewhere (all but position 3)
    later = duplicate_token_scores(a, ids, include_later=True)
    # dup head: rows 0 and 1 look at themselves (0 on duplicates), rows 2, 4, 5 score 1
    np.testing.assert_allclose(later[0, 0], 3 / 5, rtol=1e-6)
    # a trace supplies its own ids
    trace = make_trace([str(i) for i in ids], a, token_ids=ids, causal=True)
    np.testing.assert_allclose(duplicate_token_scores(trace), scores)
    # no duplicated token at all: 0
    np.testing.assert_array_equal(duplicate_token_scores(a, list(range(n))), 0.0)
    with pytest.raises(InputError):
        duplicate_token_scores(a, ids[:-1])


# --- induction ---------------------------------------------------------------------------------


def test_induction_pattern_scores():
    s, offset = 10, 1
    rng = np.random.default_rng(0)
    r = rng.permutation(100)[:s].tolist()
    ids = [1000] + r + r
    n = len(ids)
    a = np.stack([np.stack([induction_map(ids), uniform(n, causal=True),
                            previous_token_map(n)])])
    scores = induction_pattern_scores(a, seq_len=s, offset=offset)
    expected_uniform = np.mean([1 / (offset + s + k + 1) for k in range(s - 1)])
    np.testing.assert_allclose(scores[0], [1.0, expected_uniform, 0.0], atol=1e-7)
    assert expected_uniform < 0.1
    with pytest.raises(InputError):
        induction_pattern_scores(a, seq_len=s + 1, offset=offset)


@pytest.mark.parametrize("arch", ["gpt2", "bert"])
def test_induction_scores_with_fake_model(arch):
    model = FakeModel(arch)
    scores = induction_scores(model, seq_len=20, n_seqs=3, seed=4)
    assert scores.shape == (2, 3)
    assert scores[1, 2] == pytest.approx(1.0)
    others = np.delete(scores.ravel(), 5)
    assert (others < 0.1).all() and (others > 0).all()
    assert len(model.calls) == 3
    for ids in model.calls:
        if arch == "bert":
            assert ids[0] == 2 and ids[-1] == 3 and len(ids) == 42
            body = ids[1:-1]
        else:
            assert ids[0] == 0 and len(ids) == 41  # falls back to eos as BOS
            body = ids[1:]
        assert body[:20] == body[20:]
        assert len(set(body[:20])) == 20
        assert min(body) >= 4 and max(body) < 500  # no special ids, inside the vocabulary
    assert model.calls[0] != model.calls[1]
    again = FakeModel(arch)
    induction_scores(again, seq_len=20, n_seqs=3, seed=4)
    assert again.calls == model.calls  # seeded


def test_induction_scores_checks_context_and_arguments():
    model = FakeModel("gpt2", max_positions=40)
    with pytest.raises(InputError, match="seq_len <= 19"):
        induction_scores(model, seq_len=20)
    assert induction_scores(model, seq_len=19, n_seqs=1)[1, 2] == pytest.approx(1.0)
    no_prefix = FakeModel("gpt2")
    induction_scores(no_prefix, seq_len=10, n_seqs=1, prepend_bos=False)
    assert len(no_prefix.calls[0]) == 20
    with pytest.raises(InputError):
        induction_scores(FakeModel("gpt2", vocab_size=10), seq_len=8)
    with pytest.raises(InputError):
        induction_scores(model, seq_len=1)


# --- token classes -----------------------------------------------------------------------------

def test_is_punctuation():
    for token in [".", ",", "Ġ.", "␣,", "##.", "...", "—", "’", "\"", "?!", "▁("]:
        assert is_punctuation(token), token
    for token in ["[CLS]", "Ġthe", "$", "+", "␣", "Ġ", "", "a.", "3"]:
        assert not is_punctuation(token), token


def test_token_class_mass_on_bert_trace():
    tokens = ["[CLS]", "the", "cat", ",", "sat", ".", "[SEP]"]
    n = len(tokens)
    on_sep = np.zeros((n, n), dtype=np.float32)
    on_sep[:, 6] = 1.0
    a = np.stack([np.stack([uniform(n), on_sep, np.eye(n, dtype=np.float32)])])
    mass = token_class_mass(make_trace(tokens, a))
    assert set(mass) == set(TOKEN_CLASSES)
    assert all(v.shape == (1, 3) for v in mass.values())
    u = 1 / n
    np.testing.assert_allclose(mass["[CLS]"][0], [u, 0, 1 / n])
    np.testing.assert_allclose(mass["[SEP]"][0], [u, 1, 1 / n])
    np.testing.assert_allclose(mass["punctuation"][0], [2 * u, 0, 2 / n])
    np.testing.assert_allclose(mass["first token"][0], [u, 0, 1 / n])
    np.testing.assert_allclose(mass["self"][0], [u, 1 / n, 1], rtol=1e-6)
    # previous / next: n - 1 rows have such a key, divided by all n rows
    np.testing.assert_allclose(mass["previous"][0], [(n - 1) / n * u, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(mass["next"][0], [(n - 1) / n * u, 1 / n, 0], rtol=1e-6)
    # several traces: the mean
    both = token_class_mass([make_trace(tokens, a), make_trace(tokens, a[:, [1, 1, 1]])])
    np.testing.assert_allclose(both["[SEP]"][0], [(u + 1) / 2, 1, (1 / n + 1) / 2])


def test_the_cls_and_sep_classes_are_the_tokenizers_own_tokens():
    """The [CLS] and [SEP] classes are the positions of the tokens the trace's tokenizer names
    cls and sep (RoBERTa's <s> and </s> here), not tokens spelt "[CLS]"; a tokenizer naming
    neither (GPT-2's) gives them no position."""
    tokens = ["<s>", "a", "[CLS]", "b", "[SEP]", "</s>"]
    n = len(tokens)
    a = np.random.default_rng(1).dirichlet(np.ones(n), size=(1, 2, n)).astype(np.float32)
    roberta = token_class_mass(make_trace(tokens, a, special_tokens={"cls": "<s>", "sep": "</s>"}))
    # a(S) = (1/n) sum_i A_ij over the rows i, for the one key j of each class
    np.testing.assert_allclose(roberta["[CLS]"], a[..., 0].mean(-1), rtol=1e-6)
    np.testing.assert_allclose(roberta["[SEP]"], a[..., 5].mean(-1), rtol=1e-6)
    gpt2 = token_class_mass(make_trace(tokens, a, special_tokens={"eos": "<|endoftext|>"}))
    assert not gpt2["[CLS]"].any() and not gpt2["[SEP]"].any()


def test_token_class_mass_on_gpt2_trace():
    tokens = ["The", "Ġcat", "Ġsat", "Ġ.", "âĢĻ"]
    display = ["The", "␣cat", "␣sat", "␣.", "’"]
    n = len(tokens)
    a = np.stack([np.stack([uniform(n, causal=True), previous_token_map(n)])])
    mass = token_class_mass(make_trace(tokens, a, display=display, causal=True))
    np.testing.assert_array_equal(mass["[CLS]"], 0.0)
    np.testing.assert_array_equal(mass["[SEP]"], 0.0)
    # punctuation keys 3 and 4: uniform causal rows 3, 4 give 1/4 + (1/5 + 1/5)
    np.testing.assert_allclose(mass["punctuation"][0, 0], (1 / 4 + 2 / 5) / n, rtol=1e-6)
    np.testing.assert_allclose(mass["punctuation"][0, 1], 1 / n, rtol=1e-6)  # row 4 -> 3
    first = np.mean([1, 1 / 2, 1 / 3, 1 / 4, 1 / 5])
    np.testing.assert_allclose(mass["first token"][0], [first, 2 / n], rtol=1e-6)
    np.testing.assert_allclose(mass["previous"][0, 1], (n - 1) / n, rtol=1e-6)
    np.testing.assert_allclose(mass["next"], 0.0, atol=0)


def test_token_class_mass_matches_the_definition_on_random_maps():
    tokens = ["[CLS]", "Hello", ",", "world", "##s", "!", "[SEP]", "again", "[SEP]"]
    n = len(tokens)
    rng = np.random.default_rng(0)
    a = rng.dirichlet(np.ones(n), size=(2, 3, n)).astype(np.float32)
    trace = make_trace(tokens, a)
    mass = token_class_mass(trace)
    # a(S) = (1/n) sum_i sum_{j in S(i)} A_ij, written out as loops
    sets = {"[CLS]": lambda i: [0], "[SEP]": lambda i: [6, 8], "punctuation": lambda i: [2, 5],
            "first token": lambda i: [0], "self": lambda i: [i],
            "previous": lambda i: [i - 1] if i > 0 else [],
            "next": lambda i: [i + 1] if i < n - 1 else []}
    for name, keys in sets.items():
        expected = np.zeros((2, 3))
        for layer in range(2):
            for head in range(3):
                expected[layer, head] = sum(a[layer, head, i, j] for i in range(n)
                                            for j in keys(i)) / n
        np.testing.assert_allclose(mass[name], expected, rtol=1e-5, err_msg=name)
