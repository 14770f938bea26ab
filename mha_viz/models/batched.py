"""Several short texts traced in one padded forward: what a class pressing Run together costs
the server. A forward of a few dozen tokens reads every weight of the model for little
arithmetic; sixteen texts in one batch read them once (SmolLM2, 23 tokens, one thread: 0.16 s
a text alone, 0.09 s a text sixteen at once). Each trace equals the text's own
``model.trace(...)`` to float rounding: the padding is masked, as corpus batches mask it (Model.attention_by_layer)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..maps.trace import AttentionTrace

# Texts longer than this run alone: a batch pads every text to its longest, and a long text's
# own forward is arithmetic enough to use the machine well.
BATCH_MAX_TOKENS = 256
# A batch's texts hold at most this many bytes of maps together (each text's own, before the
# store takes them): SmolLM2's 270 heads, 40 tokens: 1.7 MB a text; 256 tokens: 71 MB.
MAPS_BYTES_A_BATCH = 256 << 20


def maps_bytes(model, n_tokens: int) -> int:
    """What a text's maps held whole take: L x H x T^2 float32."""
    return 4 * model.info.n_layer * model.info.n_head * int(n_tokens) ** 2


def batchable(model, n_tokens: int, maps: str = "budget") -> bool:
    """Whether a text of n_tokens traced with ``maps`` can share a batch: a model whose trace
    is one stack's (not an encoder-decoder's) and maps held whole for a short text."""
    return (hasattr(model, "trace_batch") and n_tokens <= BATCH_MAX_TOKENS
            and model.maps_kind(n_tokens, maps) == "full")


def trace_batch(model, requests: Sequence[tuple[str, str | None, int | None]],
                weights: str = "attention") -> list[AttentionTrace]:
    """The traces of (text, text_pair, max_tokens) requests from one padded forward, in order,
    each what model.trace(text, text_pair=..., max_tokens=..., weights=weights) gives with
    its maps held whole."""
    encodings = [model.encode(text, pair, max_tokens) for text, pair, max_tokens in requests]
    lengths = [len(enc.input_ids) for enc in encodings]
    info = model.info
    maps = [np.empty((info.n_layer, info.n_head, n, n), dtype=np.float32) for n in lengths]
    for layer, found in model.attention_by_layer(
            [enc.input_ids for enc in encodings], weights,
            token_types=[enc.token_type_ids for enc in encodings]):
        for row, n in enumerate(lengths):
            maps[row][layer] = found[row, :, :n, :n]
    return [model._make_trace(enc, held, text, pair, weights)
            for enc, held, (text, pair, _) in zip(encodings, maps, requests)]
