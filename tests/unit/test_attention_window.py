"""Heads restricted to a sink and a window (issue 56): our engine's exact mask against
transformers' own Llama (eager) handed the same 4-D mask, on a grouped-query checkpoint, on
the plain path and on the blockwise one (past 512 tokens), for every head and for some heads
of some layers; the maps of a restricted trace, whole, on demand and saved; bad input."""

import io

import numpy as np
import pytest
import torch
from tests.support.long_traces import LONG_TEXT
from tests.support.window_reference import next_token_loss, restricted_loss, run_restricted

from mha_viz import load_model
from mha_viz.core.digest import digest
from mha_viz.core.errors import InputError
from mha_viz.maps.trace import AttentionTrace

LOSS_TOL = 1e-4
MAP_TOL = 1e-5
TEXT = ("The keeper of the lighthouse wrote in his log that the storm came at night, and the "
        "boats stayed in the harbour until the morning light.")
SINK, WINDOW = 2, 5


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(ours, transformers' LlamaForCausalLM, eager) of one grouped-query checkpoint: 6 query
    heads on 2 key/value heads, a context of 1,024 tokens."""
    from transformers import LlamaForCausalLM

    from mha_viz.testing import make_llama_checkpoint

    folder = make_llama_checkpoint(tmp_path_factory.mktemp("llama_window"), n_layer=3,
                                   n_head=6, n_kv_head=2, d_model=96, n_positions=1024)
    ref = LlamaForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    return load_model(folder), ref


def some_heads(model) -> np.ndarray:
    """Heads 0 and 4 of layer 0, every head of layer 2, none of layer 1: two query heads of
    different key/value groups, a whole layer, a layer left alone."""
    heads = np.zeros((model.info.n_layer, model.info.n_head), dtype=bool)
    heads[0, [0, 4]] = True
    heads[2] = True
    return heads


def test_every_head_restricted_equals_transformers_with_a_4d_mask(pair):
    model, ref = pair
    ids = model.encode(TEXT).input_ids
    n = len(ids)
    assert n > SINK + WINDOW + 10
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    seen = (j <= i) & ((j < SINK) | (j > i - WINDOW))
    mask = torch.from_numpy(np.where(seen, 0.0, np.finfo(np.float32).min)
                            .astype(np.float32))[None, None]
    with torch.no_grad():  # the model's own attention_mask input, 4-D: used as it is
        logits = ref(torch.tensor([ids]), attention_mask=mask).logits
    expected = next_token_loss(logits, ids)
    got = model.score(TEXT, attention_window={"sink": SINK, "window": WINDOW, "heads": None})
    assert got == pytest.approx(expected, abs=LOSS_TOL)
    # the restriction matters: the loss moves well beyond the tolerance
    assert abs(got - model.score(TEXT)) > 100 * LOSS_TOL


def test_some_heads_of_some_layers_equal_transformers(pair):
    model, ref = pair
    ids = model.encode(TEXT).input_ids
    heads = some_heads(model)
    pairs = [tuple(map(int, p)) for p in np.argwhere(heads)]
    expected = restricted_loss(ref, ids, SINK, WINDOW, heads)
    for given in (heads, pairs, heads.astype(np.float32)):
        spec = {"sink": SINK, "window": WINDOW, "heads": given}
        assert model.score(TEXT, attention_window=spec) == pytest.approx(expected, abs=LOSS_TOL)
    everything = restricted_loss(ref, ids, SINK, WINDOW, np.ones_like(heads))
    assert abs(expected - everything) > 100 * LOSS_TOL  # which heads matters


def test_window_only_is_a_sink_of_zero(pair):
    model, ref = pair
    ids = model.encode(TEXT).input_ids
    heads = np.ones((model.info.n_layer, model.info.n_head), dtype=bool)
    got = model.score(TEXT, attention_window={"window": WINDOW})
    assert got == pytest.approx(restricted_loss(ref, ids, 0, WINDOW, heads), abs=LOSS_TOL)


def test_the_blockwise_path_past_512_tokens(pair):
    """Past CHUNKED_FROM tokens the score runs attention 256 query rows at a time: the mask of
    each block sits at its rows' positions."""
    model, ref = pair
    ids = model.encode(LONG_TEXT).input_ids
    assert len(ids) > 600
    heads = some_heads(model)
    sink, window = 4, 100
    got = model.score(LONG_TEXT, attention_window={"sink": sink, "window": window,
                                                   "heads": heads})
    assert got == pytest.approx(restricted_loss(ref, ids, sink, window, heads), abs=LOSS_TOL)


@pytest.mark.parametrize("maps", ["full", "on_demand"])
def test_a_restricted_trace_holds_the_restricted_maps(pair, maps):
    model, ref = pair
    ids = model.encode(TEXT).input_ids
    heads = some_heads(model)
    spec = {"sink": SINK, "window": WINDOW, "heads": heads}
    trace = model.trace(TEXT, attention_window=spec, maps=maps)
    expected = torch.stack(run_restricted(ref, ids, SINK, WINDOW, heads,
                                          output_attentions=True).attentions)[:, 0].numpy()
    assert np.abs(trace.attentions - expected).max() < MAP_TOL
    far = trace.attentions[0, 0, -1, SINK:len(ids) - WINDOW]
    assert far.max() == 0.0 and trace.attentions[1, 0, -1, SINK:len(ids) - WINDOW].max() > 0
    assert trace.extra["attention_window"]["window"] == WINDOW
    assert digest(trace) != digest(model.trace(TEXT, maps=maps))  # its key says so
    if maps == "on_demand":  # saved as queries and keys, rebuilt with the restriction
        buffer = io.BytesIO()
        trace.save(buffer)
        again = AttentionTrace.load(buffer.getvalue())
        assert again.on_demand
        assert np.abs(again.head_map(0, 4) - expected[0, 4]).max() < MAP_TOL


def test_a_restricted_long_trace_on_demand(pair):
    """The maps rebuilt a block of rows at a time equal those of a trace held whole."""
    model, _ = pair
    spec = {"sink": 4, "window": 100, "heads": some_heads(model)}
    full = model.trace(LONG_TEXT, attention_window=spec, maps="full")
    lazy = model.trace(LONG_TEXT, attention_window=spec, maps="on_demand")
    for layer in (0, 2):
        assert np.abs(lazy.layer_maps(layer) - full.layer_maps(layer)).max() < 1e-6
    assert full.head_map(0, 0)[-1, 4:full.n_tokens - 100].max() == 0.0


@pytest.mark.parametrize("spec, words", [
    ({"sink": 4, "window": 0}, "at least 1 token"),
    ({"sink": -1, "window": 8}, "0 or more"),
    ({"sink": 4}, "needs a 'window'"),
    ({"window": 8, "heads": [(3, 0)]}, "out of range"),
    ({"window": 8, "heads": [(0, 6)]}, "out of range"),
    ({"window": 8, "heads": np.ones((2, 6), dtype=bool)}, "[3, 6]"),
    ({"window": 8, "size": 3}, "not 'size'"),
    ({"window": 2.5}, "whole number"),
    ("sink 4, window 8", "must be a dict"),
])
def test_bad_windows_are_refused_in_words(pair, spec, words):
    model, _ = pair
    with pytest.raises(InputError) as error:
        model.score(TEXT, attention_window=spec)
    assert words in str(error.value)


def test_a_bidirectional_model_refuses_a_window(bert_model):
    with pytest.raises(InputError, match="bidirectional"):
        bert_model.score("the cat sat on the mat", attention_window={"sink": 1, "window": 2})
