"""Head names and head masks, and how far switching heads off moved each head's map.

The pruning page and notebooks share these; the map change reads traces through the
streaming protocol.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import InputError
from ..maps.downsample import block_factor
from ..maps.streaming import keys_of, source_of
from ..maps.trace import AttentionTrace


def head_name(layer: int, head: int) -> str:
    """"L5.H1": layer 5, head 1, both counted from 0."""
    return f"L{layer}.H{head}"


def head_names(n_layer: int, n_head: int) -> list[str]:
    """["L0.H0", "L0.H1", ...] in layer-major order (index l * n_head + h)."""
    return [head_name(l, h) for l in range(n_layer) for h in range(n_head)]


def head_index(layer: int, head: int, n_head: int) -> int:
    """A head's place in layer order (L0.H0, L0.H1, ..., L1.H0, ...): its row in arrays over
    every head, such as head_distances' [L*H, L*H]."""
    return int(layer) * int(n_head) + int(head)


def head_at(index: int, n_head: int) -> tuple[int, int]:
    """(layer, head) of the head at ``index`` in layer order (head_index's inverse)."""
    layer, head = divmod(int(index), int(n_head))
    return layer, head


def layers_and_heads(n_layer: int, n_head: int) -> tuple[list[int], list[int]]:
    """(each head's layer, each head's number), every head in layer order: the columns of a
    table over every head."""
    return ([layer for layer in range(n_layer) for _ in range(n_head)],
            [head for _ in range(n_layer) for head in range(n_head)])


def parse_head_name(name: str) -> tuple[int, int]:
    """"L3.H7" -> (3, 7); InputError for anything else."""
    try:
        layer_text, head_text = str(name).strip().upper().split(".")
        if not (layer_text.startswith("L") and head_text.startswith("H")):
            raise ValueError(name)
        return int(layer_text[1:]), int(head_text[1:])
    except ValueError:
        raise InputError(f"'{name}' is not a head name like L3.H7") from None


