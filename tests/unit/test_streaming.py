"""Sources, accumulators and the driver (mha_viz.maps.streaming, issue 25): entropy and token-class
mass read a block of query rows at a time from maps held whole, from maps rebuilt on demand
and from lists of traces, and equal the formulas of docs/analyses.md computed here from the
full [L, H, T, T] maps in float64; accumulators merge exactly, shards in any order."""

from __future__ import annotations

import numpy as np
import pytest

from mha_viz import analysis as A
from mha_viz.analysis.entropy import RowEntropy
from mha_viz.analysis.similarity import sampled_rows
from mha_viz.analysis.token_classes import ClassMass, token_class_masks
from mha_viz.maps import ondemand
from mha_viz.maps.streaming import MapsSource, RowBlock, accumulate, causal_width, source_of

TEXT = ("The committee met on Tuesday; it voted 7-2 to approve the budget, and the mayor "
        "thanked everyone. ") * 48
FAMILIES = ["gpt2", "bert", "llama"]


@pytest.fixture(scope="module")
def traces(long_models):
    """(whole trace, on-demand trace) of 1,000 tokens per family."""
    found = {}
    for family, model in long_models.items():
        whole = model.trace(TEXT, max_tokens=1000, maps="full")
        lazy = model.trace(TEXT, max_tokens=1000, maps="on_demand")
        assert lazy.on_demand and not whole.on_demand and whole.n_tokens == 1000
        found[family] = whole, lazy
    return found


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(ondemand, "BLOCK_ELEMENTS", 4 * 1000 * 53)  # 53 rows: 19 blocks a layer


def formula_entropy(maps: np.ndarray, causal: bool, normalized: bool) -> np.ndarray:
    """Mean over rows of -sum_j A_ij ln A_ij (float64), / ln(keys row i sees) if normalized
    (rows seeing one key left out)."""
    a = maps.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rows = -np.where(a > 0, a * np.log(a), 0.0).sum(axis=-1)
        if normalized:
            n = a.shape[-1]
            seen = np.arange(1, n + 1) if causal else np.full(n, n)
            rows = np.where(seen > 1, rows / np.log(seen), np.nan)
    return np.nanmean(rows, axis=-1)


def formula_mass(maps: np.ndarray, trace) -> dict:
    """(1/n) sum_i sum_{j in S(i)} A_ij for every class, from the masks [T, T]."""
    n = maps.shape[-1]
    return {name: (maps.astype(np.float64) * mask).sum(axis=(-1, -2)) / n
            for name, mask in token_class_masks(trace).items()}


