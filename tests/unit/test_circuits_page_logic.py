"""What the Circuits page (pages/9_Circuits.py) reads from its view's parts
(mha_viz/ui/views/circuits/shown.py) and its words (mha_viz/ui/words/circuits.py), against
values worked out here: the keys its results are stored under, what runs by itself, what each
"Show" choice of the head map shows (against each pair patched alone), the receivers of path
patching and the tables as shown."""

from types import SimpleNamespace

import numpy as np
import pytest
from tests.support.hf_reference import TEXT

from mha_viz.analysis import activation_patching
from mha_viz.analysis.circuits import Edge
from mha_viz.analysis.patching import strongest_components
from mha_viz.analysis.prompts import PromptPair, swap_token
from mha_viz.core.errors import InputError
from mha_viz.ui.views.circuits import shown as circuits_page
from mha_viz.ui.words import circuits as words


@pytest.fixture(scope="module")
def pairs(gpt2_model):
    """Two pairs of the same text, each with another token swapped."""
    ids = gpt2_model.encode(TEXT).input_ids
    return [PromptPair(TEXT, swap_token(gpt2_model, TEXT, position, ids[1]), ids[4], ids[1])
            for position in (2, 3)]


@pytest.fixture(scope="module", params=["denoise", "noise"])
def patched(request, gpt2_model, pairs):
    """(direction, the two pairs patched together, each pair patched alone)."""
    direction = request.param
    together = activation_patching(gpt2_model, pairs, None, "logit_diff", "head", direction)
    alone = [activation_patching(gpt2_model, [pair], None, "logit_diff", "head", direction)
             for pair in pairs]
    return direction, together, alone


def test_the_views_share_one_key_for_exact_head_patching(gpt2_model, pairs):
    """The Heads and the Attribution views ask the same call: one stored result."""
    from mha_viz.analysis import patching
    from mha_viz.ui.stores import result_key

    heads = result_key(patching.activation_patching, gpt2_model, pairs, None, "logit_diff",
                       "head", "noise")
    again = result_key(patching.activation_patching, gpt2_model, tuple(pairs), None,
                       "logit_diff", "head", direction="noise")
    assert heads == again
    assert heads != result_key(patching.activation_patching, gpt2_model, pairs, None,
                               "logit_diff", "head", "denoise")
    assert heads != result_key(patching.attribution_patching, gpt2_model, pairs, None,
                               "logit_diff", "head", "noise")


def test_the_pairs_digest_names_the_pairs(pairs):
    digest = circuits_page.pairs_digest(pairs)
    assert len(digest) == 12 and int(digest, 16) >= 0  # core.digest, 6 bytes
    assert circuits_page.pairs_digest(list(pairs)) == digest
    assert circuits_page.pairs_digest(pairs[:1]) != digest
    assert circuits_page.pairs_digest(pairs[::-1]) != digest


def test_one_short_pair_runs_by_itself_but_path_patching_waits(gpt2_model, pairs):
    from mha_viz.ui.settings import RUNS_ON_OPEN

    assert len(gpt2_model.encode(TEXT).input_ids) <= RUNS_ON_OPEN["circuits.patching"].up_to
    assert circuits_page.runs_by_itself(gpt2_model, pairs[:1]) == {
        "heads": True, "positions": True, "attribution": True, "paths": False,
        "circuit": True}
    assert not any(circuits_page.runs_by_itself(gpt2_model, pairs).values())  # two pairs
    long_text = " ".join(["the cat sat on the mat"] * 20)
    assert len(gpt2_model.encode(long_text).input_ids) > RUNS_ON_OPEN["circuits.patching"].up_to
    long_pair = [PromptPair(long_text, long_text, 1, 2)]
    assert not any(circuits_page.runs_by_itself(gpt2_model, long_pair).values())


def _seq2seq(encoder: tuple[int, int], decoder: tuple[int, int]):
    stack = lambda shape: SimpleNamespace(n_layer=shape[0], n_head=shape[1])  # noqa: E731
    return SimpleNamespace(network=SimpleNamespace(config=SimpleNamespace(
        encoder=stack(encoder), decoder=stack(decoder))))


def test_an_encoder_decoder_runs_by_itself_up_to_200_heads():
    from mha_viz.ui.settings import RUNS_ON_OPEN

    assert RUNS_ON_OPEN["circuits.seq2seq_patching"].up_to == 200
    # encoder 8 x 5, decoder 8 x 10 self- and cross-attention: 40 + 80 + 80 = 200
    assert circuits_page.seq2seq_runs_by_itself(_seq2seq((8, 5), (8, 10)))
    # 6 x 12 + 2 * (6 x 12) = 216
    assert not circuits_page.seq2seq_runs_by_itself(_seq2seq((6, 12), (6, 12)))


