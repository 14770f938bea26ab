"""Per-head statistics of on-demand traces (issue 12): streamed over blocks of query rows (or
the compared rows gathered), equal to the same statistics of the full trace (< 1e-6), and never
asking for all the maps (trace.attentions) nor for any block bigger than BLOCK_ELEMENTS."""

import itertools

import numpy as np
import pytest

from mha_viz import analysis as A
from mha_viz.analysis import similarity
from mha_viz.core.errors import InputError
from mha_viz.maps import ondemand
from mha_viz.maps import trace as trace_module
from mha_viz.maps.ondemand import MapsTooLargeError, OnDemandMaps
from mha_viz.maps.trace import AttentionTrace

TEXT = ("The committee met on Tuesday; it voted 7-2 to approve the budget, and the mayor "
        "thanked everyone. ") * 32
N_TOKENS = 700  # > 600: with BLOCK below, about 19 blocks of rows per layer
BLOCK = 4 * N_TOKENS * 37  # elements of one block across a layer's 4 heads: 37 rows
FAMILIES = ["gpt2", "bert", "llama"]


@pytest.fixture(scope="module")
def pairs(long_models):
    """(full trace, on-demand trace) of the long text per family, and a shorter pair."""
    found = {}
    for family, model in long_models.items():
        for tokens in (N_TOKENS, 640):
            full = model.trace(TEXT, max_tokens=tokens, maps="full")
            lazy = model.trace(TEXT, max_tokens=tokens, maps="on_demand")
            assert lazy.on_demand and not full.on_demand and full.n_tokens == tokens
            found[family, tokens] = (full, lazy)
    return found


@pytest.fixture(autouse=True)
def streamed_only(monkeypatch):
    """Small blocks (many per layer); any materialisation of all maps fails, and every block
    the maps are asked for is recorded: [(heads, rows, T)]."""
    monkeypatch.setattr(ondemand, "BLOCK_ELEMENTS", BLOCK)
    monkeypatch.setattr(trace_module, "MATERIALISE_MAX_BYTES", 1)

    def refuse(self, max_bytes):
        raise AssertionError("a statistic asked an on-demand trace for all its maps")

    monkeypatch.setattr(OnDemandMaps, "materialise", refuse)
    asked = []
    weights = OnDemandMaps._weights

    def recording(self, layer, heads, rows):
        asked.append((len(heads), len(rows), self.n_tokens))
        return weights(self, layer, heads, rows)

    monkeypatch.setattr(OnDemandMaps, "_weights", recording)
    yield asked
    # Never a whole layer: each request at most one block's elements.
    assert all(h * r * t <= BLOCK for h, r, t in asked), max(h * r * t for h, r, t in asked)


def same(expected, found):
    """Equal within 1e-6 (NaN where NaN), through dicts."""
    if isinstance(expected, dict):
        assert expected.keys() == found.keys()
        for key in expected:
            same(expected[key], found[key])
        return
    expected, found = np.asarray(expected), np.asarray(found)
    assert expected.shape == found.shape
    np.testing.assert_allclose(found, expected, atol=1e-6, rtol=0, equal_nan=True)


def some_positions(n, seed, fraction):
    return np.random.default_rng(seed).random(n) < fraction


@pytest.mark.parametrize("family", FAMILIES)
def test_entropy_streams_over_row_blocks(pairs, family, streamed_only):
    full, lazy = pairs[family, N_TOKENS]
    valid = ~some_positions(full.n_tokens, 1, 0.15)
    for normalized, smoothing, causal, mask in itertools.product(
            (False, True), (0.0, 1e-4), (None, True, False), (None, valid)):
        options = dict(normalized=normalized, smoothing=smoothing, causal=causal,
                       valid_mask=mask)
        same(A.row_entropy(full, **options), A.row_entropy(lazy, **options))
        same(A.entropy(full, **options), A.entropy(lazy, **options))
    assert streamed_only  # the maps were read, a block at a time
    # Several texts (lengths differ), on-demand and full mixed.
    short_full, short_lazy = pairs[family, 640]
    for normalized in (False, True):
        expected = A.entropy([full, short_full], normalized=normalized)
        same(expected, A.entropy([lazy, short_lazy], normalized=normalized))
        same(expected, A.entropy([lazy, short_full], normalized=normalized))
    masks = [valid, np.ones(640, bool)]
    same(A.entropy([full, short_full], valid_mask=masks),
         A.entropy([lazy, short_lazy], valid_mask=masks))


