"""What the pruning page reads from the library instead of working out itself (and, for its
words, from ui.words.pruning): the scores' labels, the heads that matter and the ones whose
removal helps, a curve as a table, the labels of the gradient and the curve, the ranking over an encoder-decoder's kinds and the head shown
before and after heads are switched off. Each compared with real values (the models' own, or
the expression the page held before)."""

from __future__ import annotations

import numpy as np
import pytest

from mha_viz.analysis import heads, pruning
from mha_viz.models.model_info import SCORE_EXPLANATIONS, SCORE_NAMES, SCORE_SHORT_NAMES
from mha_viz.models.seq2seq import KINDS
from mha_viz.ui.words import pruning as words

TEXT = "The cat sat on the mat."


def test_score_labels_of_each_kind_of_model(gpt2_model, bert_model, minilm):
    assert gpt2_model.info.score_short_name == "next-token loss (nats/token)"
    assert bert_model.info.score_short_name == "masked-LM loss (nats/token)"
    assert minilm.info.score_short_name == "embedding shift (1 − cos)"
    assert minilm.info.score_explanation.startswith("This checkpoint has no language-model head")
    assert gpt2_model.info.score_explanation.startswith("The causal LM's mean cross-entropy")
    # every short label and explanation describes a score SCORE_NAMES knows
    assert set(SCORE_SHORT_NAMES) == set(SCORE_EXPLANATIONS) <= set(SCORE_NAMES)


def test_format_score():
    assert words.format_score(1e-8) == "0"  # 1 − cos of an embedding with itself
    assert words.format_score(-4.9e-7) == "0"
    assert words.format_score(5e-7) == "5e-07"
    assert words.format_score(3.14159265) == "3.14159"
    assert words.format_score(-0.000123456789) == "-0.000123457"


EFFECTS = np.array([[0.1, -0.2, 0.0], [0.3, 0.05, -0.4]])


def test_heads_that_matter_and_whose_removal_helps():
    # a loss: the largest rise first; the removals that lower it, most helpful first
    assert pruning.heads_that_matter(EFFECTS) == [(1, 0), (0, 0), (1, 1), (0, 2), (0, 1),
                                                  (1, 2)]
    assert pruning.heads_whose_removal_helps(EFFECTS, top=5) == [(1, 2), (0, 1)]
    assert pruning.heads_whose_removal_helps(EFFECTS, top=1) == [(1, 2)]
    # a target metric: the largest fall first; the removals that raise it
    metric = object()
    assert pruning.heads_that_matter(EFFECTS, metric)[:2] == [(1, 2), (0, 1)]
    assert pruning.heads_whose_removal_helps(EFFECTS, metric) == [(1, 0), (0, 0), (1, 1)]


def test_heads_that_matter_of_a_real_sweep(gpt2_model):
    effects = pruning.ablation_effects(gpt2_model, TEXT)
    ranked = pruning.heads_that_matter(effects)
    assert [effects[lh] for lh in ranked] == sorted(effects.ravel(), reverse=True)
    helps = pruning.heads_whose_removal_helps(effects, top=100)
    assert sorted(effects[lh] for lh in helps) == sorted(e for e in effects.ravel() if e < 0)
    table = words.effect_table(effects, ranked[:3], "Δ loss")
    assert table["head"] == [heads.head_name(*lh) for lh in ranked[:3]]
    assert table["Δ loss"] == [float(f"{effects[lh]:.4g}") for lh in ranked[:3]]


def test_effects_both_ways():
    assert pruning.effects_both_ways(EFFECTS)
    assert not pruning.effects_both_ways(np.abs(EFFECTS))
    assert pruning.effects_both_ways(np.abs(EFFECTS), metric=object())  # a metric: always


