"""A checkpoint's tensors read one at a time, and their size known before any is read.

A model's weights are never all in memory twice: each file is opened as a LazyTensors, whose
tensors are read from disk when a family asks for one, kept (in the dtype they will run in,
or the file's if that is narrower) until the stack takes them, and converted one by one. The
peak is the model in its dtype plus one tensor, not the file's copy plus ours.

- safetensors: the header (a length and a JSON object) gives every tensor's dtype, shape and
  byte range; a tensor is read with one seek and one read into its own buffer (not through
  a memory map, whose pages would stay resident beside the copy);
- sharded checkpoints: the index's weight_map says which file holds each tensor;
- pytorch_model.bin: torch.load(weights_only=True, mmap=True), which reads the tensors'
  shapes from the pickle and their bytes when touched (and refuses anything but tensors);
- GGUF: gguf_file.GGUFFile dequantizes one tensor at a time.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.errors import CorruptCheckpointError, ModelTooLargeError
from ..engine.placement import Placement, model_memory_limit

SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
MAX_HEADER_BYTES = 100 << 20  # the format's own limit


@dataclass(frozen=True)
class TensorInfo:
    """A tensor's dtype and shape as its file stores it."""
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count

    def bytes_as(self, dtype: torch.dtype) -> int:
        """Its bytes once loaded: floating tensors in `dtype`, the others as stored."""
        kept = dtype if self.dtype.is_floating_point else self.dtype
        return self.numel * kept.itemsize


class UnreadableTensorError(CorruptCheckpointError):
    """A tensor's bytes could not be read (a truncated or damaged file)."""


class LazyTensors(Mapping):
    """name -> tensor, each read from disk when asked for (and not kept here)."""

    def __init__(self, infos: dict[str, TensorInfo], read: Callable[[str], torch.Tensor]):
        self.infos = infos
        self._read = read

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self.infos:
            raise KeyError(name)
        try:
            return self._read(name)
        except CorruptCheckpointError:
            raise
        except Exception as error:  # an OS, pickle or zip error while reading its bytes
            raise UnreadableTensorError(f"tensor {name[:80]!r}: {error}") from error

    def __contains__(self, name) -> bool:  # Mapping's own would read the tensor to know
        return name in self.infos

    def __iter__(self) -> Iterator[str]:
        return iter(self.infos)

    def __len__(self) -> int:
        return len(self.infos)

    def bytes_as(self, dtype: torch.dtype) -> int:
        return sum(info.bytes_as(dtype) for info in self.infos.values())


def _bad(path: Path, why: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"'{path.name}' is not a readable safetensors file: {why}. "
                                  f"It may be truncated or damaged: download it again.")


