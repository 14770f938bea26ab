"""Head roles: special-token exclusion, the TransformerLens normalization, the shifted-duplicate
induction score, the probe object and the strongest-role rule (mha_viz.analysis.roles) on
small hand-computed maps (the page: tests/app/test_app_head_roles.py)."""

from __future__ import annotations

import numpy as np
import pytest
from tests.support.role_maps import FakeModel, induction_map, make_trace, uniform

from mha_viz import analysis as A
from mha_viz.core.errors import InputError

# --------------------------------------------------------------------------- helpers


def rows(*pairs, n):
    """A [n, n] map from {row: {key: weight}} given as (row, {key: weight}) pairs."""
    a = np.zeros((n, n), dtype=np.float32)
    for i, weights in pairs:
        for j, w in weights.items():
            a[i, j] = w
    assert np.allclose(a.sum(1), 1.0)
    return a


def tl_patterns(ids):
    """TransformerLens's head_detector patterns, written out as its code builds them."""
    ids = np.asarray(ids)
    n = len(ids)
    previous = np.zeros((n, n))
    previous[1:, :-1] = np.eye(n - 1)
    eq = (ids[None, :] == ids[:, None]).astype(float)
    np.fill_diagonal(eq, 0)
    duplicate = np.tril(eq)
    shifted = np.roll(duplicate, 1, axis=1)
    induction = np.tril(np.concatenate([np.zeros((n, 1)), shifted[:, 1:]], axis=1))
    return {"previous": np.tril(previous), "duplicate": duplicate, "induction": induction}


def tl_score(attention, pattern):
    """compute_head_attention_similarity_score(error_measure="mul"), no exclusions."""
    return float((attention * pattern).sum() / attention.sum())


# A BERT-like input [CLS] a b c [SEP]; head 0 puts half of every row on [CLS] and half on the
# previous token (row "a": all on [CLS], its previous token); head 1 is uniform.
BERT_TOKENS = ["[CLS]", "a", "b", "c", "[SEP]"]
HALF_ON_CLS = rows((0, {0: 1}), (1, {0: 1}), (2, {0: .5, 1: .5}), (3, {0: .5, 2: .5}),
                   (4, {0: .5, 3: .5}), n=5)


def bert_trace():
    a = np.stack([np.stack([HALF_ON_CLS, uniform(5)])])
    return make_trace(BERT_TOKENS, a, token_ids=[101, 1, 2, 3, 102])


# --------------------------------------------------------------------------- exclusion


def test_previous_token_scores_leave_special_tokens_out():
    trace = bert_trace()
    # every token: rows 1..4 give 1, .5, .5, .5 -> 2.5 / 4
    np.testing.assert_allclose(A.previous_token_scores(trace)[0], [0.625, 0.2], rtol=1e-6)
    # without [CLS] and [SEP]: row a had all its mass on [CLS] (stays 0, no previous key
    # anyway); rows b and c put all their kept mass on a and b -> 1.0; uniform over 3 -> 1/3
    dropped = A.previous_token_scores(trace, drop_special=True)
    np.testing.assert_allclose(dropped[0], [1.0, 1 / 3], rtol=1e-6)
    mask = np.array([True, False, False, False, True])
    np.testing.assert_allclose(A.previous_token_scores(trace.attentions, exclude=mask), dropped)
    # the same as dropping positions by hand (special.drop_positions) and scoring the rest
    restricted, kept = A.drop_positions(trace.attentions, ~mask)
    assert kept.tolist() == [1, 2, 3]
    np.testing.assert_allclose(A.previous_token_scores(restricted), dropped)
    # next token: every token: rows 0..3 give 0, 0, 0, 0 on i + 1 (head 0); uniform 1/5
    np.testing.assert_allclose(A.next_token_scores(trace)[0], [0.0, 0.2], atol=1e-7)
    np.testing.assert_allclose(A.next_token_scores(trace, drop_special=True)[0], [0, 1 / 3],
                               atol=1e-7)
    with pytest.raises(InputError, match="drop_special needs a trace"):
        A.previous_token_scores(trace.attentions, drop_special=True)
    with pytest.raises(InputError, match="every position"):
        A.previous_token_scores(trace.attentions, exclude=np.ones(5, bool))
    with pytest.raises(InputError):
        A.previous_token_scores(trace, exclude=[True, False])


