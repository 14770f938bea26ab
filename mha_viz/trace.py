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

FORMAT_VERSION = 1
# Traces are read from uploads too: refuse anything bigger before decompressing it.
DEFAULT_MAX_TRACE_BYTES = 1 << 30


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
        """Read a trace written by save(). Never unpickles; refuses files over max_bytes
        (the uncompressed size is checked before anything is decompressed)."""
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
                raise TraceFileError(
                    f"trace unpacks to {unpacked} bytes, over the limit of {max_bytes}")
            if hasattr(path_or_file, "seek"):
                path_or_file.seek(0)
            with np.load(path_or_file, allow_pickle=False) as data:
                if "metadata" not in data.files:
                    raise TraceFileError("this .npz was not written by mha_viz (no trace metadata)")
                metadata = json.loads(str(data["metadata"]))
                if not isinstance(metadata, dict) or metadata.get("format") != "mha_viz.trace":
                    raise TraceFileError("this .npz was not written by mha_viz (no trace metadata)")
                return cls(
                    tokens=[str(t) for t in data["tokens"]],
                    token_ids=[int(t) for t in data["token_ids"]],
                    attentions=data["attentions"],
                    display_tokens=[str(t) for t in data["display_tokens"]],
                    special_mask=data["special_mask"],
                    segment_ids=data["segment_ids"],
                    causal=bool(metadata["causal"]),
                    truncated=bool(metadata["truncated"]),
                    n_tokens_before_truncation=int(metadata["n_tokens_before_truncation"]),
                    model_name=metadata.get("model_name", ""),
                    arch=metadata.get("arch", ""),
                    text=metadata.get("text", ""),
                    text_pair=metadata.get("text_pair"),
                    extra=metadata.get("extra", {}),
                    kv_heads=metadata.get("kv_heads"),
                )
        except TraceFileError:
            raise
        except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError) as error:
            raise TraceFileError(f"not a readable mha_viz trace (.npz): {error}") from error
