"""Weights read a tensor at a time (checkpoints/weights.py) and the size of a model known
before any of it is read: a model over the memory free for it is refused with the numbers;
sharded checkpoints load as one; a damaged safetensors header is a clear message."""

import json
import shutil

import numpy as np
import pytest
import torch

from mha_viz import load_model
from mha_viz.checkpoints import weights
from mha_viz.checkpoints.weights import format_bytes
from mha_viz.core.errors import CorruptCheckpointError, ModelTooLargeError


def _weights_bytes(folder, dtype) -> int:
    return weights.open_weights(folder).bytes_as(dtype)


def test_the_size_is_read_from_the_header_and_halves_in_bfloat16(gpt2_folder):
    from safetensors.torch import load_file

    stored = load_file(str(gpt2_folder / "model.safetensors"))
    assert _weights_bytes(gpt2_folder, torch.float32) == sum(
        t.numel() * 4 for t in stored.values())
    assert _weights_bytes(gpt2_folder, torch.bfloat16) * 2 == _weights_bytes(gpt2_folder,
                                                                             torch.float32)


def test_a_model_over_the_limit_is_refused_before_a_weight_is_read(gpt2_folder, monkeypatch):
    reads = []
    read = weights.LazyTensors.__getitem__
    monkeypatch.setattr(weights.LazyTensors, "__getitem__",
                        lambda self, name: reads.append(name) or read(self, name))
    need = _weights_bytes(gpt2_folder, torch.float32)
    limit = int(need * 0.8)  # under float32's need, over bfloat16's
    monkeypatch.setenv("MHA_VIZ_MODEL_MEMORY_MB", str(limit / 2**20))
    with pytest.raises(ModelTooLargeError) as refused:
        load_model(gpt2_folder)
    assert reads == []  # nothing was read
    message = str(refused.value)
    assert format_bytes(need) in message and format_bytes(limit) in message
    assert "float32" in message and "dtype='bfloat16'" in message
    assert format_bytes(need // 2) in message
    model = load_model(gpt2_folder, dtype="bfloat16")  # what it advised fits
    assert model.info.dtype == "bfloat16" and reads
    monkeypatch.setenv("MHA_VIZ_MODEL_MEMORY_MB", str(need / 4 / 2**20))
    with pytest.raises(ModelTooLargeError, match="no dtype mha-viz runs in makes them fit"):
        load_model(gpt2_folder, dtype="bfloat16")


def test_a_sharded_checkpoint_loads_as_one(tmp_path, gpt2_folder, gpt2_model):
    from transformers import AutoModelForCausalLM

    folder = tmp_path / "sharded"
    shutil.copytree(gpt2_folder, folder)
    (folder / "model.safetensors").unlink()
    AutoModelForCausalLM.from_pretrained(str(gpt2_folder)).save_pretrained(
        str(folder), max_shard_size="100KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    text = "A sharded checkpoint reads the same."
    assert np.array_equal(load_model(folder).trace(text).attentions,
                          gpt2_model.trace(text).attentions)


@pytest.mark.parametrize("damage", ["header_size", "header_json", "offsets", "cut"])
def test_a_damaged_safetensors_file_is_a_clear_message(tmp_path, gpt2_folder, damage):
    folder = tmp_path / damage
    shutil.copytree(gpt2_folder, folder)
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    if damage == "header_size":
        data[:8] = (len(data) * 2).to_bytes(8, "little")
    elif damage == "header_json":
        data[8:12] = b"\xff\xfe{{"
    elif damage == "offsets":
        name = next(n for n in header if n != "__metadata__")
        header[name]["data_offsets"][1] += 4
        text = json.dumps(header, separators=(",", ":")).encode()
        assert len(text) <= size
        data[8:8 + size] = text + b" " * (size - len(text))
    else:
        data = data[:len(data) - 1000]
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="safetensors|could not be read"):
        load_model(folder)


def test_each_tensor_is_read_once(gpt2_folder, monkeypatch):
    read = weights.LazyTensors.__getitem__
    reads = []
    monkeypatch.setattr(weights.LazyTensors, "__getitem__",
                        lambda self, name: reads.append(name) or read(self, name))
    load_model(gpt2_folder)
    assert reads and len(reads) == len(set(reads))
