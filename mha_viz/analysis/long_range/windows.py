"""What a sink and a window cost (StreamingLLM, Xiao et al. 2023; per head, DuoAttention,
Xiao et al. 2024): restricted heads read the first ``sink`` tokens and the last ``window``
only (the engine's exact mask, engine/windows.py).

- window_losses: the next-token loss of a long text with every head (or a chosen set)
  restricted, window only (sink 0) against sink + window against full attention:
  StreamingLLM's table. Window only falls apart once the text passes the window; a few
  sink tokens bring it back near full attention.
- window_costs: per head, the loss a sink + window costs when that head alone is
  restricted: the heads that need the whole context stand out (DuoAttention's retrieval
  heads), the rest are streaming heads. A head restricted in layer l changes nothing below
  it, nor at the positions before sink + window (they read no far key): the full forward's
  stream entering layer l is reused, only the later positions run again (reading the
  earlier ones' keys and values), and a layer's heads run as one batch (as
  analysis/pruning.py sweeps heads).
- kv_cache_saved: the key/value cache a restriction saves while a model writes n tokens.
  The cache is kept per key/value head, so a key/value head keeps sink + window positions
  only when every query head sharing it is restricted (grouped-query attention); sizes
  from one_head/kv_cache_size.py."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...core.errors import InputError
from ...engine.windows import AttentionWindow
from ..heads import rank_heads
from ..one_head.kv_cache_size import BYTES_PER_VALUE, kv_cache_bytes
from .reading import (check_causal, last_hidden, next_token_loss_sums, next_token_losses,
                      prompt_ids, run_stack)

SINK, WINDOW = 4, 256  # StreamingLLM's four sink tokens; a window well short of the text
BATCH_BYTES = 512 << 20  # a sweep's batch: its attention blocks and MLP activations


@dataclass(frozen=True)
class WindowLosses:
    """The mean next-token loss (nats) of one text: full attention, the chosen heads
    restricted to sink + window, and to the window only."""
    full: float
    sink_window: float
    window_only: float
    n_tokens: int
    sink: int
    window: int
    n_restricted: int  # heads restricted


@dataclass(frozen=True)
class WindowCosts:
    """costs[l, h]: the loss with head (l, h) alone restricted to sink + window minus the
    full loss (nats per token), on one text."""
    costs: np.ndarray
    full: float
    n_tokens: int
    sink: int
    window: int


@dataclass(frozen=True)
class KVSaving:
    """The key/value cache of n_tokens: every head reading the whole text, and with the
    restriction (key/value heads whose query heads are all restricted keep sink + window
    positions)."""
    full_bytes: int
    restricted_bytes: int
    streaming_kv_heads: int  # key/value heads that keep sink + window positions only
    kv_heads: int  # key/value heads in all (layers x heads)
    n_tokens: int

    @property
    def saved_bytes(self) -> int:
        return self.full_bytes - self.restricted_bytes

    @property
    def saved_share(self) -> float:
        return self.saved_bytes / self.full_bytes if self.full_bytes else 0.0


def _window(model, sink: int, window: int, heads=None) -> AttentionWindow:
    return model.check_attention_window({"sink": sink, "window": window, "heads": heads})


def _text_ids(model, text, what: str, sink: int, window: int) -> list[int]:
    check_causal(model, what)
    ids = prompt_ids(model, text, "the text")[:model.info.max_positions]
    if len(ids) < 2:
        raise InputError("the next-token loss needs at least two tokens")
    _window(model, sink, window)  # checked in words before any work
    if int(sink) + int(window) >= len(ids):
        raise InputError(f"a sink of {sink} and a window of {window} tokens cover all "
                         f"{len(ids):,} tokens of the text, so nothing would be hidden: give "
                         f"a longer text or a smaller window")
    return ids


def window_losses(model, text, sink: int = SINK, window: int = WINDOW, heads=None,
                  progress=None) -> WindowLosses:
    """StreamingLLM's table on one text (cut to the model's context): the loss with full
    attention, with ``heads`` (None: every head; [L, H] bools or (layer, head) pairs)
    restricted to sink + window, and to the window only."""
    ids = _text_ids(model, text, "a sink + window loss", sink, window)
    restricted = _window(model, sink, window, heads)
    runs = [None, restricted, _window(model, 0, window, restricted.heads)]
    losses = []
    for done, run in enumerate(runs, 1):
        losses.append(float(next_token_losses(model, last_hidden(model, ids, None, run),
                                              ids)[0]))
        if progress is not None:
            progress(done, len(runs))
    return WindowLosses(*losses, len(ids), int(sink), int(window),
                        int(restricted.heads.sum()))


def _batch_size(model, n_tokens: int) -> int:
    info = model.info
    config = model.network.config
    per_item = 4 * n_tokens * (2 * config.d_ff + info.n_head * min(n_tokens, 256) + 4 *
                               info.d_model)
    return int(max(1, min(info.n_head, BATCH_BYTES // max(per_item, 1))))


def window_costs(model, text, sink: int = SINK, window: int = WINDOW,
                 batch_size: int | None = None, progress=None) -> WindowCosts:
    """[L, H] the loss one head restricted to sink + window costs, head by head, on one
    text (cut to the model's context). progress(done, total) after each batch of heads."""
    ids = _text_ids(model, text, "a sink + window cost", sink, window)
    info, net = model.info, model.network
    n_layer, n_head = info.n_layer, info.n_head
    layer_inputs = []
    hidden = last_hidden(model, ids, layer_inputs=layer_inputs)
    total = len(ids) - 1
    # Positions before sink + window read no far key: a restricted head changes nothing
    # there, nor (causal) anything they lead to. Only the later rows run again, reading the
    # earlier rows' keys and values as the full forward left them.
    first = int(sink) + int(window)
    full_rest = next_token_loss_sums(model, hidden[:, first:], ids, first)
    full = float(next_token_loss_sums(model, hidden[:, :first], ids)[0] + full_rest[0]) / total
    batch = int(batch_size or _batch_size(model, len(ids) - first))
    costs = np.zeros((n_layer, n_head))
    steps = n_layer * -(-n_head // batch)
    done = 0
    with torch.inference_mode():
        prefix_kv = [net.keys_and_values(layer_inputs[layer][:, :first], layer)
                     for layer in range(n_layer)]
        for layer in range(n_layer):
            for start in range(0, n_head, batch):
                chosen = list(range(start, min(start + batch, n_head)))
                size = len(chosen)
                heads = torch.zeros(size, n_layer, n_head, dtype=torch.bool, device=net.device)
                heads[torch.arange(size, device=net.device), layer,
                      torch.tensor(chosen, device=net.device)] = True
                past = {later: tuple(t.expand(size, -1, -1, -1) for t in prefix_kv[later])
                        for later in range(layer, n_layer)}
                out = net.finish(run_stack(
                    net, layer_inputs[layer][:, first:].expand(size, -1, -1), layer,
                    attention_window=AttentionWindow(int(sink), int(window), heads),
                    offset=first, past_kv=past))
                rest = next_token_loss_sums(model, out, ids, first)
                costs[layer, chosen] = ((rest - full_rest) / total).cpu().numpy()
                done += 1
                if progress is not None:
                    progress(done, steps)
    return WindowCosts(costs, full, len(ids), int(sink), int(window))


def streaming_heads(costs, keep: int) -> np.ndarray:
    """[L, H] bools: every head restricted but the ``keep`` whose sink + window costs most
    (DuoAttention's split: retrieval heads read the whole context, streaming heads a sink
    and a window)."""
    costs = np.asarray(costs, dtype=np.float64)
    if costs.ndim != 2:
        raise InputError(f"costs must be [layers, heads], got shape {list(costs.shape)}")
    if not 0 <= int(keep) <= costs.size:
        raise InputError(f"keep must be from 0 to {costs.size} heads, got {keep}")
    restricted = np.ones(costs.shape, dtype=bool)
    for layer, head in rank_heads(costs)[:int(keep)]:
        restricted[layer, head] = False
    return restricted


def kv_cache_saved(model, n_tokens: int, sink: int = SINK, window: int = WINDOW, heads=None,
                   bytes_per_value: int = BYTES_PER_VALUE) -> KVSaving:
    """The key/value cache of n_tokens written tokens with ``heads`` (None: every head)
    restricted to sink + window, against the whole cache (16-bit values by default)."""
    restricted = _window(model, sink, window, heads).heads.cpu().numpy()
    if restricted.ndim != 2:
        raise InputError("give one set of restricted heads, [layers, heads]")
    if int(n_tokens) < 1:
        raise InputError("n_tokens must be at least 1")
    info = model.info
    kv = np.asarray(info.kv_heads)
    streaming = sum(bool(restricted[layer, kv == group].all())
                    for layer in range(info.n_layer) for group in range(info.n_kv_head))
    kept = min(int(n_tokens), int(sink) + int(window))
    total = info.n_layer * info.n_kv_head

    def size(kv_heads: int, tokens: int) -> int:
        return kv_cache_bytes(1, kv_heads, info.d_head, tokens, bytes_per_value)

    full = size(total, int(n_tokens))
    return KVSaving(full, size(total - streaming, int(n_tokens)) + size(streaming, kept),
                    streaming, total, int(n_tokens))