def close(found, expected, atol=1e-6):
    if isinstance(expected, dict):
        assert found.keys() == expected.keys()
        for key in expected:
            close(found[key], expected[key], atol)
        return
    np.testing.assert_allclose(np.asarray(found), np.asarray(expected), atol=atol, rtol=0,
                               equal_nan=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_entropy_and_mass_equal_the_formulas_whole_and_on_demand(traces, family):
    whole, lazy = traces[family]
    maps = whole.attentions
    for normalized in (False, True):
        expected = formula_entropy(maps, whole.causal, normalized)
        close(A.entropy(whole, normalized=normalized), expected)
        close(A.entropy(lazy, normalized=normalized), expected)
        close(A.entropy(maps, normalized=normalized, causal=whole.causal), expected)
    mass = formula_mass(maps, whole)
    close(A.token_class_mass(whole), mass)
    close(A.token_class_mass(lazy), mass)
    for source in (whole, lazy, maps):  # both scales from one pass, as the Entropy page reads
        scales = A.entropy_scales(source, causal=whole.causal)
        close(scales["entropy"], formula_entropy(maps, whole.causal, False))
        close(scales["normalized"], formula_entropy(maps, whole.causal, True))
    both = A.entropy_and_mass(lazy)
    close(both["entropy"], formula_entropy(maps, whole.causal, False))
    close(both["normalized"], formula_entropy(maps, whole.causal, True))
    close(both["mass"], mass)
    # a list of traces, held whole and on demand: the mean over inputs
    close(A.entropy([whole, lazy]), formula_entropy(maps, whole.causal, False))


def test_one_head_and_other_leading_shapes_keep_their_shape(traces):
    whole, _ = traces["gpt2"]
    maps = whole.attentions
    close(A.entropy(maps[1, 2], causal=True), formula_entropy(maps[1, 2], True, False))
    close(A.entropy(maps[1], causal=True), formula_entropy(maps[1], True, False))
    assert A.row_entropy(maps[0, 0, :10, :10]).shape == (10,)
    stacked = np.stack([maps, maps])  # [2, L, H, T, T]
    close(A.entropy(stacked, causal=True), formula_entropy(stacked, True, False))


@pytest.mark.parametrize("family", FAMILIES)
def test_shards_of_rows_merge_exactly_in_any_order(traces, family):
    _, lazy = traces[family]
    source = source_of(lazy)
    blocks = list(source.blocks())
    assert len(blocks) > 20 and all(b.owned for b in blocks)  # rows computed for this pass
    rng = np.random.default_rng(0)
    shard_of = rng.integers(0, 3, len(blocks))
    entropies, masses = [], []
    for shard in range(3):
        rows = RowEntropy.for_source(source)
        mass = ClassMass.for_source(lazy, source)
        for block, owner in zip(blocks, shard_of):
            if owner == shard:
                copy = RowBlock(block.layer, block.start, block.stop, block.rows.copy(), True)
                mass.update(copy)
                rows.update(copy)
        entropies.append(rows)
        masses.append(mass)
    order = rng.permutation(3)
    rows, mass = entropies[order[0]], masses[order[0]]
    for k in order[1:]:
        rows, mass = rows.merge(entropies[k]), mass.merge(masses[k])
    one_pass_rows = RowEntropy.for_source(source)
    one_pass_mass = ClassMass.for_source(lazy, source)
    accumulate(source, [one_pass_rows, one_pass_mass])
    np.testing.assert_array_equal(rows.result(), one_pass_rows.result())
    close(mass.result(), one_pass_mass.result(), atol=1e-12)
    with pytest.raises(Exception, match="before every row"):
        entropies[order[0]].__class__.for_source(source).result()


def test_the_driver_lets_readers_see_a_block_before_it_is_worked_in(traces):
    """RowEntropy works in the blocks it owns; the driver gives it each block after the mass
    has read it, whatever order the accumulators are given in."""
    _, lazy = traces["llama"]
    source = source_of(lazy)
    rows = RowEntropy.for_source(source)
    mass = ClassMass.for_source(lazy, source)
    accumulate(source, [rows, mass])
    close(mass.result(), A.token_class_mass(lazy), atol=1e-12)


def test_whole_maps_are_views_and_causal_blocks_leave_out_zero_keys():
    rng = np.random.default_rng(1)
    maps = np.tril(rng.random((1, 2, 600, 600))).astype(np.float32)
    maps /= maps.sum(-1, keepdims=True)
    source = MapsSource(maps, causal=True)
    blocks = list(source.blocks(max_elements=2 * 600 * 100))
    assert [(b.start, b.stop) for b in blocks][:2] == [(0, 100), (100, 200)]
    assert all(not b.owned and np.shares_memory(b.rows, maps) for b in blocks)
    assert blocks[0].width == causal_width(100, 600) == 256
    assert blocks[-1].width == 600  # the last, partial step of 256 keeps every key
    close(A.entropy(source), formula_entropy(maps, True, False))
    np.testing.assert_array_equal(maps, np.tril(maps))  # nothing was written in the maps


def formula_js(maps: np.ndarray, rows: np.ndarray, smoothing: float = 1e-3) -> np.ndarray:
    """Mean over the given rows of JS(p'_a, p'_b) between every two heads (float64), rows
    smoothed p' = (1 - s) p + s / n."""
    n = maps.shape[-1]
    p = maps.reshape(-1, n, n)[:, rows].astype(np.float64) * (1 - smoothing) + smoothing / n
    m = 0.5 * (p[:, None] + p[None, :])
    kl = lambda a, b: (a * np.log(a / b)).sum(-1)  # noqa: E731
    return (0.5 * kl(p[:, None], m) + 0.5 * kl(p[None, :], m)).mean(-1)


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_corpus_statistics_from_the_forward_equal_the_formulas(long_models, family):
    """corpus.run feeds each layer's maps of a padded batch to the accumulators as the
    forward makes them; its per-segment values equal the formulas on each segment's own full
    maps (traced alone)."""
    from mha_viz import corpus

    model = long_models[family]
    texts = ["The cat sat on the mat because it was warm and the dog slept.",
             "When Mary and John went to the store, John gave a drink to Mary.",
             "Short text here."]
    segments = corpus.segment(model, texts, seg_len=16, min_len=4)
    assert len({len(s) for s in segments.ids}) > 1  # padding in the batch
    found = corpus.run(model, segments, stats=("entropy", "mass", "roles", "similarity"),
                       similarity_rows=5)
    expected = {"entropy": [], "entropy_normalized": [], "mass first token": [],
                "mass previous": [], "role previous token": [], "js_divergence": []}
    for ids in segments.ids:
        trace = model.trace_ids(ids)
        maps, n = trace.attentions, trace.n_tokens
        expected["entropy"].append(formula_entropy(maps, trace.causal, False))
        expected["entropy_normalized"].append(formula_entropy(maps, trace.causal, True))
        expected["mass first token"].append(maps[..., :, 0].astype(np.float64).sum(-1) / n)
        expected["mass previous"].append(np.diagonal(maps, -1, -2, -1).sum(-1) / n)
        expected["role previous token"].append(np.diagonal(maps, -1, -2, -1).mean(-1))
        rows = sampled_rows(n, 5, ids)  # which rows a segment compares; the JS is the formula's
        js = formula_js(maps, rows)
        np.fill_diagonal(js, 0.0)
        expected["js_divergence"].append(js)
    for name, values in expected.items():
        close(found.mean(name), np.mean(values, axis=0), atol=2e-6)
        close(found.std(name), np.std(values, axis=0), atol=2e-6)


@pytest.fixture(scope="module")
def long_2048(checkpoint_factory, tmp_path_factory):
    """Random-weight GPT-2, BERT and Llama (GQA) with a 2,048-token context: (whole trace,
    on-demand trace) of 2,048 tokens each."""
    from mha_viz import load_model
    from mha_viz.testing import make_llama_checkpoint

    models = {
        "gpt2": load_model(checkpoint_factory("gpt2", n_layer=2, n_head=2, d_model=32,
                                              n_positions=2048)),
        "bert": load_model(checkpoint_factory("bert", n_layer=2, n_head=2, d_model=32,
                                              n_positions=2048)),
        "llama": load_model(make_llama_checkpoint(tmp_path_factory.mktemp("llama_2048"),
                                                  n_layer=2, n_head=4, n_kv_head=2, d_model=32,
                                                  n_positions=2048)),
    }
    text = TEXT * 3
    return {family: (model.trace(text, max_tokens=2048, maps="full"),
                     model.trace(text, max_tokens=2048, maps="on_demand"))
            for family, model in models.items()}


@pytest.mark.parametrize("family", FAMILIES)
def test_2048_tokens_on_demand_equal_the_formulas(long_2048, family, monkeypatch):
    monkeypatch.setattr(ondemand, "BLOCK_ELEMENTS", 1 << 20)  # a few hundred rows a block
    whole, lazy = long_2048[family]
    assert whole.n_tokens == lazy.n_tokens == 2048 and lazy.on_demand
    maps = whole.attentions
    for source in (whole, lazy, maps):  # both scales from one pass, as the Entropy page reads
        scales = A.entropy_scales(source, causal=whole.causal)
        close(scales["entropy"], formula_entropy(maps, whole.causal, False))
        close(scales["normalized"], formula_entropy(maps, whole.causal, True))
    both = A.entropy_and_mass(lazy)
    close(both["entropy"], formula_entropy(maps, whole.causal, False))
    close(both["normalized"], formula_entropy(maps, whole.causal, True))
    close(both["mass"], formula_mass(maps, whole))
    roles = A.role_scores(lazy)
    close(roles["previous token"], np.diagonal(maps, -1, -2, -1).mean(-1))
    close(roles["first token"], maps[..., :, 0].astype(np.float64).sum(-1) / 2048)


@pytest.mark.parametrize("family", FAMILIES)
def test_lists_of_traces_of_different_lengths_equal_the_mean_of_the_formulas(long_models,
                                                                             family):
    """A list of inputs, some held whole and some rebuilt on demand, of different lengths:
    every statistic is the mean over inputs of each input's formula."""
    model = long_models[family]
    items = [model.trace(TEXT, max_tokens=300, maps="full"),
             model.trace(TEXT, max_tokens=700, maps="on_demand"),
             model.trace(TEXT[40:], max_tokens=450, maps="on_demand")]
    fulls = [model.trace(TEXT, max_tokens=300, maps="full"), *(
        model.trace(text, max_tokens=n, maps="full") for text, n in ((TEXT, 700),
                                                                   (TEXT[40:], 450)))]
    assert [t.n_tokens for t in fulls] == [300, 700, 450] and items[1].on_demand
    maps = [t.attentions for t in fulls]
    causal = fulls[0].causal
    for normalized in (False, True):
        close(A.entropy(items, normalized=normalized),
              np.mean([formula_entropy(m, causal, normalized) for m in maps], axis=0))
    masses = [formula_mass(m, t) for m, t in zip(maps, fulls)]
    close(A.token_class_mass(items), {k: np.mean([m[k] for m in masses], axis=0)
                                      for k in masses[0]})
    rows = [np.unique(np.round(np.linspace(0, t.n_tokens - 1, 6)).astype(int)) for t in fulls]
    js = np.mean([formula_js(m, r) for m, r in zip(maps, rows)], axis=0)
    np.fill_diagonal(js, 0.0)
    close(A.head_distances(items, kind="js", max_rows=6), js, atol=2e-6)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_8192_tokens_on_demand_equal_the_formulas(checkpoint_factory, tmp_path_factory,
                                                  family, monkeypatch):
    """8,192 tokens rebuilt on demand (one layer: the full maps the formulas read are 256 MB
    a head): entropy, normalized entropy, the first-token and previous-token mass."""
    from mha_viz import load_model
    from mha_viz.testing import make_llama_checkpoint

    n = 8192
    if family == "llama":
        folder = make_llama_checkpoint(tmp_path_factory.mktemp("llama_8192"), n_layer=1,
                                       n_head=2, n_kv_head=1, d_model=16, n_positions=n)
    else:
        folder = checkpoint_factory(family, n_layer=1, n_head=2, d_model=16, n_positions=n)
    model = load_model(folder)
    monkeypatch.setattr(ondemand, "BLOCK_ELEMENTS", 1 << 22)  # 256 rows a block
    lazy = model.trace(TEXT * 12, max_tokens=n, maps="on_demand")
    assert lazy.n_tokens == n and lazy.on_demand
    both = A.entropy_and_mass(lazy)
    maps = model.trace(TEXT * 12, max_tokens=n, maps="full").attentions  # [1, 2, n, n]
    causal = lazy.causal
    expected = {"entropy": [], "normalized": [], "first": [], "previous": []}
    for head in range(maps.shape[1]):  # a head at a time: float64 copies of one head
        one = maps[:, head:head + 1]
        expected["entropy"].append(formula_entropy(one, causal, False))
        expected["normalized"].append(formula_entropy(one, causal, True))
        expected["first"].append(one[..., :, 0].astype(np.float64).sum(-1) / n)
        expected["previous"].append(np.diagonal(one, -1, -2, -1).astype(np.float64)
                                    .sum(-1) / n)
    stacked = {k: np.concatenate(v, axis=1) for k, v in expected.items()}
    close(both["entropy"], stacked["entropy"])
    close(both["normalized"], stacked["normalized"])
    close(both["mass"]["first token"], stacked["first"])
    close(both["mass"]["previous"], stacked["previous"])
