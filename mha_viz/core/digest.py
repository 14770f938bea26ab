"""One hash for the whole project: ``digest(*values)``, a short hex name of plain values.

Every place that names content by a hash (a stored result's key, a corpus shard, a saved
trace, a result kept on disk) asks this function, so the same values always give the same
name and no two places hash differently. The encoding is canonical: each value is fed with a
type tag and its length, so different values never feed the same bytes; a list and a tuple of
the same items are one value, a dict's items count in any order, a numpy array by its dtype,
shape and bytes. BLAKE2b (hashlib's fastest strong hash) names them in 32 hex digits.

An object names itself through one small protocol: a method ``identity()`` returning plain
values (a Model: its name, dtype and device; an AttentionTrace: the input that made it). A
frozen dataclass is named by its class and fields. Anything else is refused with a TypeError:
a result is never stored under a name that does not say what made it.

``call_key(fn, *args, **kwargs)`` names a call: the function's qualified name and one digest
of its arguments as the function reads them (defaults filled in), so ``f(x)`` and
``f(x, mode="zero")`` are one call when "zero" is the default.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import inspect
import struct
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

DIGEST_BYTES = 16  # 32 hex digits: 2^128 names, collisions out of reach


@runtime_checkable
class Identified(Protocol):
    """An object that names itself by plain values (what made it), for digest()."""

    def identity(self) -> Any: ...


def digest(*values: Any, size: int = DIGEST_BYTES) -> str:
    """The hex digest of ``values`` (2 * size hex digits), canonical across runs and
    processes. Raises TypeError for a value it cannot name (give its class identity())."""
    h = hashlib.blake2b(digest_size=size)
    _feed(h, values)
    return h.hexdigest()


def call_key(fn: Callable, *args: Any, **kwargs: Any) -> str:
    """What the result of ``fn(*args, **kwargs)`` is named by: the function's module and
    qualified name, then one digest of the arguments it receives (its defaults filled in; a
    bound method's object counts as its first argument). fn must be a named function: a
    lambda or a function defined inside another could close over values the name hides."""
    func = getattr(fn, "__func__", fn)
    name = f"{getattr(func, '__module__', '')}.{getattr(func, '__qualname__', '')}"
    if not getattr(func, "__qualname__", "") or "<lambda>" in name or "<locals>" in name:
        raise TypeError(f"{fn!r}: a stored result needs a function named at module level")
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, type):  # a classmethod: named by its class
        owner = f"{owner.__module__}.{owner.__qualname__}"
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        bound.apply_defaults()
        arguments: Any = dict(bound.arguments)
    except (TypeError, ValueError):  # no signature to read (a builtin): the call as given
        arguments = (args, kwargs)
    return f"{name}:{digest(owner, arguments)}"


# --------------------------------------------------------------- the encoding


def _length(h, tag: bytes, n: int) -> None:
    h.update(tag + struct.pack("<Q", n))


def _plain_ints(items) -> bool:
    return all(type(v) is int for v in items)


def _feed(h, value: Any) -> None:
    if value is None:
        h.update(b"N")
    elif value is True or value is False or isinstance(value, np.bool_):
        h.update(b"T" if value else b"F")
    elif isinstance(value, (int, np.integer)):
        text = str(int(value)).encode()
        _length(h, b"i", len(text))
        h.update(text)
    elif isinstance(value, (float, np.floating)):
        h.update(b"f" + struct.pack("<d", float(value)))
    elif isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        _length(h, b"s", len(data))
        h.update(data)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        data = memoryview(value).cast("B")
        _length(h, b"b", data.nbytes)
        h.update(data)
    elif isinstance(value, np.ndarray):
        _feed_array(h, value)
    elif isinstance(value, (list, tuple)):
        if len(value) > 8 and _plain_ints(value):  # token ids: one array, not n numbers
            try:
                _length(h, b"I", len(value))
                h.update(np.asarray(value, dtype="<i8").tobytes())
                return
            except OverflowError:
                pass
        _length(h, b"l", len(value))
        for item in value:
            _feed(h, item)
    elif isinstance(value, Mapping):
        items = sorted(((digest(k), k, v) for k, v in value.items()), key=lambda kv: kv[0])
        _length(h, b"d", len(items))
        for _, key, item in items:
            _feed(h, key)
            _feed(h, item)
    elif isinstance(value, (set, frozenset)):
        names = sorted(digest(v) for v in value)
        _length(h, b"S", len(names))
        for name in names:
            h.update(bytes.fromhex(name))
    elif isinstance(value, enum.Enum):
        _feed(h, ("enum", type(value).__qualname__, value.value))
    elif isinstance(value, PurePath):
        _feed(h, ("path", str(value)))
    elif callable(getattr(type(value), "identity", None)) and not isinstance(value, type):
        _feed(h, ("object", f"{type(value).__module__}.{type(value).__qualname__}",
                  value.identity()))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        _feed(h, ("dataclass", f"{type(value).__module__}.{type(value).__qualname__}",
                  {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}))
    else:
        raise TypeError(f"digest cannot name a {type(value).__module__}."
                        f"{type(value).__qualname__}: give its class identity() (the plain "
                        f"values that say what made it)")


def _feed_array(h, array: np.ndarray) -> None:
    if array.dtype.hasobject:
        raise TypeError("digest cannot name an array of Python objects")
    data = np.ascontiguousarray(array)
    header = f"{data.dtype.str}{data.shape}".encode()
    _length(h, b"a", len(header))
    h.update(header)
    _length(h, b"", data.nbytes)
    h.update(memoryview(data).cast("B") if data.nbytes else b"")
