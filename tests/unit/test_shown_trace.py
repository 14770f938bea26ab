"""A trace with positions hidden (analysis.shown_trace): every reader gives the maps restricted
to the kept positions with each row divided by its kept mass (docs/analyses.md, "Attention maps
and what is derived from them"), whether the trace holds its maps or computes them on demand;
statistics streamed over the view equal those of the restricted maps."""

import numpy as np
import pytest
from tests.support.long_traces import pairs  # noqa: F401

from mha_viz import analysis as A
from mha_viz.core.errors import InputError


def by_hand(maps: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The formula, in float64: A'[i, j] = A[i, j] / sum_{k kept} A[i, k] over kept i, j."""
    kept = np.flatnonzero(keep)
    sub = maps.astype(np.float64)[..., kept, :][..., kept]
    mass = sub.sum(-1, keepdims=True)
    return np.where(mass > 0, sub / np.where(mass > 0, mass, 1), 0.0)


def keep_mask(trace) -> np.ndarray:
    keep = ~trace.special_mask.copy()
    keep[0] = False  # the first token too (the attention sink of a causal model)
    keep[7:40:3] = False  # and some ordinary tokens
    return keep


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama"])
def test_shown_trace_is_the_restricted_maps_held_or_on_demand(pairs, family):  # noqa: F811
    full, lazy = pairs[family]
    keep = keep_mask(full)
    expected = by_hand(full.attentions, keep)
    held, computed = A.shown_trace(full, keep), A.shown_trace(lazy, keep)
    assert not held.on_demand and computed.on_demand  # a long input's view stays on demand
    kept = np.flatnonzero(keep)
    for view in (held, computed):
        assert view.n_tokens == len(kept) == expected.shape[-1]
        assert view.display_tokens == [full.display_tokens[i] for i in kept]
        assert np.array_equal(view.special_mask, full.special_mask[kept])
        assert view.extra["kept_positions"] == kept.tolist()
        assert np.abs(view.head_map(1, 2) - expected[1, 2]).max() < 1e-6
        assert np.abs(view.rows(0, 100, 350) - expected[0, :, 100:350]).max() < 1e-6
        rows = [5, 300, 17, 0]
        assert np.abs(view.gather_rows(1, rows, [2, 0]) - expected[1][[2, 0]][:, rows]
                      ).max() < 1e-6
        overview, layer_mean = view.block_mean(1, None, 16), expected[1].mean(0)
        assert overview[0, 0] == pytest.approx(layer_mean[:16, :16].mean(), abs=1e-6)
        assert overview[5, 2] == pytest.approx(layer_mean[80:96, 32:48].mean(), abs=1e-6)
        # a statistic streamed over the view = the same statistic of the restricted maps
        assert np.abs(A.entropy(view) - A.entropy(expected.astype(np.float32),
                                                  causal=full.causal)).max() < 1e-5
        assert np.abs(A.head_mean(view, layer=1) - expected[1].mean(0)).max() < 1e-6
        assert np.abs(view.weights_between(4, 2) - expected[:, :, 4, 2]).max() < 1e-6
    assert np.abs(computed.attentions - expected).max() < 1e-6
    # rows still sum to 1 over what is shown
    assert np.allclose(computed.head_map(0, 0).sum(-1), 1, atol=1e-5)


def test_nothing_hidden_is_the_trace_itself_and_everything_hidden_is_refused(pairs):  # noqa
    full, lazy = pairs["gpt2"]
    assert A.shown_trace(lazy, None) is lazy
    with pytest.raises(InputError, match="every position is hidden"):
        A.shown_trace(lazy, np.zeros(lazy.n_tokens, dtype=bool))
    with pytest.raises(InputError):
        A.shown_trace(lazy, np.ones(3, dtype=bool))  # not one flag per token


def test_a_view_of_an_on_demand_trace_saves_as_its_maps(pairs, tmp_path):  # noqa: F811
    from mha_viz.maps.trace import AttentionTrace

    full, lazy = pairs["llama"]
    keep = keep_mask(full)
    view = A.shown_trace(lazy, keep)
    view.save(tmp_path / "view.npz")
    loaded = AttentionTrace.load(tmp_path / "view.npz")
    assert not loaded.on_demand
    assert np.abs(loaded.attentions - by_hand(full.attentions, keep)).max() < 1e-6


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama"])
def test_thumbnails_stream_to_the_block_means_of_the_whole_maps(pairs, family):  # noqa: F811
    """analysis.thumbnails from a held trace, an on-demand trace, a hidden-token view of one
    and bare maps = downsample.block_reduce of the whole maps (the grid's thumbnails), and a
    thumbnail cell is the mean of its block by hand."""
    from mha_viz.maps.downsample import block_reduce

    full, lazy = pairs[family]
    expected, factor = block_reduce(full.attentions, max_size=32)
    assert factor == -(-full.n_tokens // 32) > 1
    for source in (full, lazy, full.attentions):
        got, got_factor = A.thumbnails(source, 32)
        assert got_factor == factor and got.shape == expected.shape
        assert np.abs(got - expected).max() < 1e-6
    assert got[1, 2, 3, 1] == pytest.approx(
        full.head_map(1, 2)[3 * factor:4 * factor, factor:2 * factor].mean(), abs=1e-6)
    last = (full.n_tokens - 1) // factor  # the last block: its real cells only
    assert got[0, 0, last, 0] == pytest.approx(
        full.head_map(0, 0)[last * factor:, :factor].mean(), abs=1e-6)
    keep = keep_mask(full)
    view = A.shown_trace(lazy, keep)
    got, _ = A.thumbnails(view, 32)
    assert np.abs(got - block_reduce(by_hand(full.attentions, keep), 32)[0]).max() < 1e-6
    seen = []
    A.thumbnails(lazy, 32, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (full.n_layer * full.n_tokens,) * 2
