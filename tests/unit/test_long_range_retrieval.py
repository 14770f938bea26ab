"""Retrieval heads, needles and masking at long range (issue 56): every head's retrieval
counts against a reference written here from transformers' own eager attentions and logits
on the same prompts (exact counts), on a random grouped-query Llama; needle cases as the
papers build them; the copy accuracy with heads switched off against transformers with
those heads' outputs zeroed before o_proj; bad input in words."""

import numpy as np
import pytest
import torch
from tests.support.long_range import llama_pair, rotated_queries_keys  # noqa: F401

from mha_viz.analysis import (NeedleCase, copy_accuracy, haystack_ids, needle_cases,
                              needle_depths, needle_grid, needle_length_options, needle_lengths,
                              needle_study, retrieval_counts, retrieval_masking,
                              retrieval_scores, shortest_prompt, text_lengths)
from mha_viz.analysis.long_range.needles import QUESTION
from mha_viz.core.errors import InputError

HAYSTACK = " ".join(f"Sentence {i} counts {i * 7 % 100} and {i * 13 % 100}." for i in range(400))


def reference_counts(ref, pairs, correct_only=True):
    """(hits [L, H], counted, right share per prompt) from the definition over transformers'
    attentions and logits: for each answer token found once in its prompt (and predicted
    right), a hit where the head's largest weight from the query before it is on it."""
    hits, counted, shares = None, 0, []
    for prompt, answer in pairs:
        tokens = list(prompt) + list(answer)
        attentions, _, logits = rotated_queries_keys(ref, tokens)
        hits = np.zeros(attentions.shape[:2], dtype=np.int64) if hits is None else hits
        right = [int(logits[len(prompt) - 1 + t].argmax()) == token
                 for t, token in enumerate(answer)]
        shares.append(np.mean(right))
        for t, token in enumerate(answer):
            where = [i for i, p in enumerate(prompt) if p == token]
            if len(where) != 1 or (correct_only and not right[t]):
                continue
            counted += 1
            hits += attentions[:, :, len(prompt) - 1 + t].argmax(-1) == where[0]
    return hits, counted, shares


def random_prompt(model, rng, n=60):
    return [int(i) for i in rng.choice(np.arange(1, model.info.vocab_size), n, replace=False)]


@pytest.fixture(scope="module")
def copied(llama_pair):
    """Prompts of distinct random tokens whose answers copy four of them."""
    model, _ = llama_pair
    rng = np.random.default_rng(0)
    prompts = [random_prompt(model, rng) for _ in range(3)]
    return [(p, p[10 + 7 * i:14 + 7 * i]) for i, p in enumerate(prompts)]


@pytest.fixture(scope="module")
def predicted_right(llama_pair):
    """Prompts whose answers transformers' model predicts from the prompt (its greedy next
    tokens while each is found once in the prompt): answers that count when correct_only."""
    model, ref = llama_pair
    rng, found = np.random.default_rng(1), []
    while len(found) < 3:
        prompt, answer = random_prompt(model, rng), []
        while len(answer) < 3:
            with torch.no_grad():
                logits = ref(torch.tensor([prompt + answer])).logits[0, -1]
            token = int(logits.argmax())
            if prompt.count(token) != 1:
                break
            answer.append(token)
        if answer:
            found.append((prompt, answer))
    return found


def test_every_answer_token_found_once_against_transformers(llama_pair, copied):
    model, ref = llama_pair
    got = retrieval_counts(model, [p for p, _ in copied], [a for _, a in copied],
                           correct_only=False)
    hits, counted, _ = reference_counts(ref, copied, correct_only=False)
    assert got.counted == counted == 12 and got.tokens == 12
    np.testing.assert_array_equal(got.hits, hits)
    assert hits.max() > hits.min()  # heads differ
    np.testing.assert_allclose(got.scores, hits / counted)


def test_answers_predicted_right_against_transformers(llama_pair, predicted_right):
    model, ref = llama_pair
    prompts, answers = [p for p, _ in predicted_right], [a for _, a in predicted_right]
    got = retrieval_counts(model, prompts, answers)
    hits, counted, shares = reference_counts(ref, predicted_right)
    assert got.counted == counted == sum(len(a) for a in answers) == got.right
    np.testing.assert_array_equal(got.hits, hits)
    np.testing.assert_allclose(retrieval_scores(model, prompts, answers), hits / counted)
    assert np.allclose(shares, 1.0)


def test_texts_are_tokenized_as_the_model_reads_them(llama_pair):
    """A prompt given as text is read with its special tokens, the answer after it without."""
    model, ref = llama_pair
    prompt = "The harbour master wrote down the code word quokka before the storm."
    answer = " quokka"
    got = retrieval_counts(model, [prompt], [answer], correct_only=False)
    ids = model.tokenizer(prompt)["input_ids"]
    answer_ids = model.tokenizer(answer, add_special_tokens=False)["input_ids"]
    hits, counted, _ = reference_counts(ref, [(ids, answer_ids)], correct_only=False)
    assert got.counted == counted > 0
    np.testing.assert_array_equal(got.hits, hits)


