"""What a trace file may hold, checked before and as it is read (AttentionTrace.load): the
size of every array from its header, numbers and strings only (never a pickle), maps that are
attention, queries and keys that rebuild them, value norms, and the special tokens by role."""

from __future__ import annotations

import zipfile

import numpy as np

from ..core.errors import InputError, TraceFileError
from ..core.text import visible
from ..engine.windows import attention_window
from .ondemand import QueryKeyMaps
from .value_weighted import ValueWeightedMaps

# Traces are read from uploads too: refuse anything bigger before decompressing it.
DEFAULT_MAX_TRACE_BYTES = 1 << 30
# At most this many heads (layers x heads) in a file: more than any model this app runs
# (GPT-2 XL has 1,200, Llama-2-13B 1,600); the analyses' work grows with their square.
MAX_TRACE_HEADS = 2048
# How far a row of a map may sum from 1 (float16 rounding, renormalized rows).
ROW_SUM_TOLERANCE = 1e-3
# The per-token arrays a trace file holds: which numpy dtype kinds, and what they are.
ARRAYS = {"tokens": ("U", "strings"), "display_tokens": ("U", "strings"),
          "token_ids": ("iu", "integers"), "special_mask": ("b", "booleans"),
          "segment_ids": ("iu", "integers")}
_DTYPES = "biufU"  # numbers and strings; never objects (a pickle in disguise)


