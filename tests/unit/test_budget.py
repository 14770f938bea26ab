"""mha_viz.core.budget: results kept within a byte budget; an input too big for it is refused."""

import threading
import time

import numpy as np
import pytest

from mha_viz import InputError
from mha_viz.core.budget import ByteLRU, budget_bytes, check_fits, maps_bytes, nbytes


def test_nbytes_counts_arrays_in_results_and_not_the_model(gpt2_model):
    run = gpt2_model.run("the cat sat on the mat")
    maps = run.trace.attentions.nbytes
    assert nbytes(run) >= maps
    # the weights are shared by every result: not counted
    weights = sum(p.numel() * 4 for p in gpt2_model.network.parameters())
    assert nbytes(run) < maps + weights
    assert nbytes({"a": np.zeros(10, np.float32), "b": [np.zeros(5, np.float64)]}) == 80


def test_the_store_evicts_least_recently_used_until_under_its_bytes():
    store = ByteLRU(1000)
    store.put("a", np.zeros(100, np.float32))  # 400 bytes
    store.put("b", np.zeros(100, np.float32))
    assert store.get("a")[0]  # a is now the most recent
    store.put("c", np.zeros(100, np.float32))  # 1200 > 1000: b goes
    assert store.get("a")[0] and store.get("c")[0] and not store.get("b")[0]
    assert store.bytes == 800
    store.put("huge", np.zeros(1000, np.float32))  # bigger than the whole store: not kept
    assert not store.get("huge")[0] and store.bytes == 800


def test_a_key_asked_for_by_many_threads_is_computed_once():
    store, calls = ByteLRU(10_000), []

    def compute():
        calls.append(1)
        time.sleep(0.2)
        return np.ones(10)

    threads = [threading.Thread(target=store.get_or_compute, args=("k", compute))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1


def test_an_input_whose_maps_exceed_the_budget_is_refused_with_what_would_fit():
    budget = 512 * 2**20
    check_fits(30, 9, 200, budget)  # 43 MB of maps: within a quarter of 512 MB
    with pytest.raises(InputError) as info:
        check_fits(30, 9, 2048, budget)
    message = str(info.value)
    assert "2,048 tokens" in message and "Shorten it to" in message
    fits = int(message.split("Shorten it to ")[1].split(" ")[0].replace(",", ""))
    assert maps_bytes(30, 9, fits) <= 0.25 * budget < maps_bytes(30, 9, fits + 1)


@pytest.mark.slow
def test_maps_are_held_whole_while_they_fit_then_on_demand_then_refused():
    from mha_viz.core.budget import choose_maps, on_demand_bytes

    budget = 2560 * 2**20  # the default: one input may take 640 MB
    # SmolLM2 (30 layers x 9 heads, d 576): whole maps up to 788 tokens
    assert choose_maps(30, 9, 576, 788, budget) == "full"
    assert choose_maps(30, 9, 576, 789, budget) == "on_demand"
    # its whole context on demand: 30 x 576 x 8,192 floats = 566 MB
    assert choose_maps(30, 9, 576, 8192, budget) == "on_demand"
    with pytest.raises(InputError) as info:
        choose_maps(30, 9, 576, 8192, budget, bytes_per_token=4 * 30 * 1152)  # a run's extras
    message = str(info.value)
    assert "8,192 tokens" in message and "computed on demand" in message
    fits = int(message.split("Shorten it to ")[1].split(" ")[0].replace(",", ""))
    per_token = on_demand_bytes(30, 576, 1) + 4 * 30 * 1152
    assert fits * per_token <= 0.25 * budget < (fits + 1) * per_token


def test_the_budget_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_MEMORY_MB", "4096")
    assert budget_bytes() == 4096 * 2**20
    monkeypatch.setenv("MHA_VIZ_MEMORY_MB", "lots")
    assert budget_bytes() == 2560 * 2**20


def test_a_plan_says_what_a_trace_reads_and_holds_before_it_runs(monkeypatch, gpt2_model,
                                                                 gpt2_folder):
    """Model.plan counts a text's tokens as the checkpoint's own tokenizer does (transformers',
    cut to the context or max_tokens) and names the form the budget gives its maps: held
    while L x H x T^2 floats fit a quarter of the budget, else each layer's input (L x T x d
    floats), else refused; Model.trace(maps="budget") then holds exactly that."""
    from transformers import AutoTokenizer

    from mha_viz.core import budget

    text = "the cat sat on the mat and looked at the dog " * 20
    ids = AutoTokenizer.from_pretrained(gpt2_folder)(text)["input_ids"]
    info = gpt2_model.info
    assert len(ids) > info.max_positions  # cut to the context: 128 tokens
    assert gpt2_model.n_tokens(text) == info.max_positions
    assert gpt2_model.n_tokens(text, max_tokens=40) == 40
    n = 100
    held = 4 * info.n_layer * info.n_head * n * n
    rebuilt = 4 * info.n_layer * n * info.d_model
    for quarter, form in ((held, "full"), (held - 1, "on_demand"), (rebuilt - 1, "none")):
        monkeypatch.setattr(budget, "budget_bytes", lambda quarter=quarter: 4 * quarter)
        plan = gpt2_model.plan(text, max_tokens=n)
        assert (plan.n_tokens, plan.n_tokens_before_truncation, plan.truncated) == (
            n, len(ids), True)
        assert plan.maps == form, quarter
        if form == "none":
            assert "Shorten it to" in plan.refused
            with pytest.raises(InputError, match="Shorten it to") as refused:
                gpt2_model.trace(text, max_tokens=n, maps="budget")
            assert str(refused.value) == plan.refused
            with pytest.raises(InputError, match="Shorten it to"):
                plan.check()
            continue
        assert plan.refused == "" and plan.check() is plan
        trace = gpt2_model.trace(text, max_tokens=n, maps="budget")
        assert trace.on_demand == (form == "on_demand")
        assert plan.maps_bytes == (held if form == "full" else rebuilt)
        assert trace.maps.held_bytes() == plan.maps_bytes  # the arrays the trace holds
    with pytest.raises(InputError, match="maps must be"):
        gpt2_model.plan(text, maps="sometimes")