@pytest.fixture(scope="module")
def cases(llama_pair):
    model, _ = llama_pair
    return needle_cases(model, lengths=[160, 240], depths=[0.0, 0.5, 1.0], per_cell=2, seed=3,
                        haystack=HAYSTACK)


def test_needle_cases_are_built_as_the_papers_build_them(llama_pair, cases):
    model, _ = llama_pair
    assert len(cases) == 12 and [c.length for c in cases[:6]] == [160] * 6
    for case in cases:
        assert len(case.prompt_ids) == case.length
        needle = model.tokenizer(" " + case.needle, add_special_tokens=False)["input_ids"]
        start = case.needle_start
        assert list(case.prompt_ids[start:start + len(needle)]) == needle
        assert case.answer.strip() in case.needle and QUESTION in case.question
        assert any(case.prompt_ids.count(t) == 1 for t in case.answer_ids)
    first = [c.needle_start for c in cases if c.depth == 0.0]
    assert first == [0] * len(first)  # no BOS: the needle opens the prompt
    last = [c for c in cases if c.depth == 1.0][0]
    question = model.tokenizer("\n\nQuestion: " + QUESTION + "\nAnswer:",
                               add_special_tokens=False)["input_ids"]
    assert last.needle_start + len(model.tokenizer(" " + last.needle)["input_ids"]) \
        == last.length - len(question)
    for case in (c for c in cases if c.depth == 0.5):  # the sentence end nearest half way
        needle = model.tokenizer(" " + case.needle)["input_ids"]
        haystack = case.length - len(question) - len(needle)
        assert abs(case.needle_start - haystack / 2) <= 12  # half a sentence here
        assert model.tokenizer.decode(case.prompt_ids[case.needle_start - 1]) == "."
    again = needle_cases(model, lengths=[160, 240], depths=[0.0, 0.5, 1.0], per_cell=2, seed=3,
                         haystack=HAYSTACK)
    assert again == cases  # seeded
    assert len({c.answer for c in cases}) > 6  # drawn per case


def test_the_needle_study_is_one_pass_of_both(llama_pair, cases):
    model, ref = llama_pair
    study = needle_study(model, cases)
    pairs = [(c.prompt_ids, c.answer_ids) for c in cases]
    hits, counted, shares = reference_counts(ref, pairs)
    assert study.retrieval.counted == counted
    np.testing.assert_array_equal(study.retrieval.hits, hits)
    grid = needle_grid(model, cases)
    np.testing.assert_allclose(study.grid.accuracy, grid.accuracy)
    np.testing.assert_allclose(grid.per_case, shares)
    np.testing.assert_allclose(grid.accuracy[1, 2], np.mean(shares[10:12]))
    assert grid.lengths == (160, 240) and grid.depths == (0.0, 0.5, 1.0)


def zeroed_reference_accuracy(ref, cases, heads) -> float:
    """The mean share of answer tokens transformers' model predicts right with the outputs
    of heads ((layer, head) pairs) zeroed before each layer's o_proj."""
    handles = []
    for layer, block in enumerate(ref.model.layers):
        off = [h for l, h in heads if l == layer]
        if not off:
            continue
        width = block.self_attn.head_dim

        def zero(module, args, off=off, width=width):
            x = args[0].clone()
            for head in off:
                x[..., head * width:(head + 1) * width] = 0
            return (x,)
        handles.append(block.self_attn.o_proj.register_forward_pre_hook(zero))
    try:
        shares = []
        for case in cases:
            tokens = list(case.prompt_ids) + list(case.answer_ids)
            with torch.no_grad():
                logits = ref(torch.tensor([tokens])).logits[0]
            rows = np.arange(len(case.prompt_ids) - 1, len(tokens) - 1)
            shares.append(np.mean(logits[rows].argmax(-1).numpy() == np.array(case.answer_ids)))
        return float(np.mean(shares))
    finally:
        for handle in handles:
            handle.remove()


