"""Array analyses (mha_viz.analysis): entropy, head similarity, clustering / MDS, rollout,
dropping positions. Hand-computed cases and independent reference implementations."""

import math

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon
from scipy.stats import entropy as scipy_entropy
from scipy.stats import spearmanr

from mha_viz.analysis import (cluster_order, drop_positions, entropy, head_distances, head_max,
                              head_mean, max_row_entropy, mds_2d, rollout, row_entropy,
                              uniform_entropy)
from mha_viz.core.errors import InputError
from mha_viz.maps.trace import AttentionTrace

LN2 = math.log(2)


def random_maps(shape, seed=0, causal=False, concentration=0.5):
    """Random attention [..., T, T] with rows summing to 1 (lower triangular if causal)."""
    rng = np.random.default_rng(seed)
    n = shape[-1]
    a = rng.dirichlet(np.full(n, concentration), size=shape[:-1])
    if causal:
        a = np.tril(a)
        a /= a.sum(-1, keepdims=True)
    return a.astype(np.float32)


def uniform_causal(n, lead=(1, 1)):
    a = np.tril(np.ones((n, n)))
    a /= a.sum(-1, keepdims=True)
    return np.broadcast_to(a, (*lead, n, n)).astype(np.float32)


def trace_of(attentions, causal):
    n = attentions.shape[-1]
    return AttentionTrace(tokens=[f"t{i}" for i in range(n)], token_ids=list(range(n)),
                          attentions=attentions, display_tokens=[f"t{i}" for i in range(n)],
                          special_mask=np.zeros(n, bool), segment_ids=np.zeros(n, int),
                          causal=causal)


# --- entropy -----------------------------------------------------------------------------------

def test_uniform_attention_gives_ln_n():
    n = 128
    a = np.full((2, 3, n, n), 1.0 / n, dtype=np.float32)
    assert uniform_entropy(128) == pytest.approx(4.852, abs=5e-4)
    np.testing.assert_allclose(row_entropy(a), math.log(n), rtol=1e-5)
    result = entropy(a)
    assert result.shape == (2, 3)
    np.testing.assert_allclose(result, math.log(n), rtol=1e-5)
    np.testing.assert_allclose(entropy(a, normalized=True), 1.0, rtol=1e-5)


def test_one_hot_gives_zero_and_smoothing_matches_clark_formula():
    n, s = 10, 1e-4
    a = np.zeros((1, 1, n, n), dtype=np.float32)
    a[..., :, 3] = 1.0  # every query looks at key 3 only
    np.testing.assert_allclose(entropy(a), 0.0, atol=1e-7)
    # A' = (1 - s) A + s / n: one entry (1 - s) + s / n, n - 1 entries s / n
    big, small = (1 - s) + s / n, s / n
    expected = -(big * math.log(big) + (n - 1) * small * math.log(small))
    np.testing.assert_allclose(entropy(a, smoothing=s), expected, rtol=2e-5)  # float32 work
    assert 0 < expected < 0.01


