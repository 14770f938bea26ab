"""The GGUF weights cache (mha_viz.checkpoints.gguf_cache): a model read back from it is bit for
bit the model converted from the GGUF with no cache, its tensors are what the gguf package
itself dequantizes the file's bytes to, and a damaged or stale cache file is never used: it is
refused and written again. A random Llama GGUF in Q4_1 (quantized: the cache must hold what
the dequantization gave, not the file's bytes)."""

import os

import numpy as np
import pytest
import torch

from mha_viz.checkpoints import gguf_cache
from mha_viz.checkpoints.gguf_file import GGUFFile
from mha_viz.models.model import load_model
from mha_viz.testing import make_llama_checkpoint, write_llama_gguf

TEXT = "the cat sat on the mat because it was warm"


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory):
    folder = make_llama_checkpoint(tmp_path_factory.mktemp("llama"), d_model=64, n_head=4)
    return write_llama_gguf(folder, tmp_path_factory.mktemp("gguf") / "random.gguf", "Q4_1")


@pytest.fixture(scope="module")
def uncached(gguf_path):
    """The model converted from the GGUF with the cache off."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MHA_VIZ_WEIGHTS_CACHE", "0")
        return load_model(gguf_path)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "weights"
    monkeypatch.setenv("MHA_VIZ_WEIGHTS_CACHE", str(folder))
    return folder


def cached_file(folder, gguf_path):
    return gguf_cache.cache_path(folder, gguf_path)


def assert_same_model(model, reference):
    ours, theirs = model.network.state_dict(), reference.network.state_dict()
    assert ours.keys() == theirs.keys()
    for name in theirs:  # bit for bit: equal values, dtypes and shapes
        assert ours[name].dtype == theirs[name].dtype, name
        assert torch.equal(ours[name], theirs[name]), name
    assert model.tokenizer(TEXT)["input_ids"] == reference.tokenizer(TEXT)["input_ids"]
    np.testing.assert_array_equal(model.trace(TEXT).attentions,
                                  reference.trace(TEXT).attentions)


def read_without_the_gguf(monkeypatch):
    """Loading from here on must not parse or dequantize the GGUF."""
    def refuse(self, path):
        raise AssertionError("the GGUF was read although the cache holds it")

    monkeypatch.setattr(GGUFFile, "__init__", refuse)


def test_a_model_read_from_the_cache_is_the_converted_model(gguf_path, uncached, cache,
                                                            monkeypatch):
    assert_same_model(load_model(gguf_path), uncached)  # converts and writes the cache
    assert cached_file(cache, gguf_path).is_file()
    read_without_the_gguf(monkeypatch)
    assert_same_model(load_model(gguf_path), uncached)


def test_cached_tensors_are_what_gguf_dequantizes(gguf_path, cache):
    import gguf

    reader = gguf.GGUFReader(str(gguf_path))
    identity = gguf_cache.source_identity(gguf_path)
    load_model(gguf_path)  # the load writes the cache
    cached = gguf_cache.read_cache(cached_file(cache, gguf_path), identity)
    assert cached is not None
    tensors = cached.lazy_tensors()
    assert set(tensors) == {t.name for t in reader.tensors}
    quantized = 0
    for t in reader.tensors:
        expected = gguf.quants.dequantize(t.data, t.tensor_type).reshape(
            tuple(int(n) for n in reversed(t.shape)))
        quantized += t.tensor_type.name == "Q4_1"
        assert tensors[t.name].dtype == torch.float32
        np.testing.assert_array_equal(tensors[t.name].numpy(), expected.astype(np.float32))
    assert quantized > 0
    assert cached.metadata == GGUFFile(gguf_path).metadata


ODD_TEXTS = ["the cat sat", "Hello wörld 12345 — 😀\u200b tabs\t\tand  spaces",
             "ﬁ ligature Ωmega 中文 𝔘", ""]


def test_the_tokenizer_read_from_the_cache_is_the_converted_one(gguf_path, uncached, cache,
                                                               monkeypatch):
    """A second load reads the tokenizer the first one kept: it converts nothing (transformers'
    GGUF converter is not called) and tokenizes as the converted one does, offsets included."""
    load_model(gguf_path)  # converts and writes the cache

    def refuse(self):
        raise AssertionError("the GGUF's tokenizer was converted although the cache holds it")

    monkeypatch.setattr(GGUFFile, "tokenizer_parts", refuse)
    ours, theirs = load_model(gguf_path).tokenizer, uncached.tokenizer
    for text in ODD_TEXTS:
        got = ours(text, return_offsets_mapping=True)
        expected = theirs(text, return_offsets_mapping=True)
        assert got["input_ids"] == expected["input_ids"], text
        assert got["offset_mapping"] == expected["offset_mapping"], text
        assert ours.convert_ids_to_tokens(got["input_ids"]) == theirs.convert_ids_to_tokens(
            expected["input_ids"])
        assert ours.decode(got["input_ids"]) == theirs.decode(expected["input_ids"])
    assert ours.all_special_ids == theirs.all_special_ids
    assert (ours.bos_token, ours.eos_token, ours.unk_token, ours.pad_token) == (
        theirs.bos_token, theirs.eos_token, theirs.unk_token, theirs.pad_token)


def test_an_unreadable_kept_tokenizer_is_converted_again(gguf_path, uncached, cache, caplog):
    """The header's tokenizer garbled (its checksums cover the tensors only) while the header
    stays valid JSON: the load converts the GGUF's vocabulary instead, and the reader gets the
    same model."""
    load_model(gguf_path)
    path = cached_file(cache, gguf_path)
    data = path.read_bytes()
    # the kept tokenizer's JSON opens with "{": one byte, so the header keeps its length
    marker = b'\\"backend\\": \\"{'
    start = data.index(marker) + len(marker) - 1
    path.write_bytes(data[:start] + b"[" + data[start + 1:])
    identity = gguf_cache.source_identity(gguf_path)
    assert gguf_cache.read_cache(path, identity) is not None  # the header itself still reads
    with caplog.at_level("WARNING", logger="mha_viz.checkpoints"):
        assert_same_model(load_model(gguf_path), uncached)
    assert "tokenizer" in caplog.text and "unreadable" in caplog.text, caplog.text


@pytest.mark.parametrize("damage", ["flip a weight's byte", "truncate", "garble the header",
                                    "empty"])
def test_a_damaged_cache_is_refused_and_rebuilt(gguf_path, uncached, cache, damage):
    load_model(gguf_path)
    path = cached_file(cache, gguf_path)
    data = bytearray(path.read_bytes())
    if damage == "flip a weight's byte":
        data[len(data) - 1000] ^= 0x40  # inside the last tensor's bytes
    elif damage == "truncate":
        del data[len(data) // 2:]
    elif damage == "garble the header":
        data[8:40] = b"\x00" * 32
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    assert_same_model(load_model(gguf_path), uncached)
    identity = gguf_cache.source_identity(gguf_path)
    assert gguf_cache.read_cache(path, identity) is not None  # written again, whole


def test_a_cache_of_another_source_is_not_used(tmp_path, gguf_path, uncached, cache):
    """The same path holding another GGUF (downloaded again, other weights)."""
    path = tmp_path / "model.gguf"
    path.write_bytes(gguf_path.read_bytes())
    assert_same_model(load_model(path), uncached)
    other = make_llama_checkpoint(tmp_path / "other", d_model=64, n_head=4, seed=1)
    write_llama_gguf(other, path, "Q4_1")
    os.utime(path, ns=(1, 1))  # even an old mtime: the identity reads the file's bytes too
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MHA_VIZ_WEIGHTS_CACHE", "0")
        fresh = load_model(path)
    model = load_model(path)
    assert_same_model(model, fresh)
    ours, before = model.network.state_dict(), uncached.network.state_dict()
    assert any(not torch.equal(ours[name], before[name]) for name in before)


def test_the_cache_folder(monkeypatch, tmp_path, gguf_path):
    monkeypatch.delenv("MHA_VIZ_WEIGHTS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert gguf_cache.cache_folder() == tmp_path / "mha-viz" / "weights"
    for off in ("0", "off"):
        monkeypatch.setenv("MHA_VIZ_WEIGHTS_CACHE", off)
        assert gguf_cache.cache_folder() is None
        load_model(gguf_path)
    assert not (tmp_path / "mha-viz").exists()


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path, monkeypatch, gguf_path, uncached):
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    monkeypatch.setenv("MHA_VIZ_WEIGHTS_CACHE", str(blocked))
    assert_same_model(load_model(gguf_path), uncached)
    assert blocked.read_text() == ""


def test_a_write_that_fails_midway_leaves_no_file(gguf_path, uncached, cache, monkeypatch,
                                                  caplog):
    """The disk fills while the cache is written: the model loaded is whole, the failure is
    logged, no file (whole or partial) is left, and the next load writes it."""
    real = gguf_cache.os.pwrite
    calls = []

    def fill_up(fd, data, offset):
        calls.append(offset)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(gguf_cache.os, "pwrite", fill_up)
    with caplog.at_level("WARNING", logger="mha_viz.checkpoints"):
        assert_same_model(load_model(gguf_path), uncached)
    assert "could not be written" in caplog.text and "No space left" in caplog.text
    assert list(cache.iterdir()) == []
    monkeypatch.setattr(gguf_cache.os, "pwrite", real)
    load_model(gguf_path)
    identity = gguf_cache.source_identity(gguf_path)
    assert gguf_cache.read_cache(cached_file(cache, gguf_path), identity) is not None


def test_weights_changed_after_the_load_do_not_reach_the_cache(gguf_path, cache):
    """The load's tensors become the model's weights (assigned, not copied); changed in place
    after the load, the cache still holds what gguf dequantizes."""
    import gguf

    model = load_model(gguf_path)
    with torch.no_grad():
        for weight in model.network.state_dict().values():
            weight.mul_(0.5)
    cached = gguf_cache.read_cache(cached_file(cache, gguf_path),
                                   gguf_cache.source_identity(gguf_path))
    tensors = cached.lazy_tensors()
    for t in gguf.GGUFReader(str(gguf_path)).tensors:
        expected = gguf.quants.dequantize(t.data, t.tensor_type).reshape(
            tuple(int(n) for n in reversed(t.shape)))
        np.testing.assert_array_equal(tensors[t.name].numpy(), expected.astype(np.float32))


def test_the_fast_tokenizer_equals_transformers_own_over_the_same_backend(gguf_path, tmp_path):
    """fast_tokenizer takes the backend over (no deep copy): it must equal the tokenizer
    transformers builds from a copy of that backend (tokenizer_object=), in what it encodes
    (ids, offsets, special tokens), decodes, names as special and saves."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from mha_viz.checkpoints.gguf_file import fast_tokenizer

    backend, special = GGUFFile(gguf_path).tokenizer_parts()
    theirs = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(backend.to_str()),
                                     **special)
    ours = fast_tokenizer(backend, special)
    assert ours.backend_tokenizer is backend  # taken over, not copied
    texts = [TEXT, "", "  two  spaces\tand a tab\n", "Ünïcödé — 東京 🙂 \u200b", "x" * 300,
             f"{special['bos_token']} inside {special['eos_token']}", "12345 + 678"]
    for text in texts:
        mine = ours(text, return_offsets_mapping=True)
        reference = theirs(text, return_offsets_mapping=True)
        assert mine["input_ids"] == reference["input_ids"], text
        assert mine["offset_mapping"] == reference["offset_mapping"], text
        assert ours.decode(mine["input_ids"]) == theirs.decode(reference["input_ids"])
    pair = ours("first part", "second part")["input_ids"]
    assert pair == theirs("first part", "second part")["input_ids"]
    assert ours.all_special_ids == theirs.all_special_ids
    assert ours.special_tokens_map == theirs.special_tokens_map
    assert (ours.bos_token_id, ours.eos_token_id, ours.unk_token_id, ours.pad_token_id) == (
        theirs.bos_token_id, theirs.eos_token_id, theirs.unk_token_id, theirs.pad_token_id)
    assert ours.backend_tokenizer.to_str() == theirs.backend_tokenizer.to_str()
    ours.save_pretrained(tmp_path / "ours")
    theirs.save_pretrained(tmp_path / "theirs")
    saved = sorted(p.name for p in (tmp_path / "theirs").iterdir())
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == saved
    for name in saved:
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "theirs" / name).read_bytes()