def test_duplicate_and_shifted_scores_leave_special_tokens_out():
    # [CLS] x y x [SEP] z [SEP]: with every token, queries 3 (x) and 6 ([SEP]) have an earlier
    # copy; without specials only x (kept index 2 of [x, y, x, z])
    ids = [101, 7, 8, 7, 102, 9, 102]
    tokens = ["[CLS]", "x", "y", "x", "[SEP]", "z", "[SEP]"]
    a = rows((0, {0: 1}), (1, {1: 1}), (2, {2: 1}), (3, {1: .4, 0: .6}), (4, {4: 1}),
             (5, {5: 1}), (6, {4: .9, 0: .1}), n=7)
    trace = make_trace(tokens, a[None, None], token_ids=ids)
    assert A.duplicate_token_scores(trace)[0, 0] == pytest.approx((0.4 + 0.9) / 2)
    assert A.duplicate_token_scores(trace, normalization="transformer_lens")[0, 0] == \
        pytest.approx(1.3 / 7)
    # row x keeps only its 0.4 on the first x -> 1.0 after renormalizing
    assert A.duplicate_token_scores(trace, drop_special=True)[0, 0] == pytest.approx(1.0)
    assert A.duplicate_token_scores(trace, drop_special=True,
                                    normalization="transformer_lens")[0, 0] == pytest.approx(1 / 4)
    # shifted duplicate: x's target is y (position 2), [SEP]'s target is z (5)
    assert A.shifted_duplicate_scores(trace)[0, 0] == pytest.approx(0.0)
    b = a.copy()
    b[3] = 0
    b[3, 2], b[3, 0] = 0.5, 0.5
    b[6] = 0
    b[6, 5], b[6, 4] = 0.2, 0.8
    trace_b = make_trace(tokens, b[None, None], token_ids=ids)
    assert A.shifted_duplicate_scores(trace_b)[0, 0] == pytest.approx((0.5 + 0.2) / 2)
    assert A.shifted_duplicate_scores(trace_b, drop_special=True)[0, 0] == pytest.approx(1.0)
    support = A.role_support(trace_b)
    assert support == {"rows": 7, "previous token": 6, "next token": 6, "duplicate token": 2,
                       "induction (text)": 2}
    assert A.role_support(trace_b, drop_special=True)["duplicate token"] == 1


# --------------------------------------------------------------------------- normalization


def test_transformer_lens_normalization_matches_its_head_detector_exactly():
    rng = np.random.default_rng(3)
    n = 12
    ids = rng.integers(0, 4, size=n)  # many repeats, some back to back
    logits = rng.normal(size=(2, 3, n, n))
    logits[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] = -np.inf
    a = np.exp(logits - logits.max(-1, keepdims=True))
    a = (a / a.sum(-1, keepdims=True)).astype(np.float32)
    patterns = tl_patterns(ids)
    ours = {"previous": A.previous_token_scores(a),
            "duplicate": A.duplicate_token_scores(a, ids),
            "induction": A.shifted_duplicate_scores(a, ids)}
    tl = {"previous": A.previous_token_scores(a, normalization="transformer_lens"),
          "duplicate": A.duplicate_token_scores(a, ids, normalization="transformer_lens"),
          "induction": A.shifted_duplicate_scores(a, ids, normalization="transformer_lens")}
    for name, pattern in patterns.items():
        expected = [[tl_score(a[l, h].astype(np.float64), pattern) for h in range(3)]
                    for l in range(2)]
        np.testing.assert_allclose(tl[name], expected, rtol=1e-6, err_msg=name)
    # the exact relations to ours
    np.testing.assert_allclose(tl["previous"], ours["previous"] * (n - 1) / n, rtol=1e-12)
    np.testing.assert_allclose(A.next_token_scores(a.transpose(0, 1, 3, 2),
                                                   normalization="transformer_lens"),
                               A.next_token_scores(a.transpose(0, 1, 3, 2)) * (n - 1) / n,
                               rtol=1e-12)
    n_dup = int(patterns["duplicate"].any(1).sum())
    np.testing.assert_allclose(tl["duplicate"], ours["duplicate"] * n_dup / n, rtol=1e-12)
    n_ind = int(patterns["induction"].any(1).sum())
    assert n_ind == n_dup  # every query with an earlier copy has a target
    np.testing.assert_allclose(tl["induction"], ours["induction"] * n_ind / n, rtol=1e-12)
    with pytest.raises(InputError, match="normalization"):
        A.previous_token_scores(a, normalization="tl")


