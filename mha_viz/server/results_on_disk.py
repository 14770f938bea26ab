"""Results kept on disk between server starts: what the warm start and "prepare this lesson"
computed (the pruning page's score, ablation sweep, gradient importance and pruning curve; the
Long range page's needle study, sinks, window losses and per-head window costs) is written
here, so the next start of the server has it at once instead of recomputing the 270-head
sweep while a class waits.

A result is found again only for the same question asked of the same model by the same code:
its name is the project's digest (core.digest) of the question (the stored result's key: the
function and its arguments), the text's token ids, a fingerprint of the weights, and the
library's own source. Files hold plain arrays
(numpy's .npz, read with allow_pickle=False); nothing on disk is ever unpickled. The text
itself is not written. The folder keeps its newest MAX_FILES results.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import weakref
import zlib
from pathlib import Path

import numpy as np
import torch

from ..analysis.long_range import (NeedleGrid, NeedleStudy, RetrievalCounts, SinkScores,
                                   SinkStats, WindowCosts, WindowLosses)
from ..analysis.pruning import PruningCurve
from ..core.digest import digest

log = logging.getLogger("mha_viz")
MAX_FILES = 256
# results kept field by field: arrays as arrays, the rest (numbers, strings, tuples of them)
# as JSON, a nested result by the same rule
FIELD_RESULTS = {cls.__name__: cls for cls in (NeedleGrid, NeedleStudy, RetrievalCounts,
                                               SinkScores, SinkStats, WindowCosts,
                                               WindowLosses)}


@functools.cache
def source_fingerprint() -> str:
    """A digest of the library's source: results computed by other code are not reused."""
    package = Path(__file__).resolve().parents[1]  # mha_viz/, not server/
    return digest([(str(path.relative_to(package)), path.read_bytes())
                   for path in sorted(package.rglob("*.py"))])


def weights_fingerprint(network: torch.nn.Module) -> str:
    """A digest of a network's weights: every tensor's name, shape, dtype and the CRC-32 of
    all its bytes. Another checkpoint, a fine-tuned copy or another quantisation gives another
    fingerprint; about 0.1 s for 135M parameters (zlib's CRC runs at memory speed, where a
    cryptographic hash over every byte would take seconds)."""
    described = []
    for name, tensor in network.state_dict().items():
        # its bytes, whatever the dtype (numpy has no bfloat16) or device
        data = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
        described.append((name, tuple(tensor.shape), str(tensor.dtype),
                          zlib.crc32(data.data if data.size else b"")))
    return digest(described)


def _fields_of(value, arrays: dict, prefix: str = "f") -> dict:
    """A result's fields as JSON, its arrays put in arrays under their path."""
    fields = {}
    for field in dataclasses.fields(value):
        item, path = getattr(value, field.name), f"{prefix}.{field.name}"
        if type(item).__name__ in FIELD_RESULTS:
            fields[field.name] = {"result": type(item).__name__,
                                  "fields": _fields_of(item, arrays, path)}
        elif isinstance(item, np.ndarray):
            arrays[path] = item
            fields[field.name] = {"array": path}
        else:
            fields[field.name] = {"value": np.asarray(item).tolist()}
    return fields


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _result_of(name: str, fields: dict, arrays) -> object:
    values = {}
    for field, held in fields.items():
        if "result" in held:
            values[field] = _result_of(held["result"], held["fields"], arrays)
        elif "array" in held:
            values[field] = arrays[held["array"]]
        else:
            values[field] = _tuples(held["value"])
    return FIELD_RESULTS[name](**values)


def _encode(value) -> dict[str, np.ndarray]:
    if type(value).__name__ in FIELD_RESULTS:
        arrays: dict[str, np.ndarray] = {}
        fields = _fields_of(value, arrays)
        return {"kind": np.array("fields"), "result": np.array(type(value).__name__),
                "fields": np.array(json.dumps(fields)), **arrays}
    if isinstance(value, PruningCurve):
        removed = [np.asarray(step, dtype=np.int64).reshape(-1, 2) for step in value.removed]
        return {"kind": np.array("pruning_curve"), "fractions": np.asarray(value.fractions),
                "scores": np.asarray(value.scores), "by": np.array(value.by),
                "removed": (np.concatenate(removed) if removed
                            else np.zeros((0, 2), dtype=np.int64)),
                "removed_counts": np.array([len(step) for step in removed], dtype=np.int64),
                "masks": (np.stack(value.masks) if value.masks else np.zeros((0, 0, 0)))}
    if isinstance(value, np.ndarray):
        return {"kind": np.array("array"), "value": value}
    if isinstance(value, (float, int, np.floating)) and not isinstance(value, bool):
        return {"kind": np.array("float"), "value": np.array(float(value))}
    raise TypeError(f"cannot keep a {type(value).__name__} on disk")


def _decode(arrays) -> object:
    kind = str(arrays["kind"])
    if kind == "array":
        return arrays["value"]
    if kind == "float":
        return float(arrays["value"])
    if kind == "fields":
        return _result_of(str(arrays["result"]), json.loads(str(arrays["fields"])), arrays)
    if kind == "pruning_curve":
        ends = np.cumsum(arrays["removed_counts"])
        removed = [[(int(l), int(h)) for l, h in step]
                   for step in np.split(arrays["removed"], ends[:-1])] if len(ends) else []
        return PruningCurve(fractions=arrays["fractions"], scores=arrays["scores"],
                            removed=removed, by=str(arrays["by"]), masks=list(arrays["masks"]))
    raise ValueError(f"unknown kind {kind!r}")


class ResultsOnDisk:
    """A folder of results, each named by what it answers (see the module's docstring)."""

    def __init__(self, folder: str | os.PathLike, max_files: int = MAX_FILES):
        self.folder = Path(folder)
        self.max_files = max_files
        # per network object, not per id(): a freed network's id can be reused by another
        self._weights: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def name(self, model, question: str, text: str) -> str:
        """The file name of the answer to ``question`` (a stored result's key: the function
        and its arguments) about ``text`` from ``model``."""
        if model.network not in self._weights:
            self._weights[model.network] = weights_fingerprint(model.network)
        ids = [int(i) for i in model.encode(text).input_ids]
        return digest(question, ids, self._weights[model.network], source_fingerprint()) + ".npz"

    def load(self, name: str):
        """The result stored under ``name``, or None (absent, or unreadable: then removed)."""
        path = self.folder / name
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as arrays:
                value = _decode(arrays)
            os.utime(path)  # recently used: kept longest
            return value
        except Exception as error:  # noqa: BLE001 - a damaged file is recomputed, not fatal
            log.warning("ignoring the unreadable stored result %s (%s)", name,
                        type(error).__name__)
            path.unlink(missing_ok=True)
            return None

    def save(self, name: str, value) -> bool:
        """Store ``value`` under ``name`` (written whole or not at all); False if the folder
        cannot be written (a read-only disk only costs the next start its head start)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            partial = self.folder / f".{name}.{os.getpid()}.part"
            with partial.open("wb") as handle:
                np.savez(handle, **_encode(value))
            partial.replace(self.folder / name)
            self._keep_newest()
            return True
        except OSError as error:
            log.warning("could not store a result in %s: %s", self.folder, error.strerror)
            return False

    def _keep_newest(self) -> None:
        files = sorted(self.folder.glob("*.npz"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in files[self.max_files:]:
            old.unlink(missing_ok=True)