def test_the_show_choices_are_numbers_read_as_labels(pairs):
    labels = circuits_page.effect_choices(2, pairs)
    assert list(labels) == ["mean", "std", 0, 1]
    read = [circuits_page.effect_label(labels, choice) for choice in labels]
    assert read == ["mean over 2 pairs", "spread: standard deviation over pairs",
                    f"pair 0: {TEXT}", f"pair 1: {TEXT}"]
    assert circuits_page.effect_label(labels, "pair 1") == f"pair 1: {TEXT}"
    with pytest.raises(KeyError):
        circuits_page.effect_label(labels, 2)


def test_each_show_choice_is_what_the_pairs_patched_alone_give(patched):
    direction, together, alone = patched
    base = 0.0 if direction == "denoise" else 1.0
    each = np.stack([result.normalized for result in alone])
    for number in range(2):
        shown = circuits_page.shown_effect(together, number)
        np.testing.assert_allclose(shown.values, each[number] - base, atol=1e-4)
        np.testing.assert_allclose(shown.raw, alone[number].values, atol=1e-4)
        assert (shown.what, shown.unit) == (f"normalized effect on pair {number}",
                                            words.SCALE_TITLE)
        assert shown.span == 1.0  # every effect on one fixed scale
    mean = circuits_page.shown_effect(together, "mean")
    np.testing.assert_allclose(mean.values, each.mean(0) - base, atol=1e-4)
    np.testing.assert_allclose(mean.raw, np.mean([r.values for r in alone], 0), atol=1e-4)
    assert (mean.what, mean.unit, mean.span) == ("mean normalized effect", words.SCALE_TITLE,
                                                  1.0)
    spread = circuits_page.shown_effect(together, "std")
    np.testing.assert_allclose(spread.values, each.std(0, ddof=1), atol=1e-4)
    assert (spread.what, spread.unit, spread.span) == ("std of the normalized effect", "std",
                                                        None)
    title = circuits_page.heads_title(direction, mean.what)
    assert title == ("Denoising" if direction == "denoise" else "Noising") + \
        ": mean normalized effect"


def test_the_heads_caption_names_both_runs(patched):
    """Issue 51 item 11: one orientation in both directions, 0 = the corrupted run's metric,
    1 = the clean run's (noising had said 0 = clean, -1 = corrupted)."""
    direction, together, _ = patched
    caption = circuits_page.heads_caption(together)
    clean, corrupted = f"{together.clean:.3f}", f"{together.corrupted:.3f}"
    assert f"The corrupted run's metric is {corrupted} (0 on the scale), the clean run's " \
           f"{clean} (1)." in caption
    assert "−1" not in caption and "no change from the clean" not in caption


def test_the_strongest_heads_table_is_the_largest_effects(patched):
    _, together, _ = patched
    table = circuits_page.strongest_table(strongest_components(together, 3))
    effect = together.effect
    order = np.argsort(np.abs(effect).ravel())[::-1][:3]
    n_head = effect.shape[1]
    assert table["head"] == [f"L{i // n_head}.H{i % n_head}" for i in order]
    assert table["normalized effect"] == [f"{effect.ravel()[i]:+.3f}" for i in order]
    assert table["patched metric"] == [f"{together.values.ravel()[i]:.3f}" for i in order]


def test_direction_captions():
    from mha_viz.analysis.patching import DIRECTIONS
    from mha_viz.ui.words.circuits import DIRECTION_CAPTIONS

    assert set(DIRECTION_CAPTIONS) == set(DIRECTIONS)  # a caption for every direction
    assert DIRECTION_CAPTIONS["denoise"] == \
        "The corrupted run with one clean activation (what suffices)."
    assert DIRECTION_CAPTIONS["noise"] == \
        "The clean run with one corrupted activation (what is necessary)."


def test_path_patching_receivers():
    assert circuits_page.receiver_names(3, 2) == ["logits", "L1.H0", "L1.H1", "L2.H0", "L2.H1"]
    assert circuits_page.path_receivers("logits", "k") == "logits"
    assert circuits_page.path_receivers("L20.H0", "k") == [(20, 0, "k")]
    with pytest.raises(InputError):
        circuits_page.path_receivers("MLP3", "q")


