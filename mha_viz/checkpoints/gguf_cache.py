"""A GGUF's dequantized tensors and its metadata kept on disk as one safetensors file, so the
next load reads (memory-mapped) instead of parsing and dequantizing again: the bundled
SmolLM2's load goes from seconds of numpy to a read of the page cache.

- Where: MHA_VIZ_WEIGHTS_CACHE (a folder; "0" or "off": no cache), by default
  $XDG_CACHE_HOME/mha-viz/weights (~/.cache/mha-viz/weights). One file per GGUF path.
- Which source: the file records the GGUF's identity (core.digest of its size, mtime and its
  first and last MiB), the gguf package's version and this format's; a file made from another
  source (the GGUF replaced, or re-downloaded) is stale: not used, and rewritten.
- Damage: every tensor's checksum (the sum of its 32-bit words, modulo 2^64: any changed byte
  changes it) is in the header and checked on opening; a file that fails any check (truncated,
  garbled, not safetensors) is refused and rewritten. A sum, not a CRC: the check is on the
  way to a server's first figure, and the sum runs at the memory's speed (SmolLM2's 540 MB:
  0.07 s on a 2-core machine, zlib's CRC-32 0.21-0.28 s). Written to a temporary
  name and renamed, so a crash mid-write leaves no half file under the cache's name; the
  temporary file of a writer killed mid-write is removed by the next write of that cache
  file, once it is an hour old and its writer is gone.
- Read as safetensors (a header of JSON and raw bytes, checked by safetensors), never pickle,
  the tensors views of one private memory map of the file; they are float32 as the GGUF's own
  dequantization gives them, bit for bit.
- The tokenizer too: the `tokenizers` JSON the GGUF's vocabulary converts to, and its special
  tokens, so a second load neither converts it (transformers' GGUF converter) nor imports
  transformers for it (0.8-1.4 s of a server's start on this machine): it hands out a
  tokenizer_on_demand.FastTokenizerOnDemand, whose answers were compared with transformers'
  built tokenizer when the cache was written (a GGUF whose answers differ is not cached).
- Size: only GGUFs whose float32 tensors take at most MAX_CACHED_BYTES, and only when the disk
  has room; a cache that cannot be written is skipped (logged), never an error.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import threading
import time
from importlib import metadata as package_metadata
from pathlib import Path

import numpy as np
import torch

from ..core.digest import digest
from ..core.folders import kept_folder
from ..core.errors import CorruptCheckpointError, UnsupportedModelError
from .gguf_file import GGUFFile, fast_tokenizer
from .tokenizer_on_demand import FastTokenizerOnDemand
from .weights import LazyTensors, TensorInfo

log = logging.getLogger("mha_viz.checkpoints")

# bump when what is stored or how it is converted changes (2: the tokenizer kept too;
# 3: word sums in place of CRC-32s; 4: a kept tokenizer was checked against transformers')
FORMAT = "mha-viz gguf cache 4"
MAX_CACHED_BYTES = 2 << 30
_HEAD_BYTES = 1 << 20
_SUM_WIDTH = 16  # hex digits: the header is written once with zeros, then with the sums


def cache_folder() -> Path | None:
    """MHA_VIZ_WEIGHTS_CACHE ("0"/"off": None), by default the user's cache folder."""
    return kept_folder("MHA_VIZ_WEIGHTS_CACHE", "weights")


def source_identity(path: Path) -> str:
    """What makes the cached tensors: the GGUF (size, mtime, first and last MiB), the
    dequantizer's version and this cache's format."""
    stat = path.stat()
    with open(path, "rb") as file:
        head = file.read(_HEAD_BYTES)
        file.seek(max(0, stat.st_size - _HEAD_BYTES))
        tail = file.read(_HEAD_BYTES)
    return digest(FORMAT, _gguf_version(), stat.st_size, stat.st_mtime_ns, head, tail)


def _gguf_version() -> str:
    try:
        return package_metadata.version("gguf")
    except package_metadata.PackageNotFoundError:
        return "unknown"


def cache_path(folder: Path, path: Path) -> Path:
    return folder / f"gguf-{digest(str(path.resolve()))}.safetensors"


class CachedGGUF(GGUFFile):
    """A GGUF read back from the cache: the same metadata, tensor types and tokenizer as the
    file's GGUFFile, its tensors float32 from a memory map."""

    def __init__(self, path: Path, metadata: dict, tensor_types: dict[str, str],
                 tensors: LazyTensors, tokenizer: dict | None = None):
        self.path = Path(path)
        self.metadata, self.tensor_types = metadata, tensor_types
        self._tensors = tensors
        self._kept_tokenizer = tokenizer  # {"backend": tokenizers JSON, "special": {...}}

    def lazy_tensors(self) -> LazyTensors:
        return self._tensors

    def tokenizer(self):
        kept = self._kept_tokenizer
        if kept is not None:
            from tokenizers import Tokenizer

            try:
                backend = Tokenizer.from_str(kept["backend"])
            except Exception as error:  # noqa: BLE001 - a garbled header: convert instead
                log.warning("the weights cache's tokenizer for %s is unreadable (%s): "
                            "converting the GGUF's", self.path.name, error)
            else:
                return FastTokenizerOnDemand(backend, kept["special"])
        return super().tokenizer()


