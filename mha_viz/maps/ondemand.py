"""Attention maps computed when they are looked at, from what rebuilds them.

A full trace holds L x H x T x T weights: SmolLM2 at 8,192 tokens would need 72 GB. An
on-demand trace keeps, per layer, what the softmax was computed from, and recomputes any
block of rows of any head's map on request (query rows at a time, so never the whole T x T of
every head at once):

- LayerInputMaps keeps the hidden state entering each layer (L x T x d floats: 566 MB for
  SmolLM2 at 8,192 tokens) and the model; a layer's queries and keys are its own
  normalization, QKV projection and rotation of that state, recomputed in one GEMM (the most
  recent layers' are cached).
- QueryKeyMaps keeps each layer's queries and keys after rotation (what a saved trace of a
  long input holds: the file needs no model to be read).

Both compute weights with the arithmetic of attention.scaled_dot_product_attention, so a map
rebuilt here equals the forward's own to float32 rounding (tests/test_ondemand.py: < 1e-6).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Iterator

import numpy as np
import torch

from ..core.errors import InputError
from ..engine.attention import attention_scores, kv_head_of
from ..engine.placement import to_numpy
from ..engine.positions import apply_rotary, relative_position_bucket
from ..engine.transformer import \
    QUERY_CHUNK as ROW_CHUNK  # query rows scored at once, as the forward
from .forms import Maps

# Elements (float32) of one block of rows across a layer's heads: 64 MB.
BLOCK_ELEMENTS = 1 << 24


class MapsTooLargeError(InputError):
    """All maps of a long input were asked for at once and would not fit."""


class OnDemandMaps(Maps):
    """Any block of rows of any head's attention map, rebuilt from queries and keys.

    Subclasses provide queries_keys(layer), or a wrapper over another form its own
    _weights(layer, heads, rows) (every read comes through it). Rows are query positions,
    columns key positions; layers and heads are numbered from 0, as in
    AttentionTrace.attentions.
    """

    on_demand = True
    n_layer: int
    n_head: int
    n_tokens: int
    causal: bool
    kv_heads: list[int]
    # heads restricted to a sink and a window (engine.windows.AttentionWindow), as in the
    # forward that made the maps, or None
    attention_window = None

    def queries_keys(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, float]:
        """(queries [H, T, d_k], keys [H_kv, T, d_k], both after rotation, scale)."""
        raise NotImplementedError

    def held_bytes(self) -> int:
        raise NotImplementedError

    def score_bias(self, rows: torch.Tensor, n_keys: int) -> torch.Tensor | None:
        """[H, rows, n_keys]: what the forward adds to these rows' scores besides the mask
        (T5's relative position bias), or None."""
        return None

    def score_settings(self, layer: int) -> tuple[int, float]:
        """(sliding window, soft-cap) of the layer's scores; 0 when it has none."""
        return 0, 0.0

    head_width: int  # d_k

    def saved_arrays(self) -> dict[str, np.ndarray]:
        """What a saved trace holds instead of its maps: each layer's queries and keys after
        rotation, and the scales (queries_keys_arrays, which each kind provides); a model
        whose layers window or soft-cap their scores adds both, per layer."""
        queries, keys, scales = self.queries_keys_arrays()
        out = {"queries": queries, "keys": keys, "scales": scales}
        settings = np.asarray([self.score_settings(layer) for layer in range(self.n_layer)],
                              dtype=np.float64)
        if settings.any():
            out["windows"], out["softcaps"] = settings[:, 0], settings[:, 1]
        if self.attention_window is not None:
            restricted = self.attention_window
            out["window_heads"] = restricted.heads.cpu().numpy().astype(np.uint8)
            out["window_span"] = np.array([restricted.sink, restricted.window], dtype=np.int64)
        return out

    def saved_bytes(self) -> int:
        """The size of the arrays a saved trace holds: queries and keys after rotation."""
        n_kv_head = len(set(self.kv_heads))
        return 4 * self.n_layer * (self.n_head + n_kv_head) * self.n_tokens * self.head_width

    # --- maps -----------------------------------------------------------------------------

    def _check(self, layer: int, heads) -> list[int]:
        if not 0 <= int(layer) < self.n_layer:
            raise InputError(f"layer {layer} is out of range (0..{self.n_layer - 1})")
        heads = list(range(self.n_head)) if heads is None else [int(h) for h in heads]
        if any(not 0 <= h < self.n_head for h in heads):
            raise InputError(f"a head is out of range (0..{self.n_head - 1})")
        return heads

    def rows(self, layer: int, start: int, stop: int, heads=None) -> np.ndarray:
        """Rows start..stop-1 of the maps of `heads` (default all) in `layer`:
        float32 [len(heads), stop - start, T]."""
        heads = self._check(layer, heads)
        start, stop = max(0, int(start)), min(self.n_tokens, int(stop))
        return self._weights(layer, heads, np.arange(start, max(start, stop)))

    def gather_rows(self, layer: int, rows, heads=None) -> np.ndarray:
        """The given query rows (any order) of `heads` in `layer`: [len(heads), len(rows), T]."""
        heads = self._check(layer, heads)
        rows = np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)  # e.g. a reversed view
        if rows.size and (rows.min() < 0 or rows.max() >= self.n_tokens):
            raise InputError(f"a row is out of range (0..{self.n_tokens - 1})")
        return self._weights(layer, heads, rows)

    def head_map(self, layer: int, head: int) -> np.ndarray:
        """One head's whole map, [T, T]."""
        return self.rows(layer, 0, self.n_tokens, [head])[0]

    def layer_maps(self, layer: int) -> np.ndarray:
        """Every head's map in one layer, [H, T, T]."""
        return self.rows(layer, 0, self.n_tokens)

    def full_bytes(self) -> int:
        """What all the maps would take at once (float32)."""
        return 4 * self.n_layer * self.n_head * self.n_tokens ** 2

    def materialise(self, max_bytes: int) -> np.ndarray:
        """All maps [L, H, T, T], when they take at most max_bytes."""
        need = self.full_bytes()
        if need > max_bytes:
            raise MapsTooLargeError(
                f"all attention maps of this {self.n_tokens:,}-token input ({self.n_layer} "
                f"layers × {self.n_head} heads × {self.n_tokens:,}²) would take "
                f"{need / 2**30:.1f} GB, more than the {max_bytes / 2**30:.1f} GB allowed: "
                f"they are computed on demand. Ask for one head (trace.head_map(layer, head)), "
                f"one layer (trace.layer_maps(layer)) or a block of rows (trace.rows(...)).")
        out = np.empty((self.n_layer, self.n_head, self.n_tokens, self.n_tokens),
                       dtype=np.float32)
        for layer, start, stop, block in self.row_blocks():
            out[layer, :, start:stop] = block
        return out

    def row_blocks(self, max_elements: int = BLOCK_ELEMENTS, layers=None
                   ) -> Iterator[tuple[int, int, int, np.ndarray]]:
        """(layer, start, stop, rows [H, stop - start, T]) over every layer's rows in order,
        each block at most max_elements floats: what streaming statistics read."""
        per_row = self.n_head * self.n_tokens
        step = max(1, int(max_elements) // per_row)
        for layer in range(self.n_layer) if layers is None else layers:
            for start in range(0, self.n_tokens, step):
                stop = min(start + step, self.n_tokens)
                yield layer, start, stop, self.rows(layer, start, stop)

    def block_mean(self, layer: int, head: int | None, factor: int) -> np.ndarray:
        """The head's map (head=None: the mean of the layer's heads) averaged over factor x
        factor blocks (the last block of each axis may be smaller): [ceil(T / f),
        ceil(T / f)], computed a band of rows at a time."""
        factor = max(1, int(factor))
        n = self.n_tokens
        heads = None if head is None else [head]
        n_head = self.n_head if head is None else 1
        size = -(-n // factor)
        starts = np.arange(0, n, factor)
        widths = np.minimum(starts + factor, n) - starts
        out = np.empty((size, size), dtype=np.float64)
        band = max(1, BLOCK_ELEMENTS // (n * factor * n_head)) * factor
        for start in range(0, n, band):
            rows = self.rows(layer, start, start + band, heads).sum(axis=0, dtype=np.float64)
            sums = np.add.reduceat(np.add.reduceat(rows, np.arange(0, rows.shape[0], factor),
                                                   axis=0), starts, axis=1)
            first = start // factor
            out[first:first + sums.shape[0]] = sums
        return (out / n_head / widths[:, None] / widths[None, :]).astype(np.float32)

    # --- the arithmetic ---------------------------------------------------------------------

    def _scratch(self, n_scores: int, n_hidden: int, device: torch.device):
        """This thread's buffers for a chunk's scores, weights (n_scores floats each) and
        hidden keys (n_hidden bools), kept from call to call. A new allocation of tens of MB
        is a new mapping (mha_viz.core.memory) whose every page faults in when first written:
        made per chunk, that was a third of a streamed statistic's time. At most 2 x 3 heads
        x 256 rows x T floats per thread (50 MB for SmolLM2 at 8,192 tokens)."""
        local = self.__dict__.setdefault("_scratch_local", threading.local())
        found = getattr(local, "buffers", None)
        if found is None or found[0].numel() < n_scores or found[2].numel() < n_hidden \
                or found[0].device != device:
            found = (torch.empty(n_scores, device=device), torch.empty(n_scores, device=device),
                     torch.empty(n_hidden, dtype=torch.bool, device=device))
            local.buffers = found
        return found

    def _weights(self, layer: int, heads: list[int], rows: np.ndarray) -> np.ndarray:
        q, k, scale = self.queries_keys(layer)
        out = np.zeros((len(heads), len(rows), self.n_tokens), dtype=np.float32)
        if not len(rows) or not heads:
            return out
        # As in the forward: scores of the query heads sharing a key/value head in one GEMM.
        by_kv: dict[int, list[int]] = {}
        for position, head in enumerate(heads):
            by_kv.setdefault(self.kv_heads[head], []).append(position)
        device = q.device  # the model's: the maps are rebuilt where the forward ran
        groups = [(kv, positions, torch.as_tensor([heads[p] for p in positions], device=device))
                  for kv, positions in by_kv.items()]
        chunk_rows = min(ROW_CHUNK, len(rows))
        most_keys = int(rows.max()) + 1 if self.causal else self.n_tokens
        most = max(len(positions) for _, positions, _ in groups) * chunk_rows * most_keys
        scores_buffer, weights_buffer, hidden_buffer = self._scratch(
            most, chunk_rows * most_keys, device)
        window, softcap = self.score_settings(layer)
        restricted = None if self.attention_window is None else self.attention_window.layer(
            layer)
        with torch.inference_mode():
            # ROW_CHUNK rows at a time, as the forward does: a causal chunk multiplies only the
            # keys up to its last row (about half the work of a whole band of ascending rows)
            for first in range(0, len(rows), ROW_CHUNK):
                index = torch.as_tensor(rows[first:first + ROW_CHUNK], device=device)
                n_rows = len(index)
                keys = int(index.max()) + 1 if self.causal else self.n_tokens
                chunk = slice(first, first + n_rows)
                bias = self.score_bias(index, keys)
                for kv, positions, chosen in groups:
                    size = len(positions) * n_rows * keys
                    block = q[chosen[:, None], index[None, :]]  # [g, r, d], only these rows
                    # the forward's kernel, on these heads (one key/value head) and rows
                    scores = attention_scores(
                        block[None], k[kv, :keys][None, None], scale,
                        bias=None if bias is None else bias[chosen], rows=index,
                        causal=self.causal, window=window, softcap=softcap,
                        out=scores_buffer[:size], mask_out=hidden_buffer,
                        head_window=None if restricted is None else restricted.of_heads(
                            chosen))[0]
                    weights = torch.softmax(scores, dim=-1, out=weights_buffer[:size].view(
                        len(positions), n_rows, keys)).cpu().numpy()
                    low, high = positions[0], positions[-1] + 1
                    if high - low == len(positions):  # consecutive heads: a plain slice
                        out[low:high, chunk, :keys] = weights
                    else:
                        out[positions, chunk, :keys] = weights
        return out


class LayerInputMaps(OnDemandMaps):
    """Maps rebuilt from the hidden state entering each layer and the model's own weights."""

    CACHED_LAYERS = 2

    def __init__(self, network, layer_inputs: list[torch.Tensor], attention_window=None):
        self.network = network
        self.attention_window = attention_window
        self.layer_inputs = [h.reshape(h.shape[-2], h.shape[-1]) for h in layer_inputs]
        config = network.config
        self.n_layer, self.n_head = config.n_layer, config.n_head
        self.n_tokens = self.layer_inputs[0].shape[0]
        self.causal = bool(config.causal)
        self.kv_heads = kv_head_of(config.n_head, config.n_kv_head)
        self.head_width = config.d_head
        self.relative = config.positions == "relative"  # T5: a bias per relative distance
        self._cache: OrderedDict[int, tuple] = OrderedDict()
        self._lock = threading.Lock()

    def score_bias(self, rows: torch.Tensor, n_keys: int) -> torch.Tensor | None:
        if not self.relative:
            return None
        config = self.network.config
        buckets = relative_position_bucket(torch.arange(n_keys, device=rows.device)[None, :]
                                           - rows[:, None],
                                           not config.causal, config.relative_buckets,
                                           config.relative_max_distance)
        with torch.inference_mode():
            return self.network.rel_bias(buckets).permute(2, 0, 1)

    def score_settings(self, layer: int) -> tuple[int, float]:
        attn = self.network.blocks[layer].attn
        return attn.window, attn.softcap

    def queries_keys(self, layer: int):
        with self._lock:
            if layer in self._cache:
                self._cache.move_to_end(layer)
                return self._cache[layer]
        block = self.network.blocks[layer]
        with torch.inference_mode():
            q, k, _ = block.attn.project_qkv(block.attention_input(self.layer_inputs[layer][None]))
            rotary = self.network.rotary(self.n_tokens, layer)
            if rotary is not None:
                q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        found = (q[0].contiguous(), k[0].contiguous(), block.attn.scale)
        with self._lock:
            self._cache[layer] = found
            while len(self._cache) > self.CACHED_LAYERS:
                self._cache.popitem(last=False)
        return found

    def held_bytes(self) -> int:
        # The cache is a transient working set (at most CACHED_LAYERS layers' q and k).
        return sum(h.element_size() * h.nelement() for h in self.layer_inputs)

    def queries_keys_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every layer's queries [L, H, T, d_k] and keys [L, H_kv, T, d_k] after rotation,
        and scales [L]: what a saved trace holds."""
        if self.relative:
            raise InputError("the maps of this long input add T5's relative position bias, "
                             "which a saved trace does not hold: trace a shorter source to "
                             "save its maps")
        first_q, first_k, _ = self.queries_keys(0)
        queries = np.empty((self.n_layer, *first_q.shape), dtype=np.float32)
        keys = np.empty((self.n_layer, *first_k.shape), dtype=np.float32)
        scales = np.empty(self.n_layer, dtype=np.float64)
        for layer in range(self.n_layer):
            q, k, scale = self.queries_keys(layer)
            queries[layer], keys[layer], scales[layer] = to_numpy(q), to_numpy(k), scale
        return queries, keys, scales


class QueryKeyMaps(OnDemandMaps):
    """Maps rebuilt from each layer's queries and keys after rotation (a saved trace)."""

    def __init__(self, queries: np.ndarray, keys: np.ndarray, scales, causal: bool,
                 kv_heads: list[int], windows=None, softcaps=None, attention_window=None):
        self.queries = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
        self.keys = torch.from_numpy(np.ascontiguousarray(keys, dtype=np.float32))
        self.scales = [float(s) for s in np.asarray(scales).reshape(-1)]
        self.n_layer, self.n_head, self.n_tokens, self.head_width = self.queries.shape
        self.causal = bool(causal)
        self.kv_heads = [int(k) for k in kv_heads]
        zeros = np.zeros(self.n_layer)
        self.windows = [int(w) for w in (zeros if windows is None else windows)]
        self.softcaps = [float(c) for c in (zeros if softcaps is None else softcaps)]
        self.attention_window = attention_window

    def queries_keys(self, layer: int):
        return self.queries[layer], self.keys[layer], self.scales[layer]

    def score_settings(self, layer: int) -> tuple[int, float]:
        return self.windows[layer], self.softcaps[layer]

    def held_bytes(self) -> int:
        return 4 * (self.queries.nelement() + self.keys.nelement())

    def queries_keys_arrays(self):
        return self.queries.numpy(), self.keys.numpy(), np.asarray(self.scales)
