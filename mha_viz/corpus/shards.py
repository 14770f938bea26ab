"""Shards: a corpus's segments in fixed groups, the unit a worker runs, a checkpoint keeps and
a resumed run skips. Their size does not depend on the number of workers, so a run resumed
with more or fewer workers (or another engine) reads the same shards."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from ..core.digest import digest
from ..core.errors import InputError
from .results import CorpusResult

SHARD_SEGMENTS = 64  # segments per shard: a few seconds of work for a small model


@dataclass(frozen=True)
class Shard:
    index: int
    ids: list[list[int]]

    @property
    def digest(self) -> str:
        """What the shard's segments are (core.digest of their ids): a resumed run checks
        it."""
        return digest(self.ids)

    @property
    def n_tokens(self) -> int:
        return sum(len(s) for s in self.ids)


def shards_of(segments: Iterable[list[int]], size: int = SHARD_SEGMENTS) -> Iterator[Shard]:
    """Consecutive groups of ``size`` segments, as they come."""
    if int(size) < 1:
        raise InputError(f"a shard holds at least one segment, got {size}")
    batch: list[list[int]] = []
    index = 0
    for ids in segments:
        batch.append(ids)
        if len(batch) == size:
            yield Shard(index, batch)
            index, batch = index + 1, []
    if batch:
        yield Shard(index, batch)


class Checkpoint:
    """A folder of finished shards' results, for a run that must survive an interruption.

    manifest.json holds what the run is (model, statistics, segment length, shard size,
    input, ...): a folder made by another run is refused, naming what differs, rather than
    mixed in. Each finished shard is shard-NNNNNN.npz with its digest; a resumed run reuses
    it only when the shard it reads now has the same segments."""

    def __init__(self, folder, identity: dict):
        self.folder = Path(folder)
        self.identity = json.loads(json.dumps(identity))  # plain JSON types, as read back
        if self.folder.exists() and not self.folder.is_dir():
            raise InputError(f"the checkpoint '{self.folder.name}' is a file, not a folder")
        self.folder.mkdir(parents=True, exist_ok=True)
        manifest = self.folder / "manifest.json"
        if manifest.is_file():
            try:
                kept = json.loads(manifest.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                raise InputError(f"the checkpoint '{self.folder.name}' has an unreadable "
                                 f"manifest.json") from None
            differ = sorted(k for k in set(kept) | set(self.identity)
                            if kept.get(k) != self.identity.get(k))
            if differ:
                shown = "; ".join(f"{k}: {kept.get(k)!r} there, {self.identity.get(k)!r} now"
                                  for k in differ[:4])
                raise InputError(f"the checkpoint '{self.folder.name}' belongs to another run "
                                 f"({shown}): resume with the same model, input and settings, "
                                 f"or give a new folder")
        else:
            _write_atomically(manifest, json.dumps(self.identity, indent=1).encode())

    def _path(self, index: int) -> Path:
        return self.folder / f"shard-{index:06d}.npz"

    def load(self, shard: Shard) -> CorpusResult | None:
        """The shard's kept result, or None when it has not finished."""
        path = self._path(shard.index)
        if not path.is_file():
            return None
        try:
            result = CorpusResult.load(path)
        except (OSError, ValueError, KeyError):
            return None  # cut off while being written: run it again
        if result.info.get("shard_digest") != shard.digest:
            raise InputError(f"the checkpoint '{self.folder.name}' holds another input's shard "
                             f"{shard.index}: the input changed since; give a new folder")
        return result

    def save(self, shard: Shard, result: CorpusResult) -> None:
        kept = CorpusResult(result.moments, result.n_segments, result.n_tokens,
                            {**result.info, "shard_digest": shard.digest}, result.curves)
        _write_atomically(self._path(shard.index), kept.to_bytes())


def _write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file and rename: a kill mid-write leaves no half file."""
    temporary = path.with_name(path.name + f".{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)
