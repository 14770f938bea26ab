"""The key/value cache a causal model keeps while it generates (docs/analyses.md, "The
engine"): every layer's keys and values of every token so far, so that a new token's
queries need not recompute them. Its size is what multi-query (Shazeer 2019) and
grouped-query attention (Ainslie et al. 2023) save: query heads that share a key/value head
share its cache.

    bytes = 2 (K and V) x layers x key/value heads x d_head x tokens x bytes per number
"""

from __future__ import annotations

import numpy as np

from ...core.errors import InputError

BYTES_PER_VALUE = 2  # 16-bit floats, as models are served


def kv_cache_bytes(n_layer: int, n_kv_head: int, d_head: int, n_tokens: int,
                   bytes_per_value: int = BYTES_PER_VALUE) -> int:
    """Bytes of keys and values cached for n_tokens tokens."""
    values = (n_layer, n_kv_head, d_head, n_tokens, bytes_per_value)
    if any(isinstance(v, bool) or int(v) < 0 for v in values):
        raise InputError("layers, heads, widths, tokens and bytes must be whole numbers >= 0")
    return 2 * int(n_layer) * int(n_kv_head) * int(d_head) * int(n_tokens) * int(bytes_per_value)


def kv_cache_by_sharing(info, n_tokens: int, bytes_per_value: int | None = None
                        ) -> dict[str, int]:
    """The cache of n_tokens tokens at this model's shape with one key/value head per query
    head (multi-head), with the model's own key/value heads, and with one shared by all
    (multi-query); each number in bytes_per_value bytes (default: as the model is held,
    ``info.bytes_per_value``)."""
    bytes_per_value = info.bytes_per_value if bytes_per_value is None else bytes_per_value

    def size(kv: int) -> int:
        return kv_cache_bytes(info.n_layer, kv, info.d_head, n_tokens, bytes_per_value)

    out = {f"multi-head ({info.n_head} K/V heads)": size(info.n_head)}
    if 1 < info.n_kv_head < info.n_head:
        out[f"this model: grouped-query ({info.n_kv_head} K/V heads)"] = size(info.n_kv_head)
    out["multi-query (1 K/V head)"] = size(1)
    return out


# what a step of generation holds for each past token, and for the one being written
NOT_KEPT, CACHED, COMPUTED_NOW = 0, 1, 2


def cache_roles(n_tokens: int) -> np.ndarray:
    """[3, n_tokens]: rows Q, K, V, columns the tokens, while the last one is written: its
    own Q, K and V are computed now (COMPUTED_NOW); every earlier token's K and V are read
    from the cache (CACHED); an earlier token's Q is never read again (NOT_KEPT)."""
    if isinstance(n_tokens, bool) or int(n_tokens) < 1:
        raise InputError("n_tokens must be a whole number >= 1")
    roles = np.full((3, int(n_tokens)), CACHED, dtype=np.int64)
    roles[0, :] = NOT_KEPT
    roles[:, -1] = COMPUTED_NOW
    return roles


def bytes_text(n: int) -> str:
    """A size for people: 1.5 GiB, 320.0 KiB, 12 B."""
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