def test_curve_table_of_a_real_curve(gpt2_model):
    curve = pruning.pruning_curve(gpt2_model, TEXT, step=0.25, by="ablation")
    table = pruning.curve_table(curve, "score")
    assert list(table) == ["fraction_removed", "score", "heads_removed_this_step"]
    np.testing.assert_array_equal(table["fraction_removed"], [0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_array_equal(table["score"], curve.scores)
    assert table["score"][0] == pytest.approx(gpt2_model.score(TEXT), rel=1e-6)
    assert table["heads_removed_this_step"][0] == ""
    assert table["heads_removed_this_step"][1] == " ".join(
        f"L{l}.H{h}" for l, h in curve.removed[1])
    removed = " ".join(table["heads_removed_this_step"]).split()
    assert sorted(removed) == heads.head_names(2, 4)  # every head, once


def test_curve_table_of_an_encoder_decoder():
    curve = pruning.PruningCurve(np.array([0.0, 0.5]), np.array([1.5, 2.5]),
                                 [[], [("cross", 0, 1), ("encoder", 1, 0)]])
    table = pruning.curve_table(curve, "loss", {"encoder": np.array([1.0, 0.5]),
                                                "cross": np.array([1.0, 0.75])})
    assert list(table) == ["fraction_removed", "loss", "encoder_heads_on", "cross_heads_on",
                           "heads_removed_this_step"]
    assert table["heads_removed_this_step"] == ["", "cross:L0.H1 encoder:L1.H0"]


def test_curve_and_gradient_labels(minilm, gpt2_model):
    assert words.curve_button(3, 10) == "Run the pruning curve (10 steps of 3 heads)"
    assert words.curve_button(1, 8, "gradient") == (
        "Run the pruning curve (8 steps of 1 head, one gradient each)")
    assert words.curve_button(2, 4, words.CURVE_STEP_COSTS["ablation"]) == (
        "Run the pruning curve (4 steps of 2 heads, one ablation sweep each)")
    assert pruning.curve_steps(8, 0.25) == (2, 4)
    # the embedding shift's gradient is 0 at its optimum: the second-order estimate
    assert pruning.second_order_gradient(minilm.info.score_kind)
    assert not pruning.second_order_gradient(minilm.info.score_kind, metric=object())
    assert not pruning.second_order_gradient(gpt2_model.info.score_kind)
    assert words.gradient_symbol() == "|∂ score/∂ξ|"
    assert words.gradient_symbol(score="loss") == "|∂ loss/∂ξ|"
    assert words.gradient_symbol(object()) == "|∂ metric/∂ξ|"
    assert words.gradient_symbol(second_order=True) == "½‖∂e/∂ξ‖²"
    assert words.gradient_cost(True, 72) == "72 forward-mode passes, slower than the sweep"
    assert words.gradient_cost(False, 72) == "one backward pass"


def test_rank_heads_of_kinds_is_the_ranking_over_every_head():
    rng = np.random.default_rng(0)
    values = {"encoder": rng.normal(size=(2, 3)), "decoder": rng.normal(size=(1, 4)),
              "cross": rng.normal(size=(1, 4))}
    ranked = heads.rank_heads_of_kinds(values, KINDS)
    # what the page sorted itself before
    expected = sorted(((float(values[k][l, h]), k, l, h) for k in KINDS
                       for l in range(values[k].shape[0]) for h in range(values[k].shape[1])),
                      reverse=True)
    assert ranked == [(k, l, h) for _, k, l, h in expected]
    assert len(ranked) == 14
    # ties keep the order of kinds, then layer-major, as rank_heads
    assert heads.rank_heads_of_kinds({"a": np.zeros((1, 2)), "b": np.ones((2, 1))},
                                     ("a", "b")) == [("b", 0, 0), ("b", 1, 0), ("a", 0, 0),
                                                     ("a", 0, 1)]


def test_head_shown_before_and_after(gpt2_model):
    mask = heads.names_to_mask(["L0.H1", "L0.H3"], 2, 4)
    change = heads.attention_change(gpt2_model.trace(TEXT),
                                    gpt2_model.trace(TEXT, head_mask=mask))
    assert heads.lowest_layer(["L1.H0", "L0.H3"]) == 0
    moved_most = tuple(int(i) for i in np.unravel_index(np.argmax(change), change.shape))
    assert moved_most[0] == 1
    # a head in layer 0 cannot change: the one that moved most is shown
    assert heads.head_to_compare(0, 0, 0, change) == moved_most
    assert heads.head_to_compare(1, 2, 0, change) == (1, 2)
    # every head off in the last layer: no map can change, the picked head stays
    assert heads.head_to_compare(0, 2, 1, np.zeros((2, 4))) == (0, 2)