def open_gguf(path: Path) -> GGUFFile:
    """The GGUF at path: from the cache when it holds this very file, else read from the file
    (and the cache written for the next time)."""
    folder = cache_folder()
    if folder is None:
        return GGUFFile(path)
    path = Path(path)
    target = cache_path(folder, path)
    try:
        identity = source_identity(path)
    except OSError:  # unreadable: the GGUF reader says so in its words
        return GGUFFile(path)
    cached = read_cache(target, identity, path)
    if cached is not None:
        return cached
    gguf = GGUFFile(path)
    need = gguf.lazy_tensors().bytes_as(torch.float32)  # refuses what it cannot dequantize
    if need > MAX_CACHED_BYTES or not _has_room(folder, need):
        return gguf
    try:
        return WritingGGUF(path, target, identity, gguf)
    except OSError as error:
        log.warning("the weights cache %s could not be started (%s); loading without it",
                    target, error)
        return gguf


def _has_room(folder: Path, need: int) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return shutil.disk_usage(folder).free > need + need // 10 + (256 << 20)
    except OSError:
        return False


def read_cache(target: Path, identity: str, source: Path | None = None) -> CachedGGUF | None:
    """The cached GGUF (named after source, the GGUF file, in messages), or None when the file
    is absent, stale (another source) or damaged (then it is removed, to be written again)."""
    if not target.is_file():
        return None
    try:
        from safetensors import safe_open

        with safe_open(str(target), framework="pt") as handle:  # the header checked, closed
            meta, names = handle.metadata() or {}, list(handle.keys())
        if meta.get("format") != FORMAT or meta.get("source") != identity:
            log.info("the weights cache %s is of another source: rewriting it", target.name)
            return None
        sums = json.loads(meta["sums"])
        tensors = _mapped(target, names)
        if set(sums) != set(tensors):
            raise ValueError("its checksums do not name its tensors")
        for name, tensor in tensors.items():
            if f"{_word_sum(tensor):0{_SUM_WIDTH}x}" != sums[name]:
                raise ValueError(f"tensor {name!r} fails its checksum")
        metadata = json.loads(meta["metadata"])
        tensor_types = json.loads(meta["tensor_types"])
        tokenizer = json.loads(meta["tokenizer"]) if meta.get("tokenizer") else None
        if tokenizer is not None and not (isinstance(tokenizer.get("backend"), str)
                                          and isinstance(tokenizer.get("special"), dict)):
            raise ValueError("its tokenizer is garbled")
    except Exception as error:  # noqa: BLE001 - any damage: refuse the file, rebuild it
        log.warning("the weights cache %s is damaged (%s: %s): rebuilding it", target.name,
                    type(error).__name__, error)
        target.unlink(missing_ok=True)
        return None
    infos = {name: TensorInfo(t.dtype, tuple(t.shape)) for name, t in tensors.items()}
    return CachedGGUF(source or target, metadata, tensor_types,
                      LazyTensors(infos, tensors.__getitem__), tokenizer)


def _mapped(target: Path, names) -> dict[str, torch.Tensor]:
    """The named float32 tensors of the cache file (its header checked by safetensors) as views
    of one private memory map of the file: tensors it holds side by side are side by side in
    memory, so a family fuses gate and up (or Q, K, V) into one view, not a copy
    (families.TensorSource.cat: SmolLM2's 212 MB of gate and up, 0.1-0.2 s of a start)."""
    with open(target, "rb") as file:
        header_size = struct.unpack("<Q", file.read(8))[0]
        header = json.loads(file.read(header_size))
    data = torch.empty(0, dtype=torch.uint8)
    data.set_(torch.UntypedStorage.from_file(str(target), False, target.stat().st_size))
    start, out = 8 + header_size, {}
    for name in names:
        entry = header[name]
        if entry["dtype"] != "F32":
            raise ValueError(f"tensor {name!r} is {entry['dtype']}, not F32")
        first, last = (start + int(offset) for offset in entry["data_offsets"])
        out[name] = data[first:last].view(torch.float32).view(entry["shape"])
    return out


# a write takes seconds: a temporary file this old whose writer is gone was abandoned
ABANDONED_AFTER_SECONDS = 3600


def _remove_abandoned(target: Path) -> None:
    """The temporary files of target that a process killed mid-write left (no __del__ ran
    in it), each as large as the cache (SmolLM2's: 540 MB): removed once they are an hour old
    and their writer (the pid in the name) is not running; a live writer's are left alone."""
    prefix = f".{target.name}."
    for found in target.parent.glob(f"{prefix}*.tmp"):
        try:
            pid = int(found.name[len(prefix):].split(".")[0])
            if time.time() - found.stat().st_mtime < ABANDONED_AFTER_SECONDS or _running(pid):
                continue
            found.unlink()
            log.info("removed %s, left by a write that did not finish", found.name)
        except (ValueError, OSError):  # not ours by its name, or gone meanwhile
            continue


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's, or not a pid: keep the file
        return True
    return True


