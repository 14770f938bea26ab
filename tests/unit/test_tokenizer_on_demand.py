"""A cached GGUF's tokenizer answers without transformers
(mha_viz.checkpoints.tokenizer_on_demand): what a trace asks of it, it answers as transformers'
own tokenizer of the same GGUF does (AutoTokenizer.from_pretrained(gguf_file=...), and the
PreTrainedTokenizerFast it builds); anything else builds that tokenizer; a server's second
load of a cached GGUF, and the trace after it, never import transformers; a GGUF whose answers
would differ is not cached."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mha_viz.checkpoints import gguf_cache
from mha_viz.checkpoints.gguf_file import GGUFFile, fast_tokenizer
from mha_viz.checkpoints.tokenizer_on_demand import FastTokenizerOnDemand
from mha_viz.models.model import load_model
from mha_viz.testing import (make_decoder_checkpoint, make_llama_checkpoint, write_gguf,
                             write_llama_gguf)

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["The animal didn't cross the street because it was too tired.", "", " ", "a",
         "  two  spaces\tand a tab\nand a newline\r\n", "naïve café — 3.14 ≠ π; 12345 + 678",
         "Ünïcödé 東京 🙂 \u200b \u202e reversed ﬁ 𝔘", "x" * 300]


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def gguf_path(request, tmp_path_factory):
    """A random checkpoint's GGUF of a family transformers reads (byte-level BPE vocabularies,
    Qwen2's splitting digits one by one)."""
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "llama":
        make_llama_checkpoint(folder, d_model=64, n_head=4)
        return write_llama_gguf(folder, tmp_path_factory.mktemp("gguf") / "llama.gguf")
    make_decoder_checkpoint(folder, "Qwen2Config", "Qwen2ForCausalLM", num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                            intermediate_size=128, max_position_embeddings=256)
    return write_gguf(folder, tmp_path_factory.mktemp("gguf") / "qwen2.gguf")


def on_demand(path) -> FastTokenizerOnDemand:
    from tokenizers import Tokenizer

    backend, special = GGUFFile(path).tokenizer_parts()
    return FastTokenizerOnDemand(Tokenizer.from_str(backend.to_str()), special)


def test_it_answers_as_transformers_own_reading_of_the_gguf(gguf_path):
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    ours = on_demand(gguf_path)
    specials = " ".join(theirs.all_special_tokens)
    for text in TEXTS + [specials, f"{theirs.eos_token}inside{theirs.eos_token} text"]:
        for special in (True, False):
            got = ours(text, add_special_tokens=special, truncation=False, verbose=False)
            expected = theirs(text, add_special_tokens=special)
            assert got == {k: expected[k] for k in ("input_ids", "attention_mask")}, text
            assert set(expected) == set(got)
        ids = got["input_ids"]
        tokens = theirs.convert_ids_to_tokens(ids)
        assert ours.convert_ids_to_tokens(ids) == tokens
        assert ours.convert_ids_to_tokens(ids, skip_special_tokens=True) == (
            theirs.convert_ids_to_tokens(ids, skip_special_tokens=True))
        assert [ours.convert_tokens_to_string([t]) for t in tokens] == [
            theirs.convert_tokens_to_string([t]) for t in tokens]
        assert ours.convert_tokens_to_string(tokens) == theirs.convert_tokens_to_string(tokens)
        assert ours.convert_tokens_to_ids(tokens + ["not-a-token-here"]) == (
            theirs.convert_tokens_to_ids(tokens + ["not-a-token-here"]))
    assert ours.special_tokens_map == theirs.special_tokens_map
    assert ours.all_special_tokens == theirs.all_special_tokens
    assert ours.all_special_ids == theirs.all_special_ids
    for role in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        assert getattr(ours, f"{role}_token") == getattr(theirs, f"{role}_token"), role
        assert getattr(ours, f"{role}_token_id") == getattr(theirs, f"{role}_token_id"), role
    assert len(ours) == len(theirs)
    assert ours._built is None  # all of it answered without building transformers' tokenizer