def test_row_entropy_matches_scipy_on_random_maps():
    a = random_maps((2, 2, 9, 9), seed=3)
    expected = scipy_entropy(a.astype(np.float64), axis=-1)
    np.testing.assert_allclose(row_entropy(a), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(entropy(a), expected.mean(-1), rtol=1e-5)


def test_normalized_entropy_of_uniform_causal_map_is_one_per_row():
    n = 12
    a = uniform_causal(n, (2, 2))
    rows = row_entropy(a, normalized=True)
    assert np.isnan(rows[..., 0]).all()  # a single visible key: excluded
    np.testing.assert_allclose(rows[..., 1:], 1.0, rtol=1e-5)
    np.testing.assert_allclose(entropy(a, normalized=True), 1.0, rtol=1e-5)
    # unnormalized: row i is ln(i + 1)
    np.testing.assert_allclose(row_entropy(a)[0, 0], np.log(np.arange(1, n + 1)), rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(max_row_entropy(n, causal=True), np.log(np.arange(1, n + 1)))
    np.testing.assert_allclose(max_row_entropy(n, causal=False), np.full(n, math.log(n)))


def test_explicit_causal_argument_beats_detection():
    n = 8
    a = uniform_causal(n)
    detected = row_entropy(a, normalized=True)
    forced = row_entropy(a, normalized=True, causal=False)  # divide by ln T instead
    np.testing.assert_allclose(detected[0, 0, 1:], 1.0, rtol=1e-5)
    np.testing.assert_allclose(forced[0, 0], np.log(np.arange(1, n + 1)) / math.log(n),
                               rtol=1e-5, atol=1e-7)
    # a trace's own flag is used when no argument is given
    from_trace = row_entropy(trace_of(a, causal=False), normalized=True)
    np.testing.assert_allclose(from_trace, forced, rtol=1e-6)
    # a bidirectional map is not mistaken for a causal one
    full = random_maps((1, 2, n, n), seed=1)
    np.testing.assert_allclose(row_entropy(full, normalized=True),
                               row_entropy(full) / math.log(n), rtol=1e-6)


def test_smoothing_on_causal_map_spreads_over_visible_keys():
    s = 0.1
    a = np.array([[1, 0, 0], [1, 0, 0], [0, 0, 1]], dtype=np.float32)[None, None]
    rows = row_entropy(a, smoothing=s, causal=True)[0, 0]
    assert rows[0] == pytest.approx(0.0, abs=1e-12)  # one visible key: p' = 1

    def h(p):
        p = np.asarray(p)
        return -(p * np.log(p)).sum()

    assert rows[1] == pytest.approx(h([0.9 + 0.05, 0.05]), rel=1e-6)
    assert rows[2] == pytest.approx(h([0.1 / 3, 0.1 / 3, 0.9 + 0.1 / 3]), rel=1e-6)


def test_valid_mask_ignores_padding_rows_and_keys():
    n_valid, n = 4, 6
    a = np.zeros((1, 2, n, n), dtype=np.float32)
    a[..., :n_valid, :n_valid] = 1.0 / n_valid  # real tokens: uniform over real tokens
    a[..., n_valid:, :] = np.eye(n)[n_valid:]  # padding rows: one-hot (entropy 0)
    mask = np.arange(n) < n_valid
    np.testing.assert_allclose(entropy(a), 2 / 3 * math.log(n_valid), rtol=1e-5)
    np.testing.assert_allclose(entropy(a, valid_mask=mask), math.log(n_valid), rtol=1e-5)
    np.testing.assert_allclose(entropy(a, valid_mask=mask, normalized=True), 1.0, rtol=1e-5)
    # weight given to a padding key is dropped and the row renormalized over real keys
    b = a.copy()
    b[..., :n_valid, :] = np.r_[np.full(n_valid, 0.5 / n_valid), 0.5, 0.0]
    np.testing.assert_allclose(entropy(b, valid_mask=mask), math.log(n_valid), rtol=1e-5)


def test_entropy_of_several_inputs_is_the_mean():
    a = np.full((1, 1, 4, 4), 0.25, dtype=np.float32)
    b = np.full((1, 1, 9, 9), 1 / 9, dtype=np.float32)
    np.testing.assert_allclose(entropy([a, b]), (math.log(4) + math.log(9)) / 2, rtol=1e-5)
    with pytest.raises(InputError):
        entropy([])
    with pytest.raises(InputError):
        entropy(np.ones((2, 3, 4)))


# --- head similarity ---------------------------------------------------------------------------

def reference_distances(attentions, smoothing, rows=None):
    """Straightforward per-row loop with scipy's JS distance (squared, base e)."""
    flat = attentions.reshape(-1, attentions.shape[-2], attentions.shape[-1]).astype(np.float64)
    n = flat.shape[-1]
    flat = (1 - smoothing) * flat + smoothing / n
    rows = range(n) if rows is None else rows
    size = flat.shape[0]
    out = np.zeros((size, size))
    for a in range(size):
        for b in range(size):
            out[a, b] = np.mean([jensenshannon(flat[a, i], flat[b, i]) ** 2 for i in rows])
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("smoothing", [1e-3, 0.0])
def test_head_distances_match_scipy_reference(causal, smoothing):
    a = random_maps((3, 2, 11, 11), seed=5, causal=causal, concentration=0.3)
    d = head_distances(a, smoothing=smoothing)
    ref = reference_distances(a, smoothing)
    assert d.shape == (6, 6)
    np.testing.assert_allclose(d, ref, atol=2e-6)
    assert d[np.triu_indices(6, 1)].min() > 0.01  # real, nonzero numbers
    np.testing.assert_allclose(head_distances(a, kind="js_distance", smoothing=smoothing),
                               np.sqrt(ref), atol=1e-5)


def test_head_distances_properties_and_bounds():
    a = random_maps((4, 3, 16, 16), seed=7, concentration=0.2)
    d = head_distances(a)
    np.testing.assert_array_equal(d, d.T)
    np.testing.assert_array_equal(np.diag(d), 0.0)
    assert (d >= 0).all() and (d <= LN2).all()
    # heads with disjoint one-hot rows come close to the ln 2 bound
    n = 20
    b = np.zeros((1, 2, n, n), dtype=np.float32)
    b[0, 0, :, 0] = 1.0
    b[0, 1, :, 1] = 1.0
    far = head_distances(b)[0, 1]
    assert far == pytest.approx(reference_distances(b, 1e-3)[0, 1], abs=1e-6)
    assert LN2 - 0.02 < far < LN2


def test_head_index_is_layer_major():
    a = random_maps((2, 2, 6, 6), seed=2)
    a[1, 0] = a[0, 1]  # head 1.0 (index 2) copies head 0.1 (index 1)
    d = head_distances(a)
    assert d[1, 2] == pytest.approx(0.0, abs=1e-6)
    assert d[0, 2] > 0.05 and d[1, 3] > 0.05


def test_max_rows_uses_evenly_spaced_rows():
    a = random_maps((2, 2, 9, 9), seed=11)
    d = head_distances(a, max_rows=3)  # rows 0, 4, 8
    np.testing.assert_allclose(d, reference_distances(a, 1e-3, rows=[0, 4, 8]), atol=2e-6)
    assert not np.allclose(d, head_distances(a), atol=1e-4)
    np.testing.assert_allclose(head_distances(a, max_rows=50), head_distances(a), atol=1e-12)


def test_a_corpus_segment_compares_one_row_drawn_from_each_stretch():
    """sampled_rows: one row from each of max_rows stretches of equal length, the same for the
    same segment, different across segments, and over many segments every position drawn
    equally often (so the corpus mean estimates the mean over all rows; fixed evenly spaced
    rows would weigh the first and the last row in every segment)."""
    from mha_viz.analysis.similarity import sampled_rows

    ids = [5, 17, 3, 99, 42, 8, 1, 0, 7, 64]
    rows = sampled_rows(10, 3, ids)
    assert len(rows) == 3 and list(rows) == sorted(set(rows))
    assert [0 <= rows[0] < 3, 3 <= rows[1] < 6, 6 <= rows[2] < 10] == [True] * 3
    np.testing.assert_array_equal(sampled_rows(10, 3, list(ids)), rows)  # same segment
    np.testing.assert_array_equal(sampled_rows(10, None, ids), np.arange(10))
    np.testing.assert_array_equal(sampled_rows(10, 12, ids), np.arange(10))
    with pytest.raises(InputError, match="max_rows"):
        sampled_rows(10, 0, ids)
    rng = np.random.default_rng(0)
    draws = np.concatenate([sampled_rows(12, 3, rng.integers(0, 50_000, 12))
                            for _ in range(3000)])
    counts = np.bincount(draws, minlength=12)  # each position: 3000 / 4 expected
    assert counts.sum() == 9000 and (np.abs(counts - 750) < 5 * np.sqrt(750 * 0.75)).all()


def test_valid_mask_and_several_inputs():
    n, n_valid = 8, 5
    a = random_maps((2, 2, n, n), seed=4)
    mask = np.arange(n) < n_valid
    sliced = a[..., :n_valid, :n_valid]
    sliced = sliced / sliced.sum(-1, keepdims=True)
    np.testing.assert_allclose(head_distances(a, valid_mask=mask),
                               reference_distances(sliced, 1e-3), atol=2e-6)
    b = random_maps((2, 2, 5, 5), seed=9)
    mean = (reference_distances(a, 1e-3) + reference_distances(b, 1e-3)) / 2
    np.testing.assert_allclose(head_distances([a, b]), mean, atol=2e-6)
    np.testing.assert_allclose(head_distances([a, b], kind="js_distance"), np.sqrt(mean),
                               atol=1e-5)


def test_head_distances_threads_agree():
    a = random_maps((2, 3, 40, 40), seed=8, causal=True)
    np.testing.assert_allclose(head_distances(a, n_threads=1), head_distances(a, n_threads=3),
                               atol=1e-10)


def test_cluster_order_groups_obvious_clusters():
    rng = np.random.default_rng(0)
    points = np.r_[rng.normal(0, 0.1, (5, 2)), rng.normal(10, 0.1, (4, 2))]
    shuffle = rng.permutation(9)
    points = points[shuffle]
    cluster = (shuffle >= 5).astype(int)  # which blob each shuffled point came from
    d = np.linalg.norm(points[:, None] - points[None], axis=-1)
    order = cluster_order(d)
    assert sorted(order.tolist()) == list(range(9))
    labels = cluster[order]
    assert (np.diff(labels) != 0).sum() == 1  # one contiguous block per cluster


def test_many_heads_keep_the_linkage_order_and_their_clusters():
    """Above OPTIMAL_ORDER_MAX_HEADS the leaves are not reordered optimally (that costs
    minutes for thousands of heads): the order is the linkage's own, clusters still blocks."""
    from scipy.cluster.hierarchy import leaves_list, linkage
    from scipy.spatial.distance import pdist

    from mha_viz.analysis.similarity import OPTIMAL_ORDER_MAX_HEADS

    rng = np.random.default_rng(4)
    n = OPTIMAL_ORDER_MAX_HEADS + 40
    shuffle = rng.permutation(n)
    points = np.r_[rng.normal(0, 0.1, (n // 2, 2)), rng.normal(10, 0.1, (n - n // 2, 2))]
    points = points[shuffle]
    d = np.linalg.norm(points[:, None] - points[None], axis=-1)
    order = cluster_order(d)
    np.testing.assert_array_equal(order, leaves_list(linkage(pdist(points), "average")))
    labels = (shuffle >= n // 2).astype(int)[order]
    assert (np.diff(labels) != 0).sum() == 1


def test_mds_recovers_planar_layout():
    rng = np.random.default_rng(1)
    points = rng.uniform(0, 5, (12, 2))
    d = np.linalg.norm(points[:, None] - points[None], axis=-1)
    x = mds_2d(d)
    assert x.shape == (12, 2)
    fitted = np.linalg.norm(x[:, None] - x[None], axis=-1)
    iu = np.triu_indices(12, 1)
    np.testing.assert_allclose(fitted[iu], d[iu], atol=1e-5)  # exact up to a rigid motion
    np.testing.assert_allclose(x.mean(0), 0.0, atol=1e-9)
    np.testing.assert_array_equal(mds_2d(d, seed=3), x)  # deterministic


def test_mds_preserves_distance_order_on_noisy_non_euclidean_input():
    rng = np.random.default_rng(2)
    line = np.sort(rng.uniform(0, 10, 10))
    d = np.abs(line[:, None] - line[None]) ** 0.8  # not exactly embeddable
    iu = np.triu_indices(10, 1)
    fitted = np.linalg.norm(mds_2d(d)[:, None] - mds_2d(d)[None], axis=-1)
    rho = spearmanr(fitted[iu], d[iu]).statistic
    assert rho > 0.98


def test_cluster_and_mds_on_head_distances():
    # two groups of heads: focused on key 0 vs focused on the diagonal
    n = 10
    a = np.zeros((2, 3, n, n), dtype=np.float32)
    rng = np.random.default_rng(3)
    for layer in range(2):
        for head in range(3):
            base = np.eye(n)[0][None].repeat(n, 0) if (layer * 3 + head) % 2 == 0 else np.eye(n)
            noisy = 0.9 * base + 0.1 * rng.dirichlet(np.ones(n), size=n)
            a[layer, head] = noisy
    d = head_distances(a)
    order = cluster_order(d)
    labels = (order % 2)
    assert (np.diff(labels) != 0).sum() == 1
    x = mds_2d(d)
    even, odd = x[0::2], x[1::2]
    gap = np.linalg.norm(even.mean(0) - odd.mean(0))
    assert gap > 3 * max(np.linalg.norm(even - even.mean(0), axis=1).max(),
                         np.linalg.norm(odd - odd.mean(0), axis=1).max())


# --- rollout -----------------------------------------------------------------------------------

def test_rollout_of_identity_maps_is_identity():
    n = 5
    a = np.broadcast_to(np.eye(n, dtype=np.float32), (3, 2, n, n))
    np.testing.assert_allclose(rollout(a), np.eye(n), atol=1e-12)


def test_rollout_causal_is_lower_triangular_with_unit_rows():
    a = random_maps((4, 3, 7, 7), seed=6, causal=True, concentration=2.0)
    r = rollout(a)
    assert r.shape == (7, 7)
    np.testing.assert_allclose(np.triu(r, 1), 0.0, atol=0)
    np.testing.assert_allclose(r.sum(-1), 1.0, rtol=1e-10)
    assert (r[np.tril_indices(7)] > 0).all()  # every earlier token contributes something


def test_rollout_hand_computed_two_layers():
    layer0 = [[[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]]  # head mean m0
    layer1 = [[[0.4, 0.6], [1.0, 0.0]], [[0.0, 1.0], [1.0, 0.0]]]  # head mean m1
    a = np.array([layer0, layer1], dtype=np.float32)
    m0 = np.array([[1.0, 0.0], [0.5, 0.5]])
    m1 = np.array([[0.2, 0.8], [1.0, 0.0]])
    # M' = 0.5 M + 0.5 I
    p0 = np.array([[1.0, 0.0], [0.25, 0.75]])
    p1 = np.array([[0.6, 0.4], [0.5, 0.5]])
    np.testing.assert_allclose(rollout(a), p1 @ p0, rtol=1e-6)
    np.testing.assert_allclose(rollout(a, return_all=True), np.stack([p0, p1 @ p0]), rtol=1e-6)
    np.testing.assert_allclose(rollout(a, residual_weight=0.0), m1 @ m0, rtol=1e-6)


def test_head_mean_and_max():
    a = random_maps((2, 4, 5, 5), seed=1)
    np.testing.assert_allclose(head_mean(a), a.mean(1), rtol=1e-6)
    np.testing.assert_allclose(head_mean(a).sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(head_max(a), a.max(1), rtol=1e-6)
    r_max = rollout(a, head_reduce="max")
    np.testing.assert_allclose(r_max.sum(-1), 1.0, rtol=1e-10)  # rows renormalized
    with pytest.raises(InputError):
        rollout(a, head_reduce="median")
    with pytest.raises(InputError):
        rollout(a[0])


# --- dropping positions ------------------------------------------------------------------------

def test_drop_positions_renormalizes_rows():
    a = np.array([[0.5, 0.25, 0.25, 0.0],
                  [0.2, 0.2, 0.2, 0.4],
                  [1.0, 0.0, 0.0, 0.0],
                  [0.1, 0.6, 0.2, 0.1]], dtype=np.float32)[None, None]
    keep = np.array([False, True, True, True])
    dropped, kept = drop_positions(a, keep)
    np.testing.assert_array_equal(kept, [1, 2, 3])
    assert dropped.shape == (1, 1, 3, 3) and dropped.dtype == np.float32
    expected = np.array([np.array([0.2, 0.2, 0.4]) / 0.8,
                         [0.0, 0.0, 0.0],  # all its mass was on the dropped key: stays 0
                         np.array([0.6, 0.2, 0.1]) / 0.9])
    np.testing.assert_allclose(dropped[0, 0], expected, rtol=1e-6)
    with pytest.raises(InputError):
        drop_positions(a, keep[:3])


def test_head_helpers_the_pages_use():
    import numpy as np
    import pytest

    from mha_viz import InputError
    from mha_viz.analysis import nearest_heads, normalize_layers, parse_head_name, rank_heads

    assert parse_head_name(" l3.h7 ") == (3, 7)
    for bad in ("L3", "3.7", "La.H1", "H1.L3"):
        with pytest.raises(InputError):
            parse_head_name(bad)
    values = np.array([[0.5, np.nan], [2.0, 0.5]])
    assert rank_heads(values) == [(1, 0), (0, 0), (1, 1)]  # ties in layer-major order
    assert rank_heads(values, descending=False) == [(0, 0), (1, 1), (1, 0)]
    d = np.array([[0, 3, 1], [3, 0, 2], [1, 2, 0]], dtype=float)
    assert nearest_heads(d, 0, 5) == [2, 1] and nearest_heads(d, 1, 1) == [2]
    out = normalize_layers(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert np.allclose(out, [[0.6, 0.8], [0.0, 0.0]])


def test_dropping_positions_renormalizes_a_row_with_a_tiny_kept_mass():
    """A float32 row that kept 1e-40 of its mass: renormalized to sum to 1, no overflow."""
    import warnings

    from mha_viz.analysis import drop_positions

    maps = np.zeros((1, 1, 2, 2), dtype=np.float32)
    maps[..., 0, 0] = 1.0
    maps[..., 1, :] = [1.0, 1e-40]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept, _ = drop_positions(maps, np.array([False, True]))
    assert kept.dtype == np.float32 and kept[0, 0, 0, 0] == 1.0


def test_one_heads_row_entropy_from_a_trace_whole_or_rebuilt(gpt2_model):
    """The Entropy page's per-query line: -sum_j a_ij ln a_ij of one head's rows (written
    out here), read from a trace that holds its maps, one that rebuilds them, or an array."""
    from mha_viz.analysis import head_row_entropy

    text = "The cat sat on the mat because it was tired of standing."
    whole, lazy = gpt2_model.trace(text), gpt2_model.trace(text, maps="on_demand")
    rows = whole.attentions[1, 2].astype(np.float64)
    expected = np.array([-sum(a * np.log(a) for a in row if a > 0) for row in rows])
    for maps in (whole, lazy, whole.attentions):
        np.testing.assert_allclose(head_row_entropy(maps, 1, 2), expected, atol=1e-5)
    visible = np.arange(1, len(rows) + 1)  # causal: row i sees i + 1 keys
    normalized = head_row_entropy(lazy, 1, 2, normalized=True)
    np.testing.assert_allclose(normalized[1:], expected[1:] / np.log(visible[1:]), atol=1e-5)
    assert np.isnan(normalized[0])
