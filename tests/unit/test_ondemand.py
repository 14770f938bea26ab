"""On-demand traces (issue 12): maps rebuilt from each layer's input equal the full trace's and
transformers' own, a block of rows at a time; chunked attention equals the plain one; saved
long traces hold queries and keys, read back as hostile files are."""

import io

import numpy as np
import pytest
import torch
from tests.support.gpt2_bert_parity import reference_model
from tests.support.long_traces import LONG_TEXT, pairs  # noqa: F401

from mha_viz.core.errors import TraceFileError
from mha_viz.engine.attention import chunked_attention, scaled_dot_product_attention
from mha_viz.maps import trace as trace_module
from mha_viz.maps.ondemand import MapsTooLargeError
from mha_viz.maps.trace import AttentionTrace
from mha_viz.models import model as model_module


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama"])
def test_every_map_equals_the_full_trace(pairs, family):
    full, lazy = pairs[family]
    worst = 0.0
    for layer in range(full.n_layer):
        worst = max(worst, float(np.abs(lazy.layer_maps(layer) - full.layer_maps(layer)).max()))
        for head in range(full.n_head):
            assert np.abs(lazy.head_map(layer, head) - full.head_map(layer, head)).max() < 1e-6
    assert worst < 1e-6
    assert np.abs(lazy.attentions - full.attentions).max() < 1e-6
    rows = [5, 600, 17, 0, full.n_tokens - 1]
    assert np.abs(lazy.gather_rows(1, rows, [3, 0]) - full.gather_rows(1, rows, [3, 0])).max() \
        < 1e-6
    assert np.abs(lazy.rows(0, 250, 520) - full.rows(0, 250, 520)).max() < 1e-6
    for factor in (1, 7, 64):
        assert np.abs(lazy.block_mean(1, 2, factor) - full.block_mean(1, 2, factor)).max() < 1e-6
        assert np.abs(lazy.block_mean(1, None, factor) - full.block_mean(1, None, factor)
                      ).max() < 1e-6
    # The maps are not trivial: rows sum to 1 and are far from uniform.
    assert np.allclose(lazy.head_map(1, 1).sum(-1), 1, atol=1e-5)
    assert lazy.head_map(1, 1).max() > 20 / full.n_tokens


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_rows_in_any_order_from_two_threads(pairs, family):
    """Rows are scored 256 at a time in the order given (a causal chunk only up to its last
    row's keys) in per-thread buffers: shuffled rows, heads out of order and another thread
    computing meanwhile give the full trace's rows."""
    from concurrent.futures import ThreadPoolExecutor

    full, lazy = pairs[family]
    order = np.random.default_rng(0).permutation(full.n_tokens)[:600]
    heads = [3, 0, 2]
    jobs = [(layer, rows) for layer in range(full.n_layer)
            for rows in (order, np.sort(order)[::-1], order[:1])]
    with ThreadPoolExecutor(2) as pool:
        found = list(pool.map(lambda job: lazy.gather_rows(job[0], job[1], heads), jobs))
    for (layer, rows), got in zip(jobs, found):
        expected = full.gather_rows(layer, rows, heads)
        assert got.shape == expected.shape and np.abs(got - expected).max() < 1e-6