@pytest.mark.parametrize("family", FAMILIES)
def test_token_class_mass_streams(pairs, family):
    full, lazy = pairs[family, N_TOKENS]
    short_full, short_lazy = pairs[family, 640]
    same(A.token_class_mass(full), A.token_class_mass(lazy))
    same(A.token_class_mass([full, short_full]), A.token_class_mass([lazy, short_full]))
    assert A.token_class_mass(lazy)["punctuation"].min() > 0.01  # not trivially 0


@pytest.mark.parametrize("family", FAMILIES)
def test_role_scores_stream(pairs, family):
    full, lazy = pairs[family, N_TOKENS]
    short_full, short_lazy = pairs[family, 640]
    left_out = some_positions(full.n_tokens, 2, 0.1)
    if family == "bert":
        assert full.special_mask.any()  # [CLS] and [SEP] to drop
    for normalization, drop_special, exclude in itertools.product(
            ("ours", "transformer_lens"), (False, True), (None, left_out)):
        options = dict(normalization=normalization, drop_special=drop_special,
                       exclude=exclude)
        same(A.role_scores(full, **options), A.role_scores(lazy, **options))
        both = dict(options, exclude=None if exclude is None else [exclude, exclude[:640]])
        for score in (A.previous_token_scores, A.next_token_scores, A.duplicate_token_scores,
                      A.shifted_duplicate_scores):
            same(score(full, **options), score(lazy, **options))
            same(score([full, short_full], **both), score([lazy, short_lazy], **both))
        same(A.duplicate_token_scores(full, include_later=True, **options),
             A.duplicate_token_scores(lazy, include_later=True, **options))
        support = dict(drop_special=drop_special, exclude=exclude)
        assert A.role_support(full, **support) == A.role_support(lazy, **support)
    # Precomputed mass and entropy are used as they are (as corpus statistics give them).
    mass = A.token_class_mass(full)
    normalized = A.entropy(full, normalized=True)
    same(A.role_scores(full, mass=mass, entropy_normalized=normalized),
         A.role_scores(lazy, mass=mass, entropy_normalized=normalized))
    # The text repeats: the duplicate and induction scores rest on many rows.
    assert A.role_support(lazy)["duplicate token"] > full.n_tokens // 2


@pytest.mark.parametrize("family", FAMILIES)
def test_head_distances_gather_the_compared_rows(pairs, family):
    full, lazy = pairs[family, N_TOKENS]
    short_full, short_lazy = pairs[family, 640]
    valid = ~some_positions(full.n_tokens, 3, 0.1)
    for max_rows, mask, smoothing in itertools.product((None, 3, 40), (None, valid),
                                                       (1e-3, 0.0)):
        options = dict(max_rows=max_rows, valid_mask=mask, smoothing=smoothing)
        same(A.head_distances(full, **options), A.head_distances(lazy, **options))
    same(A.head_distances(full, kind="js_distance", max_rows=40),
         A.head_distances(lazy, kind="js_distance", max_rows=40))
    same(A.head_distances([full, short_full], max_rows=40),
         A.head_distances([lazy, short_lazy], max_rows=40))