def _word_sum(tensor) -> int:
    """The sum of the tensor's bytes read as 32-bit words, modulo 2^64 (float32 tensors only,
    as this cache keeps)."""
    words = tensor.contiguous().numpy().reshape(-1).view(np.uint32)
    return int(np.add.reduce(words, dtype=np.uint64))


class WritingGGUF(CachedGGUF):
    """A GGUF read from its file while its cache is written: each tensor the load reads is
    dequantized once, handed to the load and written at its place in the cache file; finish()
    (after the load) writes the tensors it did not read and the header with the checksums, and
    renames the file into place. The first load costs little more than one without a cache."""

    def __init__(self, path: Path, target: Path, identity: str, gguf: GGUFFile):
        self._source, self._target = gguf.lazy_tensors(), target
        try:  # built now: the header is written once, at its final size
            self._parts = gguf.tokenizer_parts()
            kept = {"backend": self._parts[0].to_str(), "special": self._parts[1]}
        except (CorruptCheckpointError, UnsupportedModelError):  # said by tokenizer(), in turn
            self._parts, kept = None, None
        super().__init__(path, gguf.metadata, gguf.tensor_types,
                         LazyTensors(self._source.infos, self._read), kept)
        self._header, offset = {}, 0
        for name, info in self._source.infos.items():
            size = info.numel * 4
            self._header[name] = {"dtype": "F32", "shape": list(info.shape),
                                  "data_offsets": [offset, offset + size]}
            offset += size
        self._identity = identity
        self._sums = {name: "0" * _SUM_WIDTH for name in self._header}
        self._written: set[str] = set()
        first = self._header_bytes()
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(target)
        self._temporary = target.with_name(
            f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        self._file = open(self._temporary, "wb")
        self._file.write(struct.pack("<Q", len(first)) + first)
        self._file.truncate(8 + len(first) + offset)
        self._data_start, self._header_size = 8 + len(first), len(first)

    def tokenizer(self):
        parts, self._parts = self._parts, None
        if parts is None:
            return super().tokenizer()  # again: from the header's JSON
        built = fast_tokenizer(*parts)  # the backend converted for the header, handed over
        if self._file is not None:  # the next load answers from the kept JSON: as this one?
            from tokenizers import Tokenizer

            kept = self._kept_tokenizer
            found = FastTokenizerOnDemand(Tokenizer.from_str(kept["backend"]),
                                          kept["special"]).differences(built)
            if found:
                self._abandon(OSError("its tokenizer would not answer as transformers' does: "
                                      + "; ".join(found[:3])))
        return built

    def _header_bytes(self) -> bytes:
        self._header["__metadata__"] = {
            "format": FORMAT, "source": self._identity, "sums": json.dumps(self._sums),
            "metadata": json.dumps(self.metadata), "tensor_types": json.dumps(self.tensor_types),
            "tokenizer": json.dumps(self._kept_tokenizer) if self._kept_tokenizer else ""}
        text = json.dumps(self._header, separators=(",", ":")).encode()
        return text + b" " * (-len(text) % 8)  # safetensors pads its header with spaces

    def _read(self, name: str) -> torch.Tensor:
        tensor = self._source[name]
        if self._file is not None and name not in self._written:
            try:
                info = self._source.infos[name]
                if tuple(tensor.shape) != info.shape or tensor.dtype != info.dtype:
                    raise OSError(f"tensor {name!r} does not match its header")
                data = tensor.contiguous().numpy()
                os.pwrite(self._file.fileno(), memoryview(data).cast("B"),
                          self._data_start + self._header[name]["data_offsets"][0])
                self._sums[name] = f"{_word_sum(tensor):0{_SUM_WIDTH}x}"
                self._written.add(name)
            except OSError as error:
                self._abandon(error)
        return tensor

    def finish(self) -> None:
        for name in self._source.infos:
            if self._file is None:
                return
            if name not in self._written:
                self._read(name)
        if self._file is None:
            return
        try:
            final = self._header_bytes()
            if len(final) != self._header_size:  # fixed-width sums: cannot happen
                raise OSError("the cache's header changed size")
            os.pwrite(self._file.fileno(), final, 8)
            self._file.close()
            self._file = None
            os.replace(self._temporary, self._target)
        except OSError as error:
            self._abandon(error)

    def __del__(self):  # a load that failed before finish(): no temporary file left behind
        if getattr(self, "_file", None) is not None:
            self._file.close()
            self._temporary.unlink(missing_ok=True)

    def _abandon(self, error: OSError) -> None:
        log.warning("the weights cache %s could not be written (%s); loading without it",
                    self._target, error)
        if self._file is not None:
            self._file.close()
            self._file = None
        self._temporary.unlink(missing_ok=True)
