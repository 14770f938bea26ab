"""Model.generate (issue 49): a causal model continues a text with the engine's key/value
cache. Greedy generation writes the token ids transformers' own generate writes (do_sample
False) on GPT-2, a grouped-query Llama, Pythia (parallel attention, partial rotary) and
Gemma 2 (sliding windows shorter than the text, soft-caps); each new token runs one forward
over itself alone; the trace of prompt and continuation equals a fresh trace of the whole
text; sampling draws what a draw written here from transformers' logits draws."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from mha_viz import InputError
from mha_viz.analysis import value_weighted_maps

TEXT = "the cat sat on the mat and the dog ran to the"


def hf_greedy(hf, ids, n, eos):
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                          pad_token_id=eos, eos_token_id=eos)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("name", ["gpt2", "llama", "neox", "gemma2"])
def test_greedy_generation_equals_transformers_generate(patch_models, name):
    model, hf, _ = patch_models[name]
    ids = model.encode(TEXT).input_ids
    if name == "gemma2":
        assert hf.config.sliding_window < len(ids)  # the window matters for every new token
    written = model.generate(TEXT, max_new_tokens=20, trace=False)
    expected = hf_greedy(hf, ids, 20, model.tokenizer.eos_token_id)
    assert written.new_ids == expected
    assert written.prompt_ids == ids and written.prompt_length == len(ids)
    assert written.stop_reason == ("end_of_text" if len(expected) < 20 else "length")
    assert written.trace is None and written.seed is None


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_the_trace_of_the_continuation_equals_a_fresh_trace(patch_models, name):
    """Whole maps and on-demand ones (each layer's input kept by the steps), attention and
    value-weighted: every row, the continuation's included."""
    model, _, _ = patch_models[name]
    for maps in ("full", "on_demand"):
        for weights in ("attention", "value"):
            written = model.generate(TEXT, max_new_tokens=20, maps=maps, weights=weights)
            trace = written.trace
            assert trace.token_ids == written.ids and trace.extra["prompt_length"] == len(
                written.prompt_ids)
            assert trace.on_demand == (maps == "on_demand")
            assert trace.value_weighted == (weights == "value")
            fresh = model.trace_ids(written.ids, maps="full", weights=weights)
            np.testing.assert_allclose(trace.attentions, fresh.attentions, atol=1e-5)
    raw = value_weighted_maps(model, written.ids)
    assert raw.shape[-1] == len(written.ids)


def test_each_new_token_runs_one_forward_over_itself(patch_models):
    """The prompt runs once; then each step's layers read one position (the new token),
    the earlier ones coming from the cache."""
    model, _, _ = patch_models["gemma2"]
    widths = []
    handle = model.network.blocks[0].register_forward_pre_hook(
        lambda module, args: widths.append(args[0].shape[1]))
    try:
        written = model.generate(TEXT, max_new_tokens=12)
    finally:
        handle.remove()
    assert widths == [len(written.prompt_ids)] + [1] * len(written.new_ids)
    assert written.text == model.tokenizer.decode(written.ids)[len(
        model.tokenizer.decode(written.prompt_ids)):]


def test_seeded_sampling_draws_from_the_model_distribution(patch_models):
    """Temperature 0.8, seed 7: each token is the draw torch.multinomial makes with a
    generator seeded 7 from softmax(transformers' logits / 0.8); the same seed writes the
    same text again, another seed another one."""
    model, hf, _ = patch_models["llama"]
    ids = model.encode(TEXT).input_ids
    written = model.generate(TEXT, max_new_tokens=10, temperature=0.8, seed=7, trace=False)
    generator = torch.Generator().manual_seed(7)
    expected = list(ids)
    with torch.no_grad():
        for _ in range(10):
            logits = hf(torch.tensor([expected])).logits[0, -1].float()
            probs = torch.softmax(logits / 0.8, dim=-1)
            expected.append(int(torch.multinomial(probs, 1, generator=generator)))
            if expected[-1] == model.tokenizer.eos_token_id:
                break
    assert written.new_ids == expected[len(ids):] and written.seed == 7
    again = model.generate(TEXT, max_new_tokens=10, temperature=0.8, seed=7, trace=False)
    assert again.new_ids == written.new_ids
    other = model.generate(TEXT, max_new_tokens=10, temperature=0.8, seed=8, trace=False)
    assert other.new_ids != written.new_ids
    drawn = model.generate(TEXT, max_new_tokens=3, temperature=1.0, trace=False)
    assert isinstance(drawn.seed, int)  # a fresh seed, recorded to write it again


def test_progress_cancel_and_the_context(gpt2_model):
    model = gpt2_model
    seen = []
    written = model.generate(TEXT, max_new_tokens=10,
                             progress=lambda done, total, token: seen.append((done, total)) or
                             done < 3)
    assert seen == [(1, 10), (2, 10), (3, 10)] and written.stop_reason == "cancelled"
    assert len(written.new_ids) == 3 and written.trace.n_tokens == len(written.ids)
    # told False at the last token asked for: every token was written, nothing cancelled
    last = model.generate(TEXT, max_new_tokens=2, progress=lambda done, total, _: done < total)
    assert last.stop_reason == "length" and len(last.new_ids) == 2
    stop = threading.Event()
    stop.set()
    assert model.generate(TEXT, cancel=stop).new_ids == []
    # past the context (128 positions): it writes up to the context and says so
    long_text = " ".join(["the cat sat on the mat"] * 40)
    prompt = model.encode(long_text, max_tokens=120).input_ids
    written = model.generate(prompt, max_new_tokens=20)
    assert len(written.new_ids) == 128 - 120 and written.stop_reason == "context"
    assert written.trace.n_tokens == 128


def test_bad_requests_get_a_message(gpt2_model, bert_model):
    with pytest.raises(InputError, match="no next token"):
        bert_model.generate(TEXT)
    with pytest.raises(InputError, match="at least 1"):
        gpt2_model.generate(TEXT, max_new_tokens=0)
    with pytest.raises(InputError, match="whole number"):
        gpt2_model.generate(TEXT, max_new_tokens=2.5)
    with pytest.raises(InputError, match="temperature"):
        gpt2_model.generate(TEXT, temperature=-1)
    with pytest.raises(InputError, match="fill the model's context"):
        gpt2_model.generate(list(range(5, 133)))
    with pytest.raises(InputError, match="more than the model's context"):
        gpt2_model.generate(" ".join(["the cat sat on the mat"] * 40))


def test_the_command_line_writes_and_saves_the_trace(gpt2_folder, bert_folder, tmp_path,
                                                     capsys):
    from mha_viz.__main__ import main
    from mha_viz.maps.trace import AttentionTrace

    out = tmp_path / "written.npz"
    assert main(["generate", "--model", str(gpt2_folder), "--text", TEXT,
                 "--max-new-tokens", "6", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    trace = AttentionTrace.load(out)
    prompt = trace.extra["prompt_length"]
    assert trace.n_tokens == prompt + 6 and printed.out.startswith(TEXT)
    assert "6 token(s)" in printed.err and "the tokens asked for were written" in printed.err
    assert main(["generate", "--model", str(bert_folder), "--text", TEXT]) == 2
    assert "no next token" in capsys.readouterr().err
