"""What the views call instead of computing (issue 50): a head's place in layer order and
back, the longest repeated-tokens probe a context takes, the statistics a corpus model can
measure, a corpus result's arrays by member, the pruning curve as a registry entry measured
once over a sample, and the home page's summary of a page. Each against a reference written
here: numpy's own index arithmetic, the tokenizer's frame counted by hand, the library's
functions on the same segments."""

import numpy as np
import pytest

from mha_viz import InputError, corpus
from mha_viz import analysis as A
from mha_viz.analysis import head_statistics

TEXTS = ["The cat sat on the mat because it was warm. " * 3, "One two three four five six."]


@pytest.mark.parametrize("n_layer, n_head", [(2, 4), (3, 1), (5, 7)])
def test_a_heads_place_in_layer_order_and_back(n_layer, n_head):
    flat = np.arange(n_layer * n_head).reshape(n_layer, n_head)  # row-major: layer order
    for layer in range(n_layer):
        for head in range(n_head):
            index = A.head_index(layer, head, n_head)
            assert index == flat[layer, head] == np.ravel_multi_index((layer, head),
                                                                      (n_layer, n_head))
            assert A.head_at(index, n_head) == (layer, head)
    layers, heads = A.layers_and_heads(n_layer, n_head)
    expected = np.unravel_index(np.arange(n_layer * n_head), (n_layer, n_head))
    assert layers == expected[0].tolist() and heads == expected[1].tolist()
    assert A.head_names(n_layer, n_head)[A.head_index(n_layer - 1, n_head - 1, n_head)] == \
        f"L{n_layer - 1}.H{n_head - 1}"


@pytest.fixture(scope="module")
def odd_contexts(checkpoint_factory):
    """GPT-2 and BERT with a context of 33: one position more than R R of 16 takes."""
    from mha_viz import load_model

    return [load_model(checkpoint_factory(kind, n_layer=1, n_head=2, d_model=32,
                                          n_positions=33)) for kind in ("gpt2", "bert")]


def test_the_longest_probe_fits_the_context_and_one_more_does_not(odd_contexts):
    # GPT-2 frames R R with a BOS (1 + 2 * 16 = 33), BERT with [CLS] and [SEP] (2 + 2 * 15):
    # counted here by hand
    for model, frame, longest in zip(odd_contexts, (1, 2), (16, 15)):
        assert A.longest_probe(model) == longest
        longest = A.longest_probe(model)
        assert longest == (model.info.max_positions - frame) // 2
        ids, _ = A.repeated_random_tokens(model, seq_len=longest, n_seqs=1)
        assert len(ids[0]) == 2 * longest + frame <= model.info.max_positions
        with pytest.raises(InputError, match="context"):
            A.repeated_random_tokens(model, seq_len=longest + 1, n_seqs=1)


def test_the_statistics_a_corpus_model_can_measure(minilm):
    from mha_viz import load_model

    assert corpus.statistics_for(minilm) == corpus.ALL_STATS
    encoder = corpus.corpus_model(load_model("t5-toy"))  # an encoder-decoder's encoder
    assert corpus.statistics_for(encoder) == head_statistics.FROM_MAPS
    assert not set(head_statistics.IMPORTANCE) & set(corpus.statistics_for(encoder))


def test_a_corpus_result_gives_each_statistics_arrays_by_member(gpt2_model):
    segments = corpus.segment(gpt2_model, TEXTS, seg_len=16, min_len=4)
    result = corpus.run(gpt2_model, segments, ["entropy", "mass", "roles", "pruning"])
    first = gpt2_model.trace_ids(list(segments.ids[0]))
    classes = A.token_class_mass(first)  # the library's own classes, read here
    assert set(result.arrays_of("mass")) == set(classes)
    for member, array in result.arrays_of("mass").items():
        assert array in result.names and member in array
    assert result.arrays_of("entropy") == {"raw": "entropy",
                                           "normalized": "entropy_normalized"}
    roles = result.arrays_of("roles")
    assert "previous token" in roles and all(a in result.names for a in roles.values())
    # the pruning curve: one curve over the sample, not a mean of per-segment curves
    curve = result.arrays_of("pruning")
    assert set(curve) == {"fraction", "score"} and not set(curve.values()) & set(result.names)
    sample = [gpt2_model.encoding_of_ids(ids)
              for ids in segments.ids[:head_statistics.SAMPLE_SEGMENTS]]
    expected = A.pruning_curve(gpt2_model, sample, by="gradient")
    np.testing.assert_allclose(result.curves[curve["score"]], expected.scores, rtol=1e-5)
    np.testing.assert_allclose(result.curves[curve["fraction"]], expected.fractions)
    assert result.info["pruning_segments"] == len(sample)


def test_a_statistic_over_a_sample_is_not_streamed(gpt2_model):
    assert head_statistics.per_segment(["entropy", "pruning", "ablation"]) == [
        "entropy", "ablation"]
    with pytest.raises(InputError, match="pruning is measured over the whole corpus"):
        corpus.run_stream(gpt2_model, TEXTS, seg_len=16, stats=["entropy", "pruning"])


def test_the_home_page_shows_each_page_without_its_name():
    from mha_viz.ui.controls import PageFile

    page = PageFile("pages/2_Entropy.py", "Entropy", "Entropy: how broad or focused each head is.")
    assert page.summary == "How broad or focused each head is."
    late = "what the page shows over many, many words, then: a colon"  # past 40 characters
    assert PageFile("pages/x.py", "X", late).summary == "W" + late[1:]


def test_the_sidebar_says_which_sets_a_page_reads():
    """A page declares the sets of maps it reads (MAPS in its view, maps.sets); the sidebar
    says which to pick where the set chosen is not one of them, and lists the pages that
    read a model's sets from those declarations. Head roles reads one stack's
    self-attention; Long range and Features one stack's; Training reads a run's checkpoints; the
    other pages every set."""
    from mha_viz.maps.sets import ENCODER_DECODER, ONE_STACK, map_set
    from mha_viz.ui import reads
    from mha_viz.ui.controls import page_files

    declared = {page.label: reads.declared_sets(reads.APP_DIR / page.path)
                for page in page_files()[1:]}
    assert declared["Head roles"] == ("self", "encoder", "decoder")
    assert declared["Training"] == ()
    assert declared["Long range"] == declared["Features"] == ("self",)
    assert all(sets == reads.EVERY_SET for label, sets in declared.items()
               if label not in ("Head roles", "Training", "Long range", "Features"))

    class EncoderDecoder:  # what the sidebar asks of a model: its sets and its type
        map_sets = ENCODER_DECODER
        info = type("Info", (), {"model_type": "t5"})

    cross = map_set("cross")
    assert reads.refusal(EncoderDecoder, cross, reads.EVERY_SET, page_files) is None
    assert reads.refusal(EncoderDecoder, cross, declared["Head roles"], page_files) == (
        "Cross-attention maps are target × source, and this page reads the self-attention of "
        "one stack: pick *encoder self-attention* or *decoder self-attention* in the sidebar.")
    said = reads.refusal(EncoderDecoder, cross, ("self",), page_files)
    serving = [label for label in declared
               if label not in ("Training", "Long range", "Features")]
    assert said == ("This page does not read T5's maps (encoder self-attention, decoder "
                    "self-attention, cross-attention); the " + ", ".join(serving)
                    + " pages do.")
    assert reads.refusal(type("OneStack", (), {"map_sets": ONE_STACK}), map_set("self"),
                         ("self",), page_files) is None