def test_masking_the_top_heads_against_transformers(llama_pair, predicted_right):
    model, ref = llama_pair
    cases = [NeedleCase(len(p), 0.5, "", "", "", tuple(p), tuple(a), 0)
             for p, a in predicted_right]
    scores = retrieval_scores(model, cases)
    picked = [(1, 2), (2, 5)]
    result = retrieval_masking(model, cases, scores, k=4, draws=3, seed=0, heads=picked)
    assert result.full == pytest.approx(1.0)
    order = np.argsort(-scores.ravel(), kind="stable")[:4]
    assert list(result.top_heads) == [divmod(int(i), 6) for i in order]
    assert result.top == pytest.approx(zeroed_reference_accuracy(ref, cases, result.top_heads))
    for heads, accuracy in zip(result.random_heads, result.random):
        assert len(set(heads)) == 4 and not set(heads) & set(result.top_heads)
        assert accuracy == pytest.approx(zeroed_reference_accuracy(ref, cases, heads))
    assert len(set(result.random_heads)) == 3
    assert result.picked == pytest.approx(zeroed_reference_accuracy(ref, cases, picked))
    assert result.top < result.full  # switching heads off moves the accuracy here
    np.testing.assert_allclose(copy_accuracy(model, cases), [1.0] * len(cases))
    named = retrieval_masking(model, cases, scores, k=4, draws=1, heads=["L1.H2", "L2.H5"])
    assert named.picked_heads == tuple(picked) and named.picked == result.picked
    assert named.random_heads[0] == result.random_heads[0]  # the same seed, the same draw
    # the accuracy with every head on, known from the study, spares its run
    runs = []
    known = retrieval_masking(model, cases, scores, k=4, draws=3, seed=0, heads=picked,
                              full=needle_study(model, cases).grid.mean,
                              progress=lambda done, total: runs.append(total))
    assert known.full == pytest.approx(1.0) and known.top == result.top
    np.testing.assert_array_equal(known.random, result.random)
    assert runs[-1] == 5 * len(cases)  # top, three draws and the picked heads
    with pytest.raises(InputError, match="full is a copy accuracy"):
        retrieval_masking(model, cases, scores, k=4, full=1.5)
    over = retrieval_counts(model, cases).heads_over(0.2)  # those over 0.2, highest first
    assert sorted(over) == [(l, h) for l, h in np.ndindex(*scores.shape) if scores[l, h] > 0.2]
    assert [scores[l, h] for l, h in over] == sorted((s for s in scores.ravel() if s > 0.2),
                                                     reverse=True)


def test_the_grid_offers_lengths_up_to_the_context_and_even_depths(llama_pair):
    model, _ = llama_pair
    assert needle_lengths(8192) == [256, 512, 1024, 2048, 4096, 8180]
    assert needle_lengths(1024, shortest=128) == [128, 256, 512, 1012]
    assert needle_depths(5) == (0.0, 0.25, 0.5, 0.75, 1.0) and needle_depths(1) == (0.5,)
    assert text_lengths(1024) == [128, 256, 512, 1024] and text_lengths(100) == [100]
    least = shortest_prompt(model)  # this tokenizer writes a needle in about 100 tokens
    options = needle_length_options(model)
    assert options[:-1] == [n for n in (256, 512) if n >= least] and 512 < options[-1] < 1024
    # the longest offered fits every needle drawn with its answer (this tokenizer spells a
    # word in several tokens: the answer takes more than the 12 tokens needle_lengths leaves)
    longest = [needle_cases(model, lengths=[options[-1]], depths=[0.0, 1.0], seed=seed,
                            haystack=HAYSTACK) for seed in range(3)]
    assert max(case.n_tokens for cases in longest for case in cases) <= 1024
    needle_cases(model, lengths=[least], depths=[0.5], haystack=HAYSTACK)  # the least fits
    with pytest.raises(InputError, match="cannot hold the needle"):
        needle_cases(model, lengths=[least - 1], depths=[0.5], haystack=HAYSTACK)
    ids = haystack_ids(model, 300)
    assert len(ids) == 300
    text = model.tokenizer.decode(list(ids))
    assert text.startswith(" These equivalences assume") and "__debug__" in text
    with pytest.raises(InputError, match="give 2 to the model's context"):
        haystack_ids(model, 5000)


@pytest.mark.parametrize("kwargs, words", [
    ({"depths": [1.5]}, "from 0 (its start) to 1"),
    ({"depths": [-0.1]}, "from 0 (its start) to 1"),
    ({"lengths": [20]}, "cannot hold the needle"),
    ({"lengths": [2000]}, "more than the model's context of 1,024"),
    ({"lengths": [4000], "haystack": "Short text."}, "more than the model's context"),
    ({"lengths": [900], "haystack": "Only a short text. Two sentences."}, "the haystack holds"),
    ({"per_cell": 0}, "at least 1"),
])
def test_bad_needles_are_refused_in_words(llama_pair, kwargs, words):
    model, _ = llama_pair
    arguments = {"lengths": [160], "depths": [0.5], "haystack": HAYSTACK, **kwargs}
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)")):
        needle_cases(model, **arguments)


def test_bad_answers_are_refused_in_words(llama_pair, copied):
    model, _ = llama_pair
    prompt = copied[0][0]
    absent = [t for t in range(1, 60) if t not in prompt][:3]
    with pytest.raises(InputError, match="never occurs in its prompt"):
        retrieval_scores(model, [prompt], [absent])
    with pytest.raises(InputError, match="one answer per prompt"):
        retrieval_scores(model, [prompt, prompt], [copied[0][1]])
    with pytest.raises(InputError, match="no answer token was predicted right"):
        retrieval_scores(model, [prompt], [copied[0][1]])  # a random model does not copy
    with pytest.raises(InputError, match="context"):
        retrieval_scores(model, [prompt * 20], [copied[0][1]])


def test_a_bidirectional_model_is_refused(bert_model):
    with pytest.raises(InputError, match="causal language model"):
        retrieval_scores(bert_model, ["the cat sat on the mat"], [" mat"])