def rank_heads(values, descending: bool = True) -> list[tuple[int, int]]:
    """[L, H] values -> (layer, head) pairs from the largest value down (or up), ties in
    layer-major order, heads without a finite value left out."""
    v = np.asarray(values, dtype=np.float64)
    flat = v.ravel()
    order = np.argsort(-flat if descending else flat, kind="stable")
    n_head = v.shape[1]
    return [(int(i) // n_head, int(i) % n_head) for i in order if np.isfinite(flat[i])]


def rank_heads_of_kinds(values: dict, kinds) -> list[tuple[str, int, int]]:
    """{kind: [L, H]} values of heads of several kinds, shaped differently (an
    encoder-decoder's encoder, decoder and cross-attention) -> (kind, layer, head) from the
    largest value down, ties in the order of kinds then layer-major, as rank_heads."""
    names = [(kind, l, h) for kind in kinds for l, h in np.ndindex(*np.shape(values[kind]))]
    every_head = np.concatenate([np.ravel(values[kind]) for kind in kinds])
    return [names[index] for _, index in rank_heads(every_head[None, :])]  # one row of all


def lowest_layer(names) -> int:
    """The lowest layer among head names ("L3.H7"): no map at or below it can change when
    those heads are switched off."""
    return min(parse_head_name(name)[0] for name in names)


def head_to_compare(layer: int, head: int, lowest: int, change) -> tuple[int, int]:
    """The head whose map to show before and after heads are switched off: the picked one,
    unless its map cannot change (at or below the lowest switched-off layer) while some
    higher layer's can; then the head whose map moved most (``change``: [L, H])."""
    if layer <= lowest < np.shape(change)[0] - 1:
        return rank_heads(change)[0]
    return layer, head


def positions_in_order(order) -> np.ndarray:
    """The inverse of a permutation: where each item stands in ``order`` (item order[k]
    stands at k)."""
    order = np.asarray(order, dtype=int)
    if sorted(order.tolist()) != list(range(len(order))):
        raise InputError("order must be a permutation of 0..n-1")
    positions = np.empty(len(order), dtype=int)
    positions[order] = np.arange(len(order))
    return positions


def nearest_heads(distances, index: int, k: int) -> list[int]:
    """The k heads closest to head ``index`` by a [N, N] distance matrix (itself left out),
    nearest first, ties by index."""
    row = np.array(distances[index], dtype=np.float64)
    row[index] = np.inf
    return [int(i) for i in np.argsort(row, kind="stable")[:max(0, min(k, len(row) - 1))]]


def normalize_layers(values) -> np.ndarray:
    """Each layer's row divided by its l2 norm (Michel et al.'s comparison across layers);
    an all-zero row stays zero."""
    v = np.asarray(values, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norms > 0, norms, 1.0)


def names_to_mask(names, n_layer: int, n_head: int) -> np.ndarray:
    """Head names ("L3.H7") -> mask [L, H] of float32 with 0 at the named heads, 1 elsewhere."""
    mask = np.ones((n_layer, n_head), dtype=np.float32)
    for name in names:
        layer, head = parse_head_name(name)
        if not (0 <= layer < n_layer and 0 <= head < n_head):
            raise InputError(f"{name} is outside the model ({n_layer} layers × {n_head} heads, "
                             f"counted from 0)")
        mask[layer, head] = 0.0
    return mask


def mask_to_names(mask) -> list[str]:
    """The heads a mask switches off, as names."""
    mask = np.asarray(mask)
    return [head_name(int(l), int(h)) for l, h in zip(*np.nonzero(mask == 0))]


def attention_change(before, after) -> np.ndarray:
    """[L, H]: for each head, the mean over query rows of the total-variation distance
    0.5 * sum_j |after[i, j] - before[i, j]| between its two maps (0 = unchanged, 1 = the
    rows share no mass). before/after: two traces of one text or two [L, H, T, T] arrays,
    read a block of rows at a time through the streaming protocol (whole or rebuilt maps
    alike: sources of one shape cut their blocks alike)."""
    first, second = source_of(before), source_of(after)
    shape = (first.n_layer, first.n_head, first.n_tokens, keys_of(first))
    other = (second.n_layer, second.n_head, second.n_tokens, keys_of(second))
    if shape != other:
        raise InputError(f"need two traces or [L, H, T, T] arrays of one shape, got {shape} "
                         f"and {other}")
    total = np.zeros(shape[:2])
    for a, b in zip(first.blocks(cut=False), second.blocks(cut=False)):
        total[a.layer] += (0.5 * np.abs(b.rows - a.rows).sum(-1, dtype=np.float64)).sum(-1)
    return total / shape[2]


def map_difference(before, after, layer: int, head: int, max_size: int | None = None
                   ) -> np.ndarray:
    """[T, T] after - before of one head's map, from two traces of one text. max_size: a
    longer text's difference as f x f block means, f = ceil(T / max_size) (the block mean
    is linear: the difference of the two maps' block means, never a whole [T, T])."""
    if max_size is not None:
        factor = block_factor(before.n_tokens, max_size)
        if factor > 1:
            return (after.block_mean(layer, head, factor)
                    - before.block_mean(layer, head, factor))
    return after.head_map(layer, head) - before.head_map(layer, head)


FOCUS_WORDS = ("it",)  # the word the coreference example asks about


def opening_view(attentions, tokens, special_mask=None, focus_words=FOCUS_WORDS
                 ) -> tuple[int, int, int, int]:
    """Where a page should open on this text: (query, key, layer, head).

    query: the first token that is one of ``focus_words`` (display tokens, case and the
    leading space ignored), else the last token that is not special. key: the token that
    query reads most, averaged over every head, leaving out itself, the first token (where
    causal models park attention) and special tokens. (layer, head): the head that gives
    the most weight from query to key, so the page opens on a head whose map shows the
    link, not on L0.H0. attentions: maps [L, H, T, T], or a trace (only the query's row of
    each layer is read, whether it holds its maps or rebuilds them)."""
    if isinstance(attentions, AttentionTrace):
        shape = tuple(attentions.maps_shape)

        def query_rows(i: int) -> np.ndarray:  # [L, H, T]
            return np.stack([attentions.gather_rows(layer, [i])[:, 0]
                             for layer in range(shape[0])])
    else:
        a = np.asarray(attentions)
        shape = a.shape

        def query_rows(i: int) -> np.ndarray:
            return a[:, :, i, :]
    if len(shape) != 4 or shape[-1] != shape[-2] or shape[-1] != len(tokens):
        raise InputError("opening_view needs attentions [L, H, T, T] and one token per "
                         "position")
    n = shape[-1]
    special = np.zeros(n, bool) if special_mask is None else np.asarray(special_mask, bool)
    words = [str(t).replace("␣", " ").strip().lower() for t in tokens]
    ordinary = [i for i in range(n) if not special[i]] or list(range(n))
    query = next((i for i in ordinary if words[i] in focus_words), ordinary[-1])
    rows = query_rows(query)
    read = rows.mean(axis=(0, 1)).astype(np.float64)
    candidates = np.ones(n, bool)
    candidates[[query, 0]] = False
    candidates &= ~special
    if candidates.any():
        key = int(np.argmax(np.where(candidates, read, -np.inf)))
    else:
        key = int(np.argmax(read))
    layer, head = np.unravel_index(int(np.argmax(rows[:, :, key])), shape[:2])
    return int(query), key, int(layer), int(head)