def test_its_own_check_agrees_and_catches_a_difference(gguf_path):
    backend, special = GGUFFile(gguf_path).tokenizer_parts()
    built = fast_tokenizer(backend, special)
    assert on_demand(gguf_path).differences(built) == []
    from tokenizers import Tokenizer

    wrong = dict(special, bos_token="<not the bos>")
    found = FastTokenizerOnDemand(Tokenizer.from_str(backend.to_str()), wrong).differences(built)
    assert any(line.startswith("special_tokens_map") for line in found), found
    assert any(line.startswith("bos_token") for line in found), found


def test_anything_else_builds_transformers_tokenizer_and_goes_to_it(gguf_path):
    from transformers import BatchEncoding, PreTrainedTokenizerFast

    ours = on_demand(gguf_path)
    ours.model_max_length = 12345  # as load_model sets it: kept until it is built
    assert isinstance(ours("plain text"), dict) and ours._built is None
    cut = ours(TEXTS[0], truncation=True, max_length=5)  # beyond the trace's questions
    assert isinstance(ours._built, PreTrainedTokenizerFast)
    assert ours._built.backend_tokenizer is ours.backend_tokenizer  # over the same backend
    assert len(cut["input_ids"]) == 5 and ours.model_max_length == 12345
    after = ours(TEXTS[0])  # from now on: transformers' answers, its truncation undone
    assert isinstance(after, BatchEncoding) and len(after["input_ids"]) > 5
    assert ours.decode(after["input_ids"]) == ours._built.decode(after["input_ids"])
    assert "not built" not in repr(ours)


def test_a_gguf_whose_answers_would_differ_is_not_cached(gguf_path, tmp_path, monkeypatch,
                                                        caplog):
    monkeypatch.setenv("MHA_VIZ_WEIGHTS_CACHE", str(tmp_path))
    monkeypatch.setattr(FastTokenizerOnDemand, "differences", lambda self, built: ["made up"])
    model = load_model(gguf_path)
    assert not gguf_cache.cache_path(tmp_path, gguf_path).exists()
    assert "would not answer as transformers' does: made up" in caplog.text
    assert model.trace(TEXTS[0]).tokens  # the load itself goes on
    assert not isinstance(load_model(gguf_path).tokenizer, FastTokenizerOnDemand)


SECOND_LOAD = """
import json, sys
from mha_viz.models.model import load_model
model = load_model(sys.argv[1])
trace = model.trace(sys.argv[2])
print(json.dumps([type(model.tokenizer).__name__, "transformers" in sys.modules,
                  trace.tokens, trace.display_tokens, list(map(int, trace.token_ids))]))
"""


def test_a_second_load_and_its_trace_do_not_import_transformers(gguf_path, tmp_path):
    """In a process of its own, as a server's start: the first load converts the GGUF and
    writes the cache, the second reads it; both trace a text to the same tokens."""
    env = dict(os.environ, MHA_VIZ_WEIGHTS_CACHE=str(tmp_path), PYTHONPATH=str(ROOT),
               TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    text = "naïve café — the cat sat 12345 🙂"
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", SECOND_LOAD, str(gguf_path), text],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    (first_kind, first_imported, *first), (second_kind, second_imported, *second) = runs
    assert first_imported and first_kind != "FastTokenizerOnDemand"  # converted
    assert second_kind == "FastTokenizerOnDemand" and not second_imported
    assert second == first


def test_a_model_builds_its_tokenizer_when_asked(gguf_path, tmp_path, monkeypatch):
    """What the server's warm start does right after the first page's maps."""
    monkeypatch.setenv("MHA_VIZ_WEIGHTS_CACHE", str(tmp_path))
    first = load_model(gguf_path)  # converts, writes the cache
    first.build_tokenizer()  # a tokenizer built at once: nothing to do
    model = load_model(gguf_path)
    assert isinstance(model.tokenizer, FastTokenizerOnDemand) and model.tokenizer._built is None
    before = model.trace(TEXTS[0])
    model.build_tokenizer()
    assert model.tokenizer._built is not None
    after = model.trace(TEXTS[0])
    assert after.tokens == before.tokens == first.trace(TEXTS[0]).tokens
    assert after.display_tokens == before.display_tokens
