"""Bad input: one documented exception type per kind, with a message a person can act on."""

import json
import os
import shutil
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import mha_viz
from mha_viz import (CheckpointNotFoundError, CorruptCheckpointError, InputError, LoadError,
                     NotAllowedError, OfflineError, UnsupportedModelError, load_model)


@pytest.mark.parametrize("text", ["", "   ", "\n\t  \n", None])
def test_empty_text_is_an_input_error(bert_model, text):
    with pytest.raises(InputError, match="empty|no text"):
        bert_model.trace(text)


def test_control_characters_only_is_an_input_error(bert_model):
    with pytest.raises(InputError, match="no tokens"):
        bert_model.trace("\x00\x01\x02")


@pytest.mark.parametrize("text", ["emoji 🙂👍🏽 and ZWJ 👨‍👩‍👧", "RTL: שלום עולם مرحبا",
                                  "lone surrogate \ud800 here", "combining e\u0301 a\u0308",
                                  "\u200b\u200bzero width", "NUL \x00 inside"])
@pytest.mark.parametrize("fixture", ["gpt2_model", "bert_model"])
def test_odd_unicode_traces(request, fixture, text):
    model = request.getfixturevalue(fixture)
    trace = model.trace(text)
    assert trace.n_tokens >= 2
    assert np.allclose(trace.attentions.sum(-1), 1, atol=1e-5)


@pytest.mark.parametrize("fixture", ["gpt2_model", "bert_model"])
def test_over_long_text_is_truncated_and_says_so(request, fixture):
    model = request.getfixturevalue(fixture)
    text = "the cat sat on the mat and " * 100
    trace = model.trace(text)
    assert trace.truncated
    assert trace.n_tokens == model.info.max_positions
    assert trace.n_tokens_before_truncation > model.info.max_positions
    if model.info.model_type == "bert":  # the closing [SEP] survives truncation
        assert trace.tokens[-1] == "[SEP]"
    short = model.trace("the cat sat")
    assert not short.truncated and short.n_tokens_before_truncation == short.n_tokens


def test_max_tokens_truncates(bert_model):
    trace = bert_model.trace("one two three four five six seven eight", max_tokens=5)
    assert trace.n_tokens == 5 and trace.truncated


def test_gpt2_refuses_a_sentence_pair(gpt2_model):
    with pytest.raises(InputError, match="pair"):
        gpt2_model.trace("a", text_pair="b")


def test_bad_token_ids(gpt2_model):
    with pytest.raises(InputError):
        gpt2_model.trace_ids([])
    with pytest.raises(InputError, match="lie in"):
        gpt2_model.trace_ids([0, gpt2_model.info.vocab_size])
    with pytest.raises(InputError, match="context"):
        gpt2_model.trace_ids([1] * (gpt2_model.info.max_positions + 1))


def test_token_types_the_model_has_no_embedding_for(bert_model, gpt2_model):
    with pytest.raises(InputError, match="token_type_ids must be 0..1"):
        bert_model.trace_ids([101, 102], token_type_ids=[0, 2])
    with pytest.raises(InputError, match="token_type_ids must be 0..0"):
        gpt2_model.trace_ids([1, 2], token_type_ids=[0, 1])


def test_bad_head_mask_shape(gpt2_model):
    with pytest.raises(InputError, match="shape"):
        gpt2_model.score("the cat sat on the mat", head_mask=np.ones((3, 3)))


def test_score_needs_two_tokens_for_gpt2(gpt2_model):
    with pytest.raises(InputError, match="two tokens"):
        gpt2_model.score("The")