def test_edge_tables():
    edges = [Edge("L3.H1", "L5.H0.q", 0.25), Edge("embed", "logits", -1.5),
             Edge("MLP2", "MLP4", 1e-5)]
    assert circuits_page.edge_table(edges, 2) == {
        "edge": ["L3.H1 → L5.H0.q", "embed → logits"], "score": ["+0.2500", "-1.5000"]}
    assert circuits_page.edge_columns(edges) == {
        "upstream": ["L3.H1", "embed", "MLP2"], "downstream": ["L5.H0.q", "logits", "MLP4"],
        "score": [0.25, -1.5, 1e-5]}


def test_the_seq2seq_table():
    ranked = [("cross", 2, 3, 0.91234), ("encoder", 0, 1, 0.5)]
    assert circuits_page.seq2seq_table(ranked, "denoise") == {
        "head": ["L2.H3", "L0.H1"], "kind": ["Cross-attention", "Encoder self-attention"],
        "share restored": [0.912, 0.5]}
    assert list(circuits_page.seq2seq_table(ranked, "noise")) == ["head", "kind", "share lost"]


def test_a_map_within_noise_is_told_from_one_with_an_effect():
    """Issue 51 item 11: path patching into L23.H3 had every cell within ±0.01. Noise: under
    2% of the way between the runs, or, over several pairs, under twice the largest standard
    error of a mean (worked out here)."""
    from mha_viz.analysis.patching import noise_level, within_noise

    one = SimpleNamespace(effect=np.array([[0.01, -0.012], [np.nan, 0.0]]), std=np.zeros((2, 2)),
                          n_pairs=1)
    assert noise_level(one) == 0.02 and within_noise(one)
    one.effect[0, 0] = -0.05
    assert not within_noise(one)
    # four pairs that disagree: a standard error of 0.2 / 2 = 0.1, so 0.15 is noise
    spread = SimpleNamespace(effect=np.array([[0.15, 0.0]]), std=np.array([[0.2, 0.05]]),
                             n_pairs=4)
    assert noise_level(spread) == pytest.approx(2 * 0.2 / 2) and within_noise(spread)
    spread.effect[0, 1] = -0.25
    assert not within_noise(spread)


def test_the_darkest_cells_in_words():
    """A caption true to the darkest cells: each named with its sign's direction, none under
    the noise level."""
    ranked = [("L9.H9", 0.52, 1.0), ("L10.H7", -0.2, 0.0), ("L1.H1", 0.01, 0.0)]
    said = words.darkest(ranked, 0.02)
    assert said == ("Darkest: L9.H9 (+0.52: 52% of the way toward the clean run); L10.H7 "
                    "(-0.20: 20% of the way toward the corrupted run).")
    assert words.darkest(ranked[2:], 0.02) == ""


def test_a_share_over_100_percent_is_explained_where_shown():
    """Issue 51 item 13: "Heads' necessity 210%" was explained only in a tooltip."""
    said = words.heads_test_caption(0.61, 2.1, -1.3, 1.18)
    assert "F(C) / F(M)" in said and "1 − F(M \\ C) / F(M)" in said
    assert "Over 100%" in said and "F(M \\ C) = -1.300 against F(M) = 1.180" in said
    assert "Over 100%" not in words.heads_test_caption(0.61, 0.9, 0.1, 1.18)


def test_an_encoder_decoders_strongest_heads_when_noising():
    """Noising: the heads whose corruption moves the metric most toward the corrupted run
    come first (the normalized value nearest 0), as the share lost."""
    from mha_viz.analysis.encoder_decoder_patching import Seq2SeqPatching

    values = {"encoder": np.array([[2.0, 0.5]]), "decoder": np.array([[1.8, 1.9]]),
              "cross": np.array([[0.0, 2.0]])}  # clean 2.0, corrupted 0.0
    found = Seq2SeqPatching(values, 2.0, 0.0, "noise", "metric")
    np.testing.assert_allclose(found.effect["encoder"], [[0.0, -0.75]])
    assert [(k, l, h) for k, l, h, _ in found.strongest(2)] == [("cross", 0, 0),
                                                                  ("encoder", 0, 1)]
    assert found.strongest(1)[0][3] == pytest.approx(1.0)  # the whole way lost
    denoised = Seq2SeqPatching(values, 2.0, 0.0, "denoise", "metric")
    assert [(k, l, h) for k, l, h, _ in denoised.strongest(2)] == [("encoder", 0, 0),
                                                                    ("cross", 0, 1)]