def test_shifted_duplicate_is_the_probe_score_on_a_repeated_sequence():
    s = 8
    r = list(range(10, 10 + s))
    ids = [0] + r + r  # BOS R R
    n = len(ids)
    exact, half = induction_map(ids), 0.5 * induction_map(ids) + 0.5 * uniform(n, True)
    a = np.stack([np.stack([exact, half, uniform(n, causal=True)])]).astype(np.float32)
    # ours: the probe leaves out the last query of the second R, the text score keeps it
    text = A.shifted_duplicate_scores(a, ids)
    probe = A.induction_pattern_scores(a, s, offset=1)
    assert text[0, 0] == probe[0, 0] == pytest.approx(1.0)
    # TransformerLens: both are detect_head(..., "induction_head") on this input
    tl_text = A.shifted_duplicate_scores(a, ids, normalization="transformer_lens")
    tl_probe = A.induction_pattern_scores(a, s, offset=1, normalization="transformer_lens")
    np.testing.assert_allclose(tl_probe, tl_text, rtol=1e-6)
    assert tl_probe[0, 0] == pytest.approx(s / n)
    expected = [tl_score(a[0, h].astype(np.float64), tl_patterns(ids)["induction"])
                for h in range(3)]
    np.testing.assert_allclose(tl_probe[0], expected, rtol=1e-6)
    # leaving out the BOS: rows renormalized, the offset moves by one
    keep = np.ones(n, bool)
    keep[0] = False
    restricted, _ = A.drop_positions(a, keep)
    np.testing.assert_allclose(A.induction_pattern_scores(a, s, 1, exclude=~keep),
                               A.induction_pattern_scores(restricted, s, 0), rtol=1e-7)
    with pytest.raises(InputError, match="outside the repeated"):
        A.induction_pattern_scores(a, s, 1, exclude=np.arange(n) == 3)


def test_several_inputs_and_inputs_without_repeats():
    a1 = uniform(4, causal=True)[None, None]
    a2 = rows((0, {0: 1}), (1, {0: 1}), (2, {0: .5, 1: .5}), n=3)[None, None]
    no_repeat, repeat = [1, 2, 3, 4], [5, 5, 6]
    # ours: the mean over the inputs that have a duplicated query; TL: over every input
    assert A.duplicate_token_scores([a1, a2], [no_repeat, repeat])[0, 0] == pytest.approx(1.0)
    assert A.duplicate_token_scores([a1, a2], [no_repeat, repeat],
                                    normalization="transformer_lens")[0, 0] == \
        pytest.approx((0 + 1 / 3) / 2)
    assert A.shifted_duplicate_scores(a1, no_repeat)[0, 0] == 0.0
    # back to back: "5 5": the second 5's target is itself (j + 1 = i), as in TransformerLens
    assert A.shifted_duplicate_scores(a2, repeat)[0, 0] == pytest.approx(0.0)
    b = rows((0, {0: 1}), (1, {1: 1}), (2, {2: 1}), n=3)[None, None]
    assert A.shifted_duplicate_scores(b, repeat)[0, 0] == pytest.approx(1.0)
    # previous token with one exclusion mask per input
    masks = [np.array([True, False, False, False]), np.array([False, False, False])]
    expected = np.mean([A.previous_token_scores(a1, exclude=masks[0]),
                        A.previous_token_scores(a2)], axis=0)
    np.testing.assert_allclose(A.previous_token_scores([a1, a2], exclude=masks), expected)


# --------------------------------------------------------------------------- the probe


def probe_formula(arch, sequences, s, offset, drop_special=False, transformer_lens=False):
    """Olsson et al.'s score on the fake model's maps of each sequence (docs/analyses.md),
    averaged over the sequences: A[s + k, k + 1] counted after the prefix, over the second
    copy's first s - 1 queries (ours: their mean) or all s (TransformerLens: their sum / T).
    drop_special: only R R kept, each row renormalized over it."""
    per_sequence = []
    for ids in sequences:
        a = FakeModel(arch).trace_ids(list(ids)).attentions.astype(np.float64)
        start = offset
        if drop_special:
            kept = np.arange(offset, offset + 2 * s)
            a = a[..., kept, :][..., kept]
            a = a / a.sum(-1, keepdims=True)
            start = 0
        queries = range(s if transformer_lens else s - 1)
        picked = np.stack([a[..., start + s + k, start + k + 1] for k in queries], axis=-1)
        per_sequence.append(picked.sum(-1) / a.shape[-1] if transformer_lens
                            else picked.mean(-1))
    return np.mean(per_sequence, axis=0)


