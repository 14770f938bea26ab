"""The library pieces the pages read for "why a head attends there" and "what moves" (issues
48 and 49), each against a plain loop written here: a score's matrix cut to its strongest
sources, the textbook case found on a repeated text (the bundled induction toy), and the
first token's share of the weights and of what moves."""

from __future__ import annotations

import numpy as np
import pytest

from mha_viz import InputError, analysis, load_model

TOY_TEXT = "the cat sat on the mat. the cat sat on the mat."


@pytest.fixture(scope="module")
def toy():
    return load_model("induction-toy")


def test_the_cut_matrix_keeps_the_strongest_sources_and_the_whole_score(gpt2_model):
    found = analysis.score_attribution(gpt2_model, "the cat sat on the mat", 1, 2, 5)
    key = 3
    terms = found.terms[:, :, key]
    rows, cols, cut = found.top_matrix(key, k=3)
    by_row, by_col = terms.sum(1), terms.sum(0)
    strongest_rows = sorted(range(len(by_row)), key=lambda r: -abs(by_row[r]))[:3]
    strongest_cols = sorted(range(len(by_col)), key=lambda c: -abs(by_col[c]))[:3]
    assert rows == [found.query_sources[r] for r in strongest_rows] + ["other"]
    assert cols == [found.key_sources[c] for c in strongest_cols] + ["other"]
    for a, r in enumerate(strongest_rows):
        for b, c in enumerate(strongest_cols):
            assert cut[a, b] == pytest.approx(terms[r, c])
    rest_rows = [r for r in range(len(by_row)) if r not in strongest_rows]
    assert cut[-1, 0] == pytest.approx(sum(terms[r, strongest_cols[0]] for r in rest_rows))
    assert cut.sum() == pytest.approx(terms.sum(), rel=1e-12)
    assert cut.sum() == pytest.approx(found.scores[key], rel=1e-6)  # the engine's float32


def test_the_textbook_case_is_found_on_the_toy(toy):
    trace = toy.trace(TOY_TEXT)
    case = analysis.induction_example(trace)
    ids = trace.token_ids
    # the induction score by its definition: the mass on the tokens after earlier copies
    induction = np.zeros((trace.n_layer, trace.n_head))
    for layer in range(trace.n_layer):
        maps = trace.layer_maps(layer)
        for head in range(trace.n_head):
            masses = [sum(maps[head, i, j + 1] for j in range(i - 1) if ids[j] == ids[i])
                      for i in range(len(ids)) if ids[i] in ids[:max(i - 1, 0)]]
            induction[layer, head] = np.mean(masses)
    above = np.unravel_index(np.argmax(induction[1:]), induction[1:].shape)
    assert (case.layer, case.head) == (int(above[0]) + 1, int(above[1]))
    assert ids[case.key - 1] == ids[case.query] and case.key < case.query
    row = trace.head_map(case.layer, case.head)[case.query]
    assert case.weight == pytest.approx(row[case.key]) and case.weight > 0.5
    first = trace.layer_maps(0)
    previous = [np.mean([first[h, i, i - 1] for i in range(1, len(ids))])
                for h in range(trace.n_head)]
    assert case.previous_head == int(np.argmax(previous))
    with pytest.raises(InputError, match="repeats no token"):
        analysis.induction_example(toy.trace("abcdefg"))


def test_the_first_token_both_ways(gpt2_model):
    text = "The cat sat on the mat because it was warm."
    looks, moves = gpt2_model.trace(text), gpt2_model.trace(text, weights="value")
    shares = analysis.sink_shares(looks, moves)
    for trace, found in ((looks, shares.of_weights), (moves, shares.of_moved)):
        expected = np.array([[np.mean([trace.head_map(layer, head)[i, 0]
                                       for i in range(trace.n_tokens)])
                              for head in range(trace.n_head)] for layer in range(trace.n_layer)])
        np.testing.assert_allclose(found, expected, rtol=1e-5)
    assert shares.weights_mean == pytest.approx(shares.of_weights.mean())
    # the lesson's example (issue 57 item 1): the head whose first token takes the most more
    # of its weight than of what it moves
    gaps = {(layer, head): float(np.mean(looks.head_map(layer, head)[:, 0])
                                 - np.mean(moves.head_map(layer, head)[:, 0]))
            for layer in range(looks.n_layer) for head in range(looks.n_head)}
    assert shares.widest_gap() == max(gaps, key=gaps.get)
    with pytest.raises(InputError):
        analysis.sink_shares(moves, looks)


def test_the_lessons_induction_head_is_the_training_pages():
    """Issue 57 item 5: the lesson named L1.H0 at 0.74 (its own text) while Training showed
    0.97. The toy's probe scores are the Training page's last checkpoint's (its prepared
    dynamics, shipped beside the run), and the lesson's case is that head."""
    from pathlib import Path

    import mha_viz
    from mha_viz.analysis.why import key_side_writers

    toy = load_model("induction-toy")
    probe = analysis.probe_induction(toy)
    shown = analysis.TrainingDynamics.load(
        Path(mha_viz.__file__).parent / "bundled" / "induction-toy" / "dynamics.npz")
    np.testing.assert_allclose(probe.scores, shown.heads["induction"][-1], atol=1e-5)
    above = probe.scores[1:]
    layer, head = probe.head()
    assert layer >= 1 and probe.scores[layer, head] == above.max()
    assert all(abs(probe.scores[p] - probe.scores[layer, head]) <= 0.05 and p[0] >= 1
               for p in probe.peers(layer, head))
    case = analysis.induction_example(toy.trace("ab cd ab cd ab"), head=(layer, head))
    assert (case.layer, case.head) == (layer, head)
    with pytest.raises(InputError):
        analysis.induction_example(toy.trace("ab cd ab cd ab"), head=(0, 0))
    # both layer-0 heads credited when they write nearly as much; a later layer's never
    parts = [("L0.H0", 8.47), ("L0.H1", 8.34), ("biases", 3.2), ("L0.H3", -0.5),
             ("L1.H2", 9.0)]
    assert key_side_writers(parts, 1, 4) == [("L0.H0", 8.47), ("L0.H1", 8.34)]
    assert key_side_writers([("L0.H0", 8.0), ("L0.H1", 1.0)], 1, 4) == [("L0.H0", 8.0)]