def read_members(archive: zipfile.ZipFile, max_bytes: int) -> dict[str, np.ndarray]:
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
    n_layer, n_head, n_tokens = attentions.shape[:3]
    if min(n_layer, n_head, n_tokens) < 1:
        raise TraceFileError(f"the trace is empty: {n_layer} layers, {n_head} heads, "
                             f"{n_tokens} tokens")
    if n_layer * n_head > MAX_TRACE_HEADS:
        raise TraceFileError(f"the trace has {n_layer} x {n_head} = {n_layer * n_head:,} "
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


def check_queries_keys(data: dict, causal: bool, kv_heads) -> QueryKeyMaps:
    """A saved on-demand trace's queries [L, H, T, d_k], keys [L, H_kv, T, d_k] and scales
    [L], checked as check_maps checks maps -> the OnDemandMaps they rebuild."""
    if "keys" not in data or "scales" not in data:
        raise TraceFileError("the trace holds queries but lacks keys or scales")
    queries, keys, scales = data["queries"], data["keys"], data["scales"]
    for name, array in (("queries", queries), ("keys", keys), ("scales", scales)):
        if array.dtype.kind != "f":
            raise TraceFileError(f"{name} must be floating point numbers, got {array.dtype}")
    if queries.ndim != 4 or keys.ndim != 4 or scales.shape != queries.shape[:1]:
        raise TraceFileError(f"queries, keys and scales must have shapes [L, H, T, d], "
                             f"[L, H_kv, T, d] and [L], got {list(queries.shape)}, "
                             f"{list(keys.shape)} and {list(scales.shape)}")
    n_layer, n_head, n_tokens, width = queries.shape
    if (keys.shape[0], keys.shape[2], keys.shape[3]) != (n_layer, n_tokens, width):
        raise TraceFileError(f"keys of shape {list(keys.shape)} do not match queries of "
                             f"shape {list(queries.shape)}")
    if min(n_layer, n_head, n_tokens, width, keys.shape[1]) < 1:
        raise TraceFileError("the trace is empty")
    if n_layer * n_head > MAX_TRACE_HEADS:
        raise TraceFileError(f"the trace has {n_layer} x {n_head} = {n_layer * n_head:,} "
                             f"heads, more than the {MAX_TRACE_HEADS:,} a trace may hold")
    if not (np.isfinite(queries).all() and np.isfinite(keys).all()
            and np.isfinite(scales).all()):
        raise TraceFileError("the queries, keys or scales hold NaN or infinite values")
    kv_heads = list(range(n_head)) if kv_heads is None else kv_heads
    if (not isinstance(kv_heads, list) or len(kv_heads) != n_head
            or any(not isinstance(k, int) or not 0 <= k < keys.shape[1] for k in kv_heads)):
        raise TraceFileError("kv_heads does not name one key/value head per query head")
    settings = []
    for name in ("windows", "softcaps"):  # a model whose layers window or cap their scores
        array = data.get(name)
        if array is not None and (array.shape != scales.shape or array.dtype.kind not in "fiu"
                                  or not np.isfinite(array).all() or (array < 0).any()):
            raise TraceFileError(f"{name} must be [L] non-negative numbers, one per layer")
        settings.append(array)
    return QueryKeyMaps(queries, keys, scales, causal, kv_heads, *settings,
                        attention_window=check_attention_window(data, n_layer, n_head, causal))


def check_attention_window(data: dict, n_layer: int, n_head: int, causal: bool):
    """The sink + window restriction a saved on-demand trace was made under (window_span:
    [sink, window]; window_heads: [L, H] of 0/1), or None when it holds none."""
    span, heads = data.get("window_span"), data.get("window_heads")
    if span is None and heads is None:
        return None
    if span is None or heads is None or span.shape != (2,) or span.dtype.kind not in "iu" \
            or heads.dtype.kind not in "biu" or heads.shape != (n_layer, n_head):
        raise TraceFileError("the trace's sink + window restriction is garbled: window_span "
                             "must be [sink, window] and window_heads [L, H] of 0/1")
    try:
        return attention_window({"sink": int(span[0]), "window": int(span[1]),
                                 "heads": heads.astype(bool)}, n_layer, n_head, causal)
    except InputError as error:
        raise TraceFileError(f"the trace's sink + window restriction: {error}") from None


def check_value_norms(maps: QueryKeyMaps, norms: np.ndarray) -> ValueWeightedMaps:
    """A saved value-weighted trace's per-key value norms [L, H, T] (finite, >= 0) over the
    maps its queries and keys rebuild."""
    if norms.dtype.kind != "f" or norms.shape != (maps.n_layer, maps.n_head, maps.n_tokens):
        raise TraceFileError(f"value_norms must be [L, H, T] = "
                             f"{[maps.n_layer, maps.n_head, maps.n_tokens]} numbers, got "
                             f"{list(norms.shape)} ({norms.dtype})")
    if not np.isfinite(norms).all() or (norms < 0).any():
        raise TraceFileError("value_norms must be finite and non-negative")
    return ValueWeightedMaps(maps, norms)


def special_tokens_read(metadata: dict, tokens: list[str], special_mask) -> dict[str, str]:
    """The special tokens by role that a trace file records. A file saved before they were
    recorded gets them from where its special tokens stand, as a tokenizer that wraps a text
    in a classification and a separator token places them: on a bidirectional trace whose
    first token is special, that token is "cls" and the last special token after it "sep"
    (so the token classes of an old file read as they did when it was saved)."""
    named = metadata.get("special_tokens")
    if named is not None:
        if not isinstance(named, dict) or not all(
                isinstance(role, str) and isinstance(token, str) for role, token in named.items()):
            raise TraceFileError("the trace's special tokens are garbled")
        return {role: visible(token) for role, token in named.items()}
    special = np.flatnonzero(np.asarray(special_mask, dtype=bool))
    if metadata.get("causal") or not len(special) or special[0] != 0:
        return {}
    found = {"cls": tokens[0]}
    if len(special) > 1:
        found["sep"] = tokens[special[-1]]
    return found


# What made the maps, as a trace file names it (AttentionTrace's typed fields): each name's
# check of a value read from anyone's file.
def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _short_text(value) -> bool:
    return isinstance(value, str) and len(value) <= 64


MEANING = {
    "weights": lambda value: value in ("attention", "value"),
    "head_mask": lambda value: isinstance(value, list) and all(
        isinstance(row, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                      and 0 <= x <= 1 for x in row) for row in value),
    "ablation": _short_text,
    "n_chars_given": _count,
    "prompt_length": _count,
    "attention_kind": _short_text,
    "kept_positions": lambda value: isinstance(value, list) and all(map(_count, value)),
    "attention_window": lambda value: isinstance(value, dict) and _count(value.get("sink"))
    and _count(value.get("window")) and isinstance(value.get("heads"), list) and all(
        isinstance(row, list) and all(isinstance(x, bool) for x in row)
        for row in value["heads"]),
}


def meaning_read(metadata: dict, n_tokens: int) -> dict:
    """What made a file's maps, by AttentionTrace's field names: the file's own keys, or, in a
    file written before they had their own (format version 1), its "extra" dict. A value that
    is not what its name holds is refused; names the trace does not know are left out."""
    said = metadata.get("extra", {}) if metadata.get("version", 1) == 1 else metadata
    if not isinstance(said, dict):
        raise TraceFileError("the trace's metadata is garbled")
    found = {}
    for name, valid in MEANING.items():
        value = said.get(name)
        if value is None:
            continue
        if not valid(value):
            raise TraceFileError(f"the trace's {name} is garbled")
        found[name] = value
    kept = found.get("kept_positions")
    if kept is not None and len(kept) != n_tokens:
        raise TraceFileError("the trace's kept_positions do not name one position per token")
    return found