@pytest.mark.parametrize("arch", ["gpt2", "bert"])
def test_induction_probe_keeps_every_variant_and_the_first_trace(arch):
    model = FakeModel(arch)
    done = []
    probe = A.induction_probe(model, seq_len=12, n_seqs=3, seed=5,
                              progress=lambda i, total: done.append((i, total)))
    assert done == [(1, 3), (2, 3), (3, 3)]
    assert probe.description == "repeated random tokens, seq_len 12, seed 5, 3 sequences"
    assert A.probe_description(50, 1, 0) == "repeated random tokens, seq_len 50, seed 0, 1 sequence"
    assert probe.offset == 1 and len(probe.ids) == 3 and probe.trace.token_ids == probe.ids[0]
    n = len(probe.ids[0])
    assert n == (25 if arch == "gpt2" else 26)
    np.testing.assert_allclose(A.induction_scores(FakeModel(arch), 12, 3, 5),
                               probe_formula(arch, probe.ids, 12, probe.offset), rtol=1e-6)
    # the exact induction head (L1.H2): 1 ours; 12 of n rows with TransformerLens
    assert probe.scores()[1, 2] == pytest.approx(1.0)
    assert probe.scores("transformer_lens")[1, 2] == pytest.approx(12 / n)
    assert probe.scores("transformer_lens", drop_special=True)[1, 2] == pytest.approx(12 / 24)
    # every other head is uniform: exactly the probe's uniform floor
    assert probe.scores()[0, 0] == pytest.approx(probe.uniform_score())
    assert probe.scores(drop_special=True)[0, 1] == pytest.approx(
        probe.uniform_score(drop_special=True))
    assert probe.scores("transformer_lens")[0, 0] == pytest.approx(
        probe.uniform_score("transformer_lens"))
    keep = probe.keep_mask()
    assert keep.sum() == 24 and not keep[0] and probe.keep_mask(False).all()
    assert (keep[-1] if arch == "gpt2" else not keep[-1])
    np.testing.assert_allclose(
        A.induction_scores(FakeModel(arch), 12, 3, 5, drop_special=True,
                           normalization="transformer_lens"),
        probe_formula(arch, probe.ids, 12, probe.offset, drop_special=True,
                      transformer_lens=True), rtol=1e-6)
    with pytest.raises(InputError):
        A.induction_probe(model, seq_len=12, n_seqs=1, seed=-1)


# --------------------------------------------------------------------------- role_scores


def test_role_scores_of_a_trace():
    trace = bert_trace()
    scores = A.role_scores(trace)
    assert set(scores) == set(A.ROLE_KEYS) - {"induction (probe)"}
    # rows 1..4 of head 0 give 1, .5, .5, .5 to their previous token; uniform: 1 / 5
    np.testing.assert_allclose(scores["previous token"][0], [2.5 / 4, 1 / 5], rtol=1e-6)
    np.testing.assert_allclose(scores["first token"][0], [(1 + 1 + .5 * 3) / 5, 1 / 5])
    np.testing.assert_allclose(scores["[SEP]"][0], [0.0, 1 / 5], atol=1e-7)
    # normalized entropy: head 0's rows 2..4 split in halves (ln 2 / ln 5 each), rows 0 and
    # 1 one-hot (0); uniform: 1
    np.testing.assert_allclose(scores["entropy"][0], [3 * np.log(2) / np.log(5) / 5, 1.0],
                               rtol=1e-5)
    dropped = A.role_scores(trace, drop_special=True, normalization="transformer_lens")
    np.testing.assert_allclose(dropped["previous token"][0], [2 / 3, 1 / 3 * 2 / 3], rtol=1e-6)
    # the sinks are measured on every token, whatever is left out
    np.testing.assert_allclose(dropped["first token"], scores["first token"])
    # entropy on the kept tokens: head 1 stays uniform (1), head 0's rows b, c are one-hot
    # (0) and row a is empty (left out): 0
    np.testing.assert_allclose(dropped["entropy"][0], [0.0, 1.0], atol=1e-6)
    with pytest.raises(InputError):
        A.role_scores([trace, trace])


# --------------------------------------------------------------------------- strongest role