def test_head_distances_on_every_row_of_a_long_input_ask_for_max_rows(pairs, monkeypatch):
    _, lazy = pairs["gpt2", N_TOKENS]
    monkeypatch.setattr(similarity, "STREAMED_SIMILARITY_WORK", 1e6)
    with pytest.raises(InputError, match="max_rows="):
        A.head_distances(lazy)
    assert A.head_distances(lazy, max_rows=10).shape == (8, 8)


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_head_mean_and_max_of_a_layer_and_a_window(pairs, family, monkeypatch):
    full, lazy = pairs[family, N_TOKENS]
    # Room for one layer's mean (float64 [T, T]), not for every layer's.
    monkeypatch.setattr(trace_module, "MATERIALISE_MAX_BYTES", 12 * N_TOKENS ** 2)
    for aggregate in (A.head_mean, A.head_max):
        same(aggregate(full, layer=1), aggregate(lazy, layer=1))
        window = aggregate(lazy, layer=0, start=100, stop=350)
        assert window.shape == (250, full.n_tokens)
        same(aggregate(full)[0, 100:350], window)
        same(aggregate(full, start=5, stop=9), aggregate(lazy, start=5, stop=9))
        # Every layer at once: only when it fits, as trace.attentions.
        with pytest.raises(MapsTooLargeError, match="layer="):
            aggregate(lazy)
    monkeypatch.setattr(trace_module, "MATERIALISE_MAX_BYTES", 1 << 30)
    same(A.head_mean(full), A.head_mean(lazy))
    same(A.head_mean([full, full]), A.head_mean([lazy, full]))
    with pytest.raises(InputError):
        A.head_mean(lazy, layer=2)


def test_streaming_reports_progress_and_can_be_stopped(pairs):
    full, lazy = pairs["bert", N_TOKENS]
    rows = lazy.n_layer * lazy.n_tokens
    for compute, total in ((A.entropy, rows), (A.token_class_mass, rows), (A.role_scores, rows),
                           (lambda trace, **k: A.head_distances(trace, max_rows=50, **k), 50)):
        calls = []  # (query rows read, of how many): after each block or group of rows
        compute(lazy, progress=lambda done, total: calls.append((done, total)))
        assert len(calls) > 2 and calls[-1] == (total, total)
    calls = []
    A.entropy([lazy, full, lazy], progress=lambda done, total: calls.append((done, total)))
    # every input is read the same way, a block of rows at a time: all three count
    assert calls[-1] == (3 * rows, 3 * rows)

    class Stop(Exception):
        pass

    def stop(done, total):
        raise Stop

    with pytest.raises(Stop):
        A.entropy(lazy, progress=stop)


def test_a_saved_long_trace_streams_too(pairs):
    full, lazy = pairs["llama", N_TOKENS]
    loaded = AttentionTrace.load(lazy.to_bytes())
    assert loaded.on_demand
    same(A.entropy(full, normalized=True), A.entropy(loaded, normalized=True))
    same(A.role_scores(full, drop_special=True), A.role_scores(loaded, drop_special=True))


def test_rollout_reads_rows_and_says_when_its_layers_would_not_fit(pairs, monkeypatch):
    """Rollout multiplies whole [T, T] layers: it reads the heads' rows a block at a time
    (never all maps), and refuses with a message when its L float64 layers would not fit."""
    full, lazy = pairs["gpt2", N_TOKENS]
    with pytest.raises(MapsTooLargeError, match="layer="):
        A.rollout(lazy)
    monkeypatch.setattr(trace_module, "MATERIALISE_MAX_BYTES", 1 << 30)
    same(A.rollout(full), A.rollout(lazy))
    same(A.rollout(full, head_reduce="max"), A.rollout(lazy, head_reduce="max"))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("smoothing", [0.0, 1e-4])
def test_entropy_and_mass_in_one_pass(pairs, family, smoothing):
    full, lazy = pairs[family, N_TOKENS]
    calls = []
    both = A.entropy_and_mass(lazy, smoothing=smoothing,
                              progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (lazy.n_layer * lazy.n_tokens,) * 2
    same(A.entropy(full, smoothing=smoothing), both["entropy"])
    same(A.entropy(full, normalized=True, smoothing=smoothing), both["normalized"])
    same(A.token_class_mass(full), both["mass"])
    again = A.entropy_and_mass(full, smoothing=smoothing)  # a full trace: the ordinary way
    same(both["normalized"], again["normalized"])