def open_safetensors(path: Path) -> LazyTensors:
    """The tensors of one .safetensors file, every entry of its header checked against the
    file's size before anything is read."""
    size = path.stat().st_size
    with open(path, "rb") as file:
        head = file.read(8)
        if len(head) < 8:
            raise _bad(path, "it is shorter than its header")
        (header_bytes,) = struct.unpack("<Q", head)
        if header_bytes > min(MAX_HEADER_BYTES, size - 8):
            raise _bad(path, f"its header claims {header_bytes:,} bytes")
        try:
            header = json.loads(file.read(header_bytes))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise _bad(path, "its header is not JSON") from None
    if not isinstance(header, dict):
        raise _bad(path, "its header is not a JSON object")
    data_start = 8 + header_bytes
    infos, ranges = {}, {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = SAFETENSORS_DTYPES[entry["dtype"]]
            shape = tuple(int(n) for n in entry["shape"])
            start, end = (int(n) for n in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise _bad(path, f"the entry of tensor {name[:80]!r} is malformed or of an unknown "
                             f"dtype") from None
        info = TensorInfo(dtype, shape)
        if min(shape, default=0) < 0 or not 0 <= start <= end <= size - data_start \
                or end - start != info.bytes_as(dtype):
            raise _bad(path, f"tensor {name[:80]!r} does not fit the file")
        infos[name], ranges[name] = info, (data_start + start, end - start)

    def read(name: str) -> torch.Tensor:
        offset, length = ranges[name]
        buffer = torch.empty(length, dtype=torch.uint8)
        with open(path, "rb") as file:
            file.seek(offset)
            got = file.readinto(memoryview(buffer.numpy())) if length else 0
        if got != length:
            raise _bad(path, f"tensor {name[:80]!r} is cut short")
        info = infos[name]
        return buffer.view(info.dtype).reshape(info.shape)

    return LazyTensors(infos, read)


def open_bin(path: Path) -> LazyTensors:
    """A pytorch_model.bin: tensors only (weights_only=True refuses a pickle that would
    build any other object), memory-mapped when the file is in torch's zip format."""
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as error:
        if "mmap" not in str(error):  # the legacy (non-zip) format cannot be mapped
            raise
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor)
                                              for t in state.values()):
        raise CorruptCheckpointError(f"'{path.name}' does not hold a state dict of tensors")
    infos = {name: TensorInfo(t.dtype, tuple(t.shape)) for name, t in state.items()}
    return LazyTensors(infos, state.__getitem__)


class ShardedTensors(LazyTensors):
    """Several files' tensors as one mapping (a sharded checkpoint)."""

    def __init__(self, shards: list[LazyTensors]):
        owner = {name: shard for shard in shards for name in shard.infos}
        super().__init__({name: shard.infos[name] for name, shard in owner.items()},
                         lambda name: owner[name][name])


def open_weights(folder: Path) -> LazyTensors:
    """The tensors of a Hugging Face folder's weights: model.safetensors, its sharded index,
    pytorch_model.bin or its index, whichever is there first."""
    for single, index, opener in (("model.safetensors", "model.safetensors.index.json",
                                   open_safetensors),
                                  ("pytorch_model.bin", "pytorch_model.bin.index.json",
                                   open_bin)):
        if (folder / single).is_file():
            return opener(folder / single)
        if (folder / index).is_file():
            weight_map = json.loads((folder / index).read_text())["weight_map"]
            files = sorted(set(weight_map.values()))
            for name in files:  # shard names from a file: nothing outside the folder
                if os.path.basename(name) != name or name.startswith("."):
                    raise CorruptCheckpointError(f"{index} names a shard outside its folder")
            return ShardedTensors([opener(folder / name) for name in files])
    raise FileNotFoundError(folder)


def check_fits(need: int, where: Placement, limit: int | None = None, name: str = "the model"):
    """Refuse, before a byte of the weights is read, a model whose weights in where.dtype
    take more than the memory free for them (limit, or placement.model_memory_limit): with
    both sizes, and the dtype that would fit."""
    limit = model_memory_limit(where.device) if limit is None else limit
    if limit is None or need * HEADROOM <= limit:
        return
    half = need * torch.bfloat16.itemsize // where.dtype.itemsize  # in bfloat16
    if half < need and half * HEADROOM <= limit:
        advice = (f"in bfloat16 they take {format_bytes(half)} and fit: load it with "
                  f"dtype='bfloat16' (the app: MHA_VIZ_DTYPE=bfloat16)")
    else:
        advice = ("no dtype mha-viz runs in makes them fit: use a machine (or a GPU) with "
                  "more memory")
    raise ModelTooLargeError(
        f"{name} needs {format_bytes(need)} for its weights in {where.dtype_name}, but "
        f"{format_bytes(limit)} is free for it on {where.device_name}; {advice}.")


def format_bytes(size: int) -> str:
    return f"{size / 2**30:.2f} GB" if size >= 2**30 else f"{size / 2**20:.1f} MB"


# the weights' bytes times this must fit: the interpreter and one forward's activations too
HEADROOM = 1.1
