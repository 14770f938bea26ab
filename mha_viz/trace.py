"""AttentionTrace: every head's attention map for one input, plus what a reader needs to read it."""

from __future__ import annotations

import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import TraceFileError
from .text import visible

FORMAT_VERSION = 1
# Traces are read from uploads too: refuse anything bigger before decompressing it.
DEFAULT_MAX_TRACE_BYTES = 1 << 30
# At most this many heads (layers x heads) in a file: more than any model this app runs
# (GPT-2 XL has 1,200, Llama-2-13B 1,600); the analyses' work grows with their square.
MAX_TRACE_HEADS = 2048
# How far a row of a map may sum from 1 (float16 rounding, renormalised rows).
ROW_SUM_TOLERANCE = 1e-3
# The per-token arrays a trace file holds: which numpy dtype kinds, and what they are.
_ARRAYS = {"tokens": ("U", "strings"), "display_tokens": ("U", "strings"),
           "token_ids": ("iu", "integers"), "special_mask": ("b", "booleans"),
           "segment_ids": ("iu", "integers")}
_DTYPES = "biufU"  # numbers and strings; never objects (a pickle in disguise)


@dataclass
class AttentionTrace:
    """What the model computed for one input.

    attentions[l, h, i, j] is the weight that query position i of head h in layer l gives to
    key position j, exactly as the softmax produced it (rows sum to 1; for causal models the
    upper triangle is 0). Layers and heads are numbered from 0.
    """

    tokens: list[str]  # as the tokenizer names them ("Ġthe", "##ing", "[CLS]")
    token_ids: list[int]
    attentions: np.ndarray  # float32 [L, H, T, T]
    display_tokens: list[str]  # readable labels: the token's own text, spaces shown as "␣"
    special_mask: np.ndarray  # bool [T]: [CLS], [SEP], <|endoftext|>, ... positions
    segment_ids: np.ndarray  # int [T]: 0 for sentence A, 1 for sentence B (BERT pairs)
    causal: bool  # True for causal models (GPT-2, Llama): query i only sees keys 0..i
    truncated: bool = False  # the text was longer than the model's context
    n_tokens_before_truncation: int = 0  # token count the full text would have had
    model_name: str = ""
    arch: str = ""
    text: str = ""
    text_pair: str | None = None
    extra: dict = field(default_factory=dict)
    # kv_heads[h]: the key/value head query head h reads. Heads that share one read the same
    # keys and values (grouped- or multi-query attention); None means every head has its own.
    kv_heads: list[int] | None = None

    def __post_init__(self):
        self.attentions = np.asarray(self.attentions, dtype=np.float32)
        self.special_mask = np.asarray(self.special_mask, dtype=bool)
        self.segment_ids = np.asarray(self.segment_ids, dtype=np.int64)
        if not self.n_tokens_before_truncation:
            self.n_tokens_before_truncation = len(self.token_ids)
        if self.attentions.ndim != 4 or self.attentions.shape[2:] != (self.n_tokens,) * 2:
            raise TraceFileError(
                f"attentions must have shape [L, H, {self.n_tokens}, {self.n_tokens}], "
                f"got {list(self.attentions.shape)}"
            )
        if self.kv_heads is None:
            self.kv_heads = list(range(self.attentions.shape[1]))
        self.kv_heads = [int(k) for k in self.kv_heads]
        if len(self.kv_heads) != self.attentions.shape[1]:
            raise TraceFileError(f"kv_heads has {len(self.kv_heads)} entries, expected one per "
                                 f"head ({self.attentions.shape[1]})")
        for name in ("tokens", "display_tokens", "special_mask", "segment_ids"):
            if len(getattr(self, name)) != self.n_tokens:
                raise TraceFileError(f"{name} has {len(getattr(self, name))} entries, "
                                     f"expected one per token ({self.n_tokens})")

    @property
    def n_layers(self) -> int:
        return self.attentions.shape[0]

    @property
    def n_heads(self) -> int:
        return self.attentions.shape[1]

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def special_positions(self) -> list[int]:
        return [int(i) for i in np.flatnonzero(self.special_mask)]

    @property
    def is_pair(self) -> bool:
        return bool(self.segment_ids.any())

    @property
    def n_kv_heads(self) -> int:
        return len(set(self.kv_heads))

    def heads_sharing_kv(self, head: int) -> list[int]:
        """The query heads (this one included) that read the same keys and values."""
        return [h for h, kv in enumerate(self.kv_heads) if kv == self.kv_heads[head]]

    def head(self, layer: int, head: int) -> np.ndarray:
        """One head's map, [T, T]."""
        return self.attentions[layer, head]

    # --- files -------------------------------------------------------------------------

    def _metadata(self) -> dict:
        return {
            "format": "mha_viz.trace",
            "version": FORMAT_VERSION,
            "causal": self.causal,
            "truncated": self.truncated,
            "n_tokens_before_truncation": self.n_tokens_before_truncation,
            "model_name": self.model_name,
            "arch": self.arch,
            "text": self.text,
            "text_pair": self.text_pair,
            "extra": self.extra,
            "kv_heads": self.kv_heads,
        }

    def save(self, path_or_file) -> None:
        """Write a compressed .npz that numpy can read with allow_pickle=False."""
        np.savez_compressed(
            path_or_file,
            attentions=self.attentions,
            token_ids=np.asarray(self.token_ids, dtype=np.int64),
            tokens=np.asarray(self.tokens, dtype=np.str_),
            display_tokens=np.asarray(self.display_tokens, dtype=np.str_),
            special_mask=self.special_mask,
            segment_ids=self.segment_ids,
            metadata=np.asarray(json.dumps(self._metadata())),
        )

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        self.save(buffer)
        return buffer.getvalue()

    @classmethod
    def load(cls, path_or_file, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> "AttentionTrace":
        """Read a trace written by save(), as a file from anyone: never unpickles; refuses
        files over max_bytes (each array's size is read from its header before anything is
        decompressed or allocated), and maps that are not attention (see check_maps)."""
        if isinstance(path_or_file, (bytes, bytearray)):
            path_or_file = io.BytesIO(path_or_file)
        if isinstance(path_or_file, (str, os.PathLike)):
            size = Path(path_or_file).stat().st_size
            if size > max_bytes:
                raise TraceFileError(f"trace file is {size} bytes, over the limit of {max_bytes}")
        try:
            with zipfile.ZipFile(path_or_file) as archive:
                unpacked = sum(info.file_size for info in archive.infolist())
                if unpacked > max_bytes:
                    raise TraceFileError(f"trace unpacks to {unpacked} bytes, over the limit "
                                         f"of {max_bytes}")
                data = _read_members(archive, max_bytes)
            if "metadata" not in data:
                raise TraceFileError("this .npz was not written by mha_viz (no trace metadata)")
            metadata = json.loads(str(data["metadata"]))
            if not isinstance(metadata, dict) or metadata.get("format") != "mha_viz.trace":
                raise TraceFileError("this .npz was not written by mha_viz (no trace metadata)")
            missing = sorted(set(_ARRAYS) - set(data))
            if missing:
                raise TraceFileError(f"the trace lacks {', '.join(missing)}")
            for name, (kind, what) in _ARRAYS.items():
                if data[name].ndim != 1 or data[name].dtype.kind not in kind:
                    raise TraceFileError(f"{name} must be a flat list of {what}, got an array "
                                         f"of shape {list(data[name].shape)} "
                                         f"({data[name].dtype})")
            attentions = check_maps(data["attentions"])
            trace = cls(
                tokens=[visible(t) for t in data["tokens"]],
                token_ids=[int(t) for t in data["token_ids"]],
                attentions=attentions,
                display_tokens=[visible(t) for t in data["display_tokens"]],
                special_mask=data["special_mask"].astype(bool),
                segment_ids=data["segment_ids"].astype(np.int64),
                causal=bool(metadata["causal"]),
                truncated=bool(metadata["truncated"]),
                n_tokens_before_truncation=int(metadata["n_tokens_before_truncation"]),
                model_name=visible(metadata.get("model_name", "")),
                arch=visible(metadata.get("arch", "")),
                text=str(metadata.get("text", "")),
                text_pair=metadata.get("text_pair"),
                extra=metadata.get("extra", {}),
                kv_heads=metadata.get("kv_heads"),
            )
        except TraceFileError:
            raise
        except (zipfile.BadZipFile, KeyError, ValueError, TypeError, OSError, EOFError,
                OverflowError) as error:
            raise TraceFileError(f"not a readable mha_viz trace (.npz): {error}") from error
        if not isinstance(trace.extra, dict) or not (
                trace.text_pair is None or isinstance(trace.text_pair, str)):
            raise TraceFileError("the trace's metadata is garbled")
        if any(not 0 <= k < trace.n_heads for k in trace.kv_heads):
            raise TraceFileError("kv_heads names a key/value head outside the model")
        return trace


def _read_members(archive: zipfile.ZipFile, max_bytes: int) -> dict[str, np.ndarray]:
    """Every .npy member of an .npz, each one's size taken from its header (shape x item
    size) and checked, with the total, against max_bytes before it is read: a small file
    whose header claims 149 GiB is refused, not allocated. No pickles (object arrays)."""
    from numpy.lib import format as npy

    members, total = {}, 0
    for info in archive.infolist():
        if not info.filename.endswith(".npy"):
            continue
        with archive.open(info) as stream:
            read_header = {(1, 0): npy.read_array_header_1_0,
                           (2, 0): npy.read_array_header_2_0}.get(npy.read_magic(stream))
            if read_header is None:
                raise TraceFileError(f"{info.filename} is not a numpy array this app reads")
            shape, _, dtype = read_header(stream)
            if dtype.hasobject or dtype.kind not in _DTYPES:
                raise TraceFileError(f"{info.filename} holds {dtype} values; a trace holds "
                                     f"numbers and strings only")
            if any(d < 0 for d in shape):
                raise TraceFileError(f"{info.filename} has a negative dimension")
            size = int(np.prod(shape, dtype=object)) * dtype.itemsize
            total += size
            if total > max_bytes:
                raise TraceFileError(f"the trace's arrays take more than {max_bytes:,} bytes, "
                                     f"over the limit for a saved trace")
        with archive.open(info) as stream:
            members[info.filename[:-4]] = npy.read_array(stream, allow_pickle=False)
    return members


def check_maps(attentions: np.ndarray) -> np.ndarray:
    """Attention maps as a file must hold them: float [L, H, T, T] with L, H, T >= 1, at most
    MAX_TRACE_HEADS heads, every weight finite and >= 0, every row summing to 1 (within
    ROW_SUM_TOLERANCE). -> float32 maps; TraceFileError says what is wrong."""
    if attentions.dtype.kind != "f":
        raise TraceFileError(f"attention maps must be floating point numbers, got "
                             f"{attentions.dtype}")
    if attentions.ndim != 4 or attentions.shape[2] != attentions.shape[3]:
        raise TraceFileError(f"attention maps must have shape [layers, heads, tokens, tokens], "
                             f"got {list(attentions.shape)}")
    n_layers, n_heads, n_tokens = attentions.shape[:3]
    if min(n_layers, n_heads, n_tokens) < 1:
        raise TraceFileError(f"the trace is empty: {n_layers} layers, {n_heads} heads, "
                             f"{n_tokens} tokens")
    if n_layers * n_heads > MAX_TRACE_HEADS:
        raise TraceFileError(f"the trace has {n_layers} x {n_heads} = {n_layers * n_heads:,} "
                             f"heads, more than the {MAX_TRACE_HEADS:,} a trace may hold")
    maps = np.asarray(attentions, dtype=np.float32)
    if not np.isfinite(maps).all():
        raise TraceFileError("the attention maps hold NaN or infinite values")
    if (maps < 0).any():
        raise TraceFileError("the attention maps hold negative weights")
    worst = float(np.abs(maps.sum(axis=-1, dtype=np.float64) - 1.0).max())
    if worst > ROW_SUM_TOLERANCE:
        raise TraceFileError(f"a row of the attention maps sums to {1 + worst:.4g} or "
                             f"{1 - worst:.4g}, not 1: these are not attention weights")
    return maps