def test_temporary_files_a_killed_write_left_are_removed(gguf_path, cache):
    """A process killed while writing the cache leaves its temporary file (as large as the
    cache): the next write removes it once it is an hour old and its writer is gone, and
    leaves a recent one, or a running writer's, alone."""
    import time

    target = cached_file(cache, gguf_path)
    cache.mkdir(parents=True)
    abandoned = target.with_name(f".{target.name}.999999999.1.tmp")  # no such process
    recent = target.with_name(f".{target.name}.999999998.1.tmp")
    running = target.with_name(f".{target.name}.{os.getpid()}.7.tmp")  # this very process
    other = target.with_name(f".{target.name}.x.tmp")  # not named as the cache names them
    hours_ago = time.time() - 2 * gguf_cache.ABANDONED_AFTER_SECONDS
    for path in (abandoned, recent, running, other):
        path.write_bytes(b"half a cache")
    for path in (abandoned, running, other):
        os.utime(path, (hours_ago, hours_ago))
    load_model(gguf_path)  # converts, and writes the cache
    assert target.is_file()
    assert not abandoned.exists()
    assert recent.exists() and running.exists() and other.exists()


def test_a_load_from_the_cache_maps_it_and_changes_stay_in_memory(gguf_path, uncached, cache,
                                                                   monkeypatch):
    """A load from the cache maps the file whole: the fused gate and up projection (and
    every weight taken as it is) is a view of that map, not a copy, and equals the model
    converted with no cache; weights changed in place after the load change neither the file
    nor the next load."""
    import gguf

    load_model(gguf_path)  # writes the cache
    read_without_the_gguf(monkeypatch)
    model = load_model(gguf_path)
    size = cached_file(cache, gguf_path).stat().st_size
    weights = model.network.state_dict()
    mapped = {name for name, weight in weights.items()
              if weight.untyped_storage().nbytes() == size}
    fused = {name for name in weights if "mlp_in" in name}  # gate and up, fused
    assert fused and fused <= mapped, (fused, mapped)
    assert_same_model(model, uncached)
    with torch.no_grad():
        for weight in weights.values():
            weight.mul_(0.5)
    tensors = gguf_cache.read_cache(cached_file(cache, gguf_path),
                                    gguf_cache.source_identity(gguf_path)).lazy_tensors()
    for t in gguf.GGUFReader(str(gguf_path)).tensors:
        expected = gguf.quants.dequantize(t.data, t.tensor_type).reshape(
            tuple(int(n) for n in reversed(t.shape)))
        np.testing.assert_array_equal(tensors[t.name].numpy(), expected.astype(np.float32))
    assert_same_model(load_model(gguf_path), uncached)