def test_block_mean_is_the_mean_of_each_block(pairs):
    full, _ = pairs["gpt2"]
    head_map = full.head_map(1, 3).astype(np.float64)
    overview = full.block_mean(1, 3, 64)
    assert overview.shape == (-(-full.n_tokens // 64),) * 2
    assert overview[2, 1] == pytest.approx(head_map[128:192, 64:128].mean(), abs=1e-7)
    last = -(-full.n_tokens // 64) - 1
    assert overview[last, 0] == pytest.approx(head_map[64 * last:, :64].mean(), abs=1e-7)
    # head=None: the mean of the layer's heads, block-averaged
    head_mean = full.layer_maps(1).astype(np.float64).mean(axis=0)
    mean_overview = full.block_mean(1, None, 64)
    assert mean_overview[2, 1] == pytest.approx(head_mean[128:192, 64:128].mean(), abs=1e-7)
    assert mean_overview[last, 0] == pytest.approx(head_mean[64 * last:, :64].mean(), abs=1e-7)
    assert abs(mean_overview[2, 1] - overview[2, 1]) > 1e-4  # not one head's blocks


def test_on_demand_maps_equal_transformers(long_models, checkpoint_factory):
    folder = checkpoint_factory("gpt2", n_layer=2, n_head=4, d_model=64, n_positions=1024)
    reference = reference_model(folder, "gpt2", True)
    model = long_models["gpt2"]
    lazy = model.trace(LONG_TEXT, maps="on_demand")
    with torch.no_grad():
        out = reference(torch.tensor([lazy.token_ids]), output_attentions=True)
        expected = torch.stack(out.attentions)[:, 0]
    for layer in range(lazy.n_layer):
        assert np.abs(lazy.layer_maps(layer) - expected[layer].numpy()).max() < 1e-5


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n_kv", [4, 2, 1])
def test_chunked_attention_equals_the_plain_one(causal, n_kv):
    generator = torch.Generator().manual_seed(n_kv)
    q = torch.randn(2, 4, 300, 16, generator=generator)
    k, v = (torch.randn(2, n_kv, 300, 16, generator=generator) for _ in range(2))
    padding = torch.ones(2, 300)
    padding[1, 250:] = 0  # the second input is padded
    key_bias = (1.0 - padding)[:, None, None, :] * torch.finfo(torch.float32).min
    bias = key_bias
    if causal:
        bias = key_bias + torch.triu(torch.full((300, 300), float("-inf")), 1)
    context, weights = scaled_dot_product_attention(q, k, v, bias, 0.25)
    out = torch.empty(2, 4, 300, 300)
    for chunk in (1, 64, 256, 1000):
        chunked = chunked_attention(q, k, v, 0.25, causal, key_bias, chunk, out)
        assert torch.abs(chunked - context)[:, :, :250].max() < 1e-5
        assert torch.abs(out - weights).max() < 1e-6


def test_a_long_forward_without_maps_equals_the_plain_one(long_models):
    model = long_models["llama"]
    net = model.network
    ids = torch.tensor([model.encode(LONG_TEXT).input_ids])
    with torch.inference_mode():
        chunked, _ = net(ids)  # T > CHUNKED_FROM: attention a block of rows at a time
        h = net.embed(ids)
        plain, _ = net.run_layers(h, 0, None, net.attention_bias(ids.shape[1]))
        plain = net.finish(plain)
    assert ids.shape[1] > model_module.CHUNKED_FROM
    assert torch.abs(chunked - plain).max() < 1e-4


def test_memory_grows_with_t_not_t_squared(long_models):
    model = long_models["gpt2"]
    short = model.trace(LONG_TEXT, max_tokens=300, maps="on_demand")
    long = model.trace(LONG_TEXT, max_tokens=600, maps="on_demand")
    ratio = long.held_bytes() / short.held_bytes()
    assert 1.8 < ratio < 2.2
    full = model.trace(LONG_TEXT, max_tokens=600, maps="full")
    assert full.held_bytes() > 4 * long.held_bytes()


def test_auto_holds_short_maps_whole_and_long_ones_on_demand(long_models, monkeypatch):
    model = long_models["gpt2"]
    assert not model.trace("A short text.").on_demand
    monkeypatch.setattr(trace_module, "AUTO_FULL_MAPS_BYTES", 4 * 2 * 4 * 100 * 100)
    assert model.trace(LONG_TEXT).on_demand
    assert not model.trace(LONG_TEXT, max_tokens=90).on_demand


def test_attentions_too_large_says_what_to_ask_for(pairs, monkeypatch):
    _, lazy = pairs["llama"]
    monkeypatch.setattr(trace_module, "MATERIALISE_MAX_BYTES", 1 << 20)
    with pytest.raises(MapsTooLargeError, match="head_map"):
        lazy.attentions
    assert lazy.head_map(0, 0).shape == (lazy.n_tokens,) * 2  # one head still works


def test_a_saved_long_trace_holds_queries_and_keys(pairs):
    full, lazy = pairs["llama"]
    saved = lazy.to_bytes()
    with np.load(io.BytesIO(saved), allow_pickle=False) as data:
        assert "attentions" not in data.files
        assert data["queries"].shape == (2, 4, lazy.n_tokens, 16)
        assert data["keys"].shape == (2, 2, lazy.n_tokens, 16)
    assert len(saved) < len(full.to_bytes()) / 4
    loaded = AttentionTrace.load(saved)
    assert loaded.on_demand and loaded.kv_heads == lazy.kv_heads
    assert loaded.display_tokens == lazy.display_tokens
    for layer in range(2):
        assert np.abs(loaded.layer_maps(layer) - full.layer_maps(layer)).max() < 1e-6


def _resaved(trace: AttentionTrace, **changes) -> bytes:
    """The trace's file with some arrays (or the kv_heads) replaced."""
    import json

    with np.load(io.BytesIO(trace.to_bytes()), allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    kv_heads = changes.pop("kv_heads", None)
    if kv_heads is not None:
        metadata = json.loads(str(arrays["metadata"]))
        metadata["kv_heads"] = kv_heads
        arrays["metadata"] = np.asarray(json.dumps(metadata))
    arrays.update(changes)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_bad_queries_and_keys_are_refused(long_models):
    lazy = long_models["llama"].trace("A short text for a saved trace.", maps="on_demand")
    q, k, _ = lazy.maps_source.queries_keys_arrays()
    nan = q.copy()
    nan[0, 0, 0, 0] = np.nan
    cases = {
        "NaN": dict(queries=nan),
        "do not match": dict(keys=k[:, :, :-1]),
        "floating point": dict(queries=q.astype(np.int32)),
        "kv_heads": dict(kv_heads=[0, 1, 2, 7]),
        "shapes": dict(scales=np.ones(5)),
    }
    for message, change in cases.items():
        with pytest.raises(TraceFileError, match=message):
            AttentionTrace.load(_resaved(lazy, **change))


def test_saved_bytes_is_the_size_of_the_arrays_saved(pairs):
    _, lazy = pairs["llama"]
    queries, keys, _ = lazy.maps_source.queries_keys_arrays()
    assert lazy.maps_source.saved_bytes() == queries.nbytes + keys.nbytes


def test_the_command_line_summary_is_the_same_on_demand(checkpoint_factory, tmp_path, capsys):
    from mha_viz.__main__ import main

    folder = str(checkpoint_factory("gpt2", n_layer=2, n_head=4, d_model=64, n_positions=1024))
    outputs = []
    for maps in ("full", "on_demand"):
        out = tmp_path / f"{maps}.npz"
        assert main(["trace", "--model", folder, "--text", LONG_TEXT, "--maps", maps,
                     "--out", str(out)]) == 0
        outputs.append(capsys.readouterr().out.replace(str(out), "FILE"))
    assert outputs[0] == outputs[1] and "mean entropy" in outputs[0]
    assert AttentionTrace.load(tmp_path / "on_demand.npz").on_demand
