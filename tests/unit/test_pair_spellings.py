"""A researcher's spellings of prompt pairs (issue 41): PromptPairs, (clean, corrupted) tuples
and two lists, each with one TargetMetric, give the same patching as PromptPairs that carry
the same target; unequal lists and mixed spellings are refused with a message naming the pair."""

import numpy as np
import pytest

from mha_viz import InputError, TargetMetric
from mha_viz.analysis import activation_patching
from mha_viz.analysis.prompts import PromptPair, as_pairs, swap_token


@pytest.fixture(scope="module")
def two_pairs(patch_models, patch_prompts):
    model = patch_models["gpt2"][0]
    clean, corrupted, target, contrast = patch_prompts["gpt2"]
    ids = model.encode(clean).input_ids
    second = swap_token(model, clean, 2, ids[1])  # another token swapped, same length
    return model, [(clean, corrupted), (clean, second)], TargetMetric(4, target, contrast)


def test_tuples_and_two_lists_patch_as_prompt_pairs_do(two_pairs):
    model, tuples, metric = two_pairs
    prompt_pairs = [PromptPair(a, b, metric.target, metric.contrast, metric.position)
                    for a, b in tuples]
    reference = activation_patching(model, prompt_pairs, None, "logit_diff")
    from_tuples = activation_patching(model, tuples, None, metric)
    from_lists = activation_patching(model, [a for a, _ in tuples], [b for _, b in tuples],
                                     metric)
    assert reference.values.shape == (model.info.n_layer, model.info.n_head)
    assert np.ptp(reference.values) > 0  # the heads do differ: the comparison can fail
    for result in (from_tuples, from_lists):
        np.testing.assert_array_equal(result.values, reference.values)
        np.testing.assert_array_equal(result.per_pair, reference.per_pair)
        assert (result.clean, result.corrupted) == (reference.clean, reference.corrupted)
    # PromptPairs keep their own targets whatever the TargetMetric says
    own = activation_patching(model, prompt_pairs, None, TargetMetric(0, 5, 6))
    np.testing.assert_array_equal(own.values, reference.values)


def test_wrong_spellings_name_the_pair():
    pair = PromptPair("a b", "a c", " b")
    with pytest.raises(InputError, match="3 clean prompts but 2 corrupted ones: pair 2 has no"):
        as_pairs(["a", "b", "c"], ["x", "y"], target=" b")
    with pytest.raises(InputError, match="pair 1 is a \\(clean, corrupted\\) tuple but pair 0 "
                                         "a PromptPair"):
        as_pairs([pair, ("a b", "a c")], target=" b")
    with pytest.raises(InputError, match="pair 1 is a int, not a PromptPair or a \\(clean, "
                                         "corrupted\\) tuple"):
        as_pairs([("a", "b"), 7], target=" b")
    with pytest.raises(InputError, match="pair 0 is a str and a int: two lists hold texts"):
        as_pairs(["a"], [1], target=" b")
    with pytest.raises(InputError, match="give the token the metric reads: metric=TargetMetric"):
        as_pairs([("a b", "a c")])
    with pytest.raises(InputError, match="give the token the metric reads"):
        as_pairs("a b", "a c")
    with pytest.raises(InputError, match="empty"):
        as_pairs([], [], target=" b")
    assert as_pairs([pair]) == [pair]
    assert as_pairs([["a b", "a c"]], target=" b", contrast=" c") == [
        PromptPair("a b", "a c", " b", " c", -1)]


def test_a_swapped_word_takes_the_space_of_the_word_it_replaces(gpt2_folder, gpt2_model):
    """Issue 51 item 12: "Replace it with: Alice" in place of ' John' made "park,Alice". As
    the target field does, a replacement without the leading space of the token it replaces
    is refused with the spelling to use; with the space, the prompt is transformers'
    tokens with that one token changed."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gpt2_folder))
    text = "When Mary and John went to the park, John gave a drink to"
    ids = tokenizer(text)["input_ids"]
    position = len(ids) - 5  # the second ' John'
    assert tokenizer.decode([ids[position]]) == " John"
    (spaced,) = tokenizer(" Mary")["input_ids"]
    with pytest.raises(InputError, match=f"use ' Mary' \\(token {spaced}\\)"):
        swap_token(gpt2_model, text, position, "Mary")
    swapped = swap_token(gpt2_model, text, position, " Mary")
    assert tokenizer(swapped)["input_ids"] == ids[:position] + [spaced] + ids[position + 1:]
    # a token written without a space may be replaced by one without a space
    comma = ids.index(tokenizer(",")["input_ids"][0])
    assert tokenizer(swap_token(gpt2_model, text, comma, "."))["input_ids"][comma] == \
        tokenizer(".")["input_ids"][0]