def grid(**cells):
    """[2, 3] maps: cells like previous_token={(0, 1): 0.9}; every other value 0."""
    out = {}
    for key, values in cells.items():
        m = np.zeros((2, 3))
        for (layer, head), v in values.items():
            m[layer, head] = v
        out[key.replace("_", " ").replace("induction probe", "induction (probe)")
            .replace("induction text", "induction (text)").replace("first", "first token")
            .replace("sep", "[SEP]")] = m
    return out


def test_strongest_role_rule():
    scores = grid(previous_token={(0, 0): 0.9, (0, 1): 0.45, (1, 2): 0.5},
                  duplicate_token={(0, 0): 0.6, (1, 2): 0.5},
                  induction_probe={(1, 0): 0.74},
                  induction_text={(1, 0): 0.80, (1, 1): 0.2},
                  first={(0, 0): 0.3, (0, 1): 0.7, (1, 0): 0.95, (1, 1): 0.49, (0, 2): 0.51},
                  sep={(0, 2): 0.6},
                  entropy={(0, 0): 0.2, (0, 1): 0.1, (0, 2): 0.5, (1, 0): 0.1, (1, 1): 0.85,
                           (1, 2): 0.5})
    probe = "repeated random tokens, seq_len 50, seed 0, 5 sequences"
    roles = A.strongest_roles(scores, {"induction (probe)": probe}, order="head")
    by = {r.name: r for r in roles}
    assert [r.name for r in roles] == ["L0.H0", "L0.H1", "L0.H2", "L1.H0", "L1.H1", "L1.H2"]
    # 1. the highest pattern score >= 0.5
    assert (by["L0.H0"].role, by["L0.H0"].score, by["L0.H0"].probe) == \
        ("previous token", 0.9, "the text")
    assert by["L0.H0"].also == "duplicate token 0.60"
    # both induction scores name "induction"; the higher one (the text) and its probe win,
    # before the larger sink mass
    assert (by["L1.H0"].role, by["L1.H0"].score, by["L1.H0"].probe) == \
        ("induction", 0.80, "the text")
    assert by["L1.H0"].also == "sink: first token 0.95; induction 0.74 (probe)"
    # a tie goes to the earlier role in PATTERN_ROLES
    assert by["L1.H2"].role == "previous token" and by["L1.H2"].score == 0.5
    # 2. no pattern role: the larger sink
    assert (by["L0.H1"].role, by["L0.H1"].score) == ("sink: first token", 0.7)
    assert (by["L0.H2"].role, by["L0.H2"].score) == ("sink: [SEP]", 0.6)
    # 3. neither: the normalized entropy
    assert (by["L1.H1"].role, by["L1.H1"].score) == ("broad", 0.85)
    focused = A.strongest_roles({"entropy": np.array([[0.1, 0.5, np.nan]])}, order="head")
    assert [(r.role, round(r.score, 6)) for r in focused[:2]] == [("focused", 0.9),
                                                                  ("mixed", 0.5)]
    assert focused[2].role == "mixed" and np.isnan(focused[2].score)
    # sorted by tier (pattern, sink, broad / focused, mixed), then score
    ranked = A.strongest_roles(scores, {"induction (probe)": probe})
    assert [r.name for r in ranked] == ["L0.H0", "L1.H0", "L1.H2", "L0.H1", "L0.H2", "L1.H1"]
    # the probe column names the probe when it gave the role; BERT's first token is [CLS]
    only_probe = A.strongest_roles({"induction (probe)": scores["induction (probe)"],
                                    "first token": scores["first token"]},
                                   {"induction (probe)": probe}, first_token_name="[CLS]")
    assert (only_probe[0].name, only_probe[0].probe) == ("L1.H0", probe)
    assert only_probe[1].role == "sink: [CLS]"
    assert only_probe[0].as_dict()["head"] == "L1.H0"
    # thresholds are parameters
    strict = A.strongest_roles(scores, threshold=0.85, order="head")
    assert [r.role for r in strict][:4] == ["previous token", "focused", "mixed", "sink: first token"]
    with pytest.raises(InputError, match="unknown role"):
        A.strongest_roles({"prev": np.zeros((1, 1))})
    with pytest.raises(InputError):
        A.strongest_roles({"entropy": np.zeros((2, 2)), "[SEP]": np.zeros((2, 3))})
    with pytest.raises(InputError):
        A.strongest_roles(scores, order="random")