def test_folder_without_config(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(CheckpointNotFoundError, match="no config.json") as info:
        load_model(tmp_path)
    assert isinstance(info.value, LoadError)


def test_missing_path_and_nonsense_name(tmp_path):
    with pytest.raises(CheckpointNotFoundError):
        load_model(tmp_path / "does-not-exist")
    with pytest.raises(CheckpointNotFoundError):
        load_model("no such model!!")
    with pytest.raises(CheckpointNotFoundError):
        load_model("")


def test_unsupported_architecture(tmp_path, bert_folder):
    shutil.copytree(bert_folder, tmp_path / "mamba")
    (tmp_path / "mamba" / "config.json").write_text(json.dumps(
        {"model_type": "mamba", "architectures": ["MambaForCausalLM"], "d_model": 64}))
    with pytest.raises(UnsupportedModelError, match="'mamba' model .* mha-viz runs .*t5"):
        load_model(tmp_path / "mamba")


def test_garbled_config(tmp_path, bert_folder):
    shutil.copytree(bert_folder, tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text("{not json")
    with pytest.raises(CorruptCheckpointError, match="config.json"):
        load_model(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(CorruptCheckpointError, match="lacks"):
        load_model(tmp_path / "m")


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "delete"])
def test_corrupted_weights(tmp_path, gpt2_folder, damage):
    folder = tmp_path / "m"
    shutil.copytree(gpt2_folder, folder)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    if damage == "truncate":
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        weights.write_bytes(b"\x07" * 1000 + data[1000:])
    elif damage == "empty":
        weights.write_bytes(b"")
    else:
        weights.unlink()
    with pytest.raises(CorruptCheckpointError):
        load_model(folder)


def test_weights_that_do_not_match_config(tmp_path, gpt2_folder):
    folder = tmp_path / "m"
    shutil.copytree(gpt2_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    config["n_embd"] = 32
    config["n_head"] = 4
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CorruptCheckpointError, match="shape"):
        load_model(folder)


class Evil:
    def __reduce__(self):
        return (shutil.rmtree, ("/nonexistent-mha-viz-test",))


def test_malicious_pickled_bin_is_refused(tmp_path, gpt2_folder):
    folder = tmp_path / "m"
    shutil.copytree(gpt2_folder, folder)
    (folder / "model.safetensors").unlink()
    state = {"wte.weight": torch.zeros(2, 2), "payload": Evil()}
    torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(CorruptCheckpointError, match="refused|could not be read"):
        load_model(folder)


def test_legacy_bin_checkpoint_loads(tmp_path, bert_folder, bert_model):
    """An old-style pytorch_model.bin (with "bert." prefixes, LayerNorm gamma/beta) loads
    through torch.load(weights_only=True) and gives the same maps as the safetensors file."""
    from safetensors.torch import load_file

    folder = tmp_path / "bin"
    shutil.copytree(bert_folder, folder)
    state = load_file(str(folder / "model.safetensors"))
    legacy = {}
    for name, tensor in state.items():
        name = name if name.startswith(("bert.", "cls.")) else "bert." + name
        legacy[name.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta")] = tensor
    torch.save(legacy, folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    model = load_model(folder)
    assert model.info.score_kind == bert_model.info.score_kind
    assert np.array_equal(model.trace("hello world").attentions,
                          bert_model.trace("hello world").attentions)


def test_prefixless_and_prefixed_names_load_the_same(tmp_path, gpt2_folder):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "m"
    shutil.copytree(gpt2_folder, folder)
    state = load_file(str(folder / "model.safetensors"))
    save_file({k.removeprefix("transformer."): v.contiguous() for k, v in state.items()},
              str(folder / "model.safetensors"))
    a = load_model(gpt2_folder).trace("the cat sat").attentions
    b = load_model(folder).trace("the cat sat").attentions
    assert np.array_equal(a, b)


def test_hub_id_offline_fails_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))

    # A network whose DNS or connect hangs: the probe must give up on its own clock.
    def hanging_connect(*args, **kwargs):
        time.sleep(30)
        raise OSError("unreachable")

    monkeypatch.setattr(socket, "create_connection", hanging_connect)
    start = time.monotonic()
    with pytest.raises(OfflineError, match="not in the local Hugging Face cache"):
        load_model("gpt2")
    assert time.monotonic() - start < 10


def test_hub_offline_env(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(OfflineError):
        load_model("bert-base-uncased")
    assert time.monotonic() - start < 10


def test_allow_list_blocks_other_folders(tmp_path, gpt2_folder):
    allowed = [tmp_path / "allowed"]
    allowed[0].mkdir()
    with pytest.raises(NotAllowedError, match="not a checkpoint this server offers"):
        load_model(gpt2_folder, local_dirs=allowed)
    shutil.copytree(gpt2_folder, tmp_path / "allowed" / "m")
    assert load_model(tmp_path / "allowed" / "m", local_dirs=allowed).info.model_type == "gpt2"
    # ".." cannot climb out of the allowed folder
    with pytest.raises(NotAllowedError):
        load_model(tmp_path / "allowed" / ".." / "elsewhere", local_dirs=allowed)
    # without local_dirs (a notebook, the command line) any folder is read
    assert load_model(gpt2_folder).info.model_type == "gpt2"


def test_every_refused_or_missing_path_gets_the_same_message(tmp_path, gpt2_folder):
    """A visitor probing paths learns nothing: outside, missing, a file, a loop, a name too
    long, a NUL, relative climbs all give one message, which names no path."""
    from mha_viz.checkpoints import REFUSED_PATH, resolve

    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "loop").symlink_to(allowed / "loop")
    (allowed / "escape").symlink_to("/etc")
    (allowed / "notes.txt").write_text("x")
    probes = ["/etc", "/proc/self", "../../etc", "./../../../etc/passwd", "/usr/share",
              "/no/such/folder", str(gpt2_folder), str(allowed / "missing"),
              str(allowed / "loop"), str(allowed / "escape"), str(allowed / "notes.txt"),
              "/" + "a" * 300, str(allowed / ("b" * 300)), "/tmp/\0x", "~/", "~root",
              "C:\\Windows"]
    messages = set()
    for probe in probes:
        with pytest.raises(NotAllowedError) as info:
            resolve(probe, local_dirs=[allowed])
        messages.add(str(info.value))
    assert messages == {REFUSED_PATH}
    assert "/" not in REFUSED_PATH
    # Inside the allowed folder, a real folder still gets its helpful message.
    (allowed / "empty").mkdir()
    with pytest.raises(CheckpointNotFoundError, match="no config.json"):
        resolve(str(allowed / "empty"), local_dirs=[allowed])


def test_default_allowed_folders_are_the_hub_cache_and_the_models_folder(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub_constants

    from mha_viz.checkpoints import allowed_dirs
    monkeypatch.delenv("MHA_VIZ_ALLOWED_DIRS", raising=False)
    monkeypatch.delenv("MHA_VIZ_MODELS_DIR", raising=False)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert allowed_dirs(tmp_path / "models") == [(tmp_path / "hub").resolve(),
                                                  (tmp_path / "models").resolve()]
    monkeypatch.setenv("MHA_VIZ_MODELS_DIR", str(tmp_path / "srv"))
    assert allowed_dirs(tmp_path / "models")[1] == (tmp_path / "srv").resolve()
    monkeypatch.setenv("MHA_VIZ_ALLOWED_DIRS", os.pathsep.join([str(tmp_path / "a"), "", "/x"]))
    assert allowed_dirs(tmp_path / "models") == [(tmp_path / "a").resolve(), Path("/x")]


def test_every_error_is_documented_and_exported():
    for name in ("InputError", "LoadError", "CheckpointNotFoundError", "UnsupportedModelError",
                 "CorruptCheckpointError", "OfflineError", "NotAllowedError", "TraceFileError"):
        error = getattr(mha_viz, name)
        assert issubclass(error, mha_viz.MhaVizError) and error.__doc__


def test_concurrent_traces_from_threads_are_correct(bert_model):
    """App sessions share one Model: threads must not corrupt each other's tokenization."""
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"sentence number {i} " * (1 + i % 7) + "the end" for i in range(24)]
    expected = {t: bert_model.trace(t, max_tokens=16 + i % 5).token_ids
                for i, t in enumerate(texts)}
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda it: bert_model.trace(it[1], max_tokens=16 + it[0] % 5),
                             enumerate(texts)))
    assert [g.token_ids for g in got] == [expected[t] for t in texts]


def test_models_load_concurrently_in_fresh_interpreter(gpt2_folder, bert_folder):
    """The app loads models from several session threads at once; transformers' lazy names
    must not race (a fresh process, so nothing is imported yet)."""
    import subprocess
    import sys

    script = f"""
import sys
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from mha_viz import load_model
folders = [{str(gpt2_folder)!r}, {str(bert_folder)!r}] * 3
with ThreadPoolExecutor(6) as pool:
    models = list(pool.map(load_model, folders))
print(sorted(m.info.model_type for m in models))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str(["bert"] * 3 + ["gpt2"] * 3)
