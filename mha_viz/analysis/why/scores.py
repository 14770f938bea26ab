"""Score attribution: one head's pre-softmax score s_ij split into a query-source x
key-source matrix (docs/analyses.md, "Why a head attends"; Elhage et al. 2021, "A
Mathematical Framework for Transformer Circuits"; Kamath et al. 2025, "Tracing Attention
Computation Through Feature Interactions").

With the layer's input split by source (stream.py, every norm frozen), a head's query at i
is sum_s q_s(i) and its key at j sum_t k_t(j), each part taken through the same steps as
the engine takes the whole: W_Q (W_K of the key/value head it reads), the projection's bias
joining the "bias" part, OLMo's clamp (an entry the clamp holds at +-c is a constant: the
"bias" part's), the QK-norm with its 1/rms frozen at the engine's value, and the rotation of
position i (j). Then s_ij = scale * sum_{s,t} <q_s(i), k_t(j)> exactly; T5's relative
position bias is one more source ("position_bias", the [position_bias, position_bias] cell).
A soft-cap c tanh(s / c) acts after the sum: the terms split the score before it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...core.errors import InputError
from ...engine.attention import combine_heads, hidden_keys, raw_scores
from ...engine.positions import apply_rotary
from .stream import WORK, StreamParts, check_head, encoded_ids, stream_parts

POSITION_BIAS = "position_bias"
OTHER = "other"  # top_matrix's row and column of every source not listed


def projected(stream: StreamParts, head: int, parts: str = "qkv", rows=None,
              rotate: bool = True) -> list[torch.Tensor]:
    """One head's queries ("q"), keys ("k") and values ("v") split by source, [n, r, d_k]
    each at the positions `rows` (an index tensor; None: every position), every step frozen
    (see the module docstring), in the order `parts` names them; one product for all. The
    parts sum to what the engine scores (values: multiplies). rotate=False leaves queries
    and keys before the rotation of their positions (RoPE)."""
    attn = stream.block.attn
    w_q, w_k, w_v, b_q, b_k, b_v = attn.qkv_weights()
    kv = attn.kv_heads[head]
    chosen = {"q": (w_q[head], None if b_q is None else b_q[head], head),
              "k": (w_k[kv], None if b_k is None else b_k[kv], kv),
              "v": (w_v[kv], None if b_v is None else b_v[kv], kv)}
    chosen = [chosen[part] for part in parts]
    x = stream.parts if rows is None else stream.parts[:, rows]
    joined = x @ torch.cat([weight for weight, _, _ in chosen]).to(WORK).T
    out = []
    for part, piece, (_, bias, index) in zip(parts, joined.split(attn.d_head, dim=-1), chosen):
        piece = piece.contiguous()
        if bias is not None:
            piece[-1] += bias.to(WORK)  # the "bias" part is the last
        if attn.clip:  # a clamped entry no longer depends on any source
            total = piece.sum(0)
            held = total.abs() > attn.clip
            piece[:, held] = 0.0
            piece[-1][held] = torch.sign(total[held]) * attn.clip
        if part != "v":
            piece = _qk_steps(stream, piece, part, index, rows, rotate)
        out.append(piece)
    return out


def _qk_steps(stream: StreamParts, piece: torch.Tensor, part: str, index: int, rows,
              rotate: bool = True):
    """Queries or keys split by source through the QK-norm (its scale frozen) and RoPE
    (unless rotate is False)."""
    attn = stream.block.attn
    if attn.qk_norm:
        scale, norm_weight = _qk_norm_frozen(stream, part, index)
        piece /= (scale if rows is None else scale[rows])[:, None]
        piece *= norm_weight
    rotary = stream.stack.rotary(stream.n_tokens, stream.layer) if rotate else None
    if rotary is not None:
        cos, sin = rotary if rows is None else (rotary[0][rows], rotary[1][rows])
        piece = apply_rotary(piece, cos, sin)
    return piece


def _qk_norm_frozen(stream: StreamParts, part: str, index: int):
    """(1/rms frozen: the rms [T] of the engine's own projection of this input, the norm's
    weight [d_k] for this head): per head, or over every head's width (OLMo 2)."""
    attn = stream.block.attn
    x = stream.x.to(attn.out.weight.dtype)[None]
    q, k, _ = attn.project_qkv(x, normed=False)
    raw, norm = (q, attn.q_norm) if part == "q" else (k, attn.k_norm)
    d_k = attn.d_head
    if attn.qk_norm == "head":
        values, weight = raw[0, index], norm.weight
    else:
        values = combine_heads(raw)[0]
        weight = norm.weight[index * d_k:(index + 1) * d_k]
    values = values.to(WORK)
    rms = torch.sqrt(values.pow(2).mean(-1) + norm.eps)
    return rms, weight.to(WORK)


def engine_scores(stream: StreamParts, head: int, rows: torch.Tensor) -> torch.Tensor:
    """[r, T] the engine's own scores of the query rows, before any soft-cap and mask: its
    rotated queries and keys through engine.attention.raw_scores, plus T5's position bias."""
    attn = stream.block.attn
    kv = attn.kv_heads[head]
    rot_q, rot_k = stream.captured["rot_q"], stream.captured["rot_k"]
    scores = raw_scores(rot_q[None, head:head + 1, rows], rot_k[None, kv:kv + 1],
                        attn.scale)[0, 0].to(WORK)
    if stream.position_bias is not None:
        scores = scores + stream.position_bias[head, rows]
    return scores


def hidden_of(stream: StreamParts, rows: torch.Tensor) -> torch.Tensor:
    """[r, T] bool: the keys each query row may not see (causal mask, sliding window)."""
    n = stream.n_tokens
    hidden = hidden_keys(rows, n, stream.stack.config.causal, stream.block.attn.window)
    return (torch.zeros(len(rows), n, dtype=torch.bool, device="cpu") if hidden is None
            else hidden.cpu())


@dataclass
class ScoreAttribution:
    """One head's score from one query to keys, split into query source x key source.

    terms [n_query_sources, n_key_sources, K]: terms.sum((0, 1)) == scores. A source is
    "embed", "pos_embed" (learned or fixed positions), "type_embed" (BERT's segments),
    "L0.H3" (that head's output through its W_O slice), "L0.mlp", "bias" (every bias and
    norm offset, and entries OLMo's clamp holds), and "position_bias" (T5: its relative
    position bias, in the [position_bias, position_bias] cell alone)."""
    layer: int
    head: int
    query: int
    keys: np.ndarray  # [K] the key positions the terms hold
    terms: np.ndarray  # [n_query_sources, n_key_sources, K] float64
    query_sources: list[str]
    key_sources: list[str]
    scores: np.ndarray  # [K] the engine's scores q.k * scale (+ position bias), uncapped
    masked: np.ndarray  # [K] bool: keys this query cannot see (causal, window)
    softcap: float  # 0: none; else the softmax reads softcap * tanh(scores / softcap)
    scale: float  # the factor on q.k
    kv_head: int  # the key/value head this query head reads
    tokens: list[str]  # the input's display tokens, length T
    contrast: int | str | None = None  # the reference key (a position) or "mean"
    contrast_terms: np.ndarray | None = None  # [n_q, n_k, K]: terms minus the reference's
    # RoPE: the scores the same queries and keys give before the rotation of their positions
    # [K] (None: no rotary positions); the terms hold the rotation already
    unrotated_scores: np.ndarray | None = None

    @property
    def capped_scores(self) -> np.ndarray:
        """[K] what the softmax reads before the mask (the scores, soft-capped if the layer
        caps)."""
        if not self.softcap:
            return self.scores.copy()
        return self.softcap * np.tanh(self.scores / self.softcap)

    def column(self, key: int) -> int:
        """The index into the last axis of terms of key position `key`."""
        found = np.flatnonzero(self.keys == int(key))
        if not found.size:
            raise InputError(f"key {key} is not among the keys attributed "
                             f"({', '.join(map(str, self.keys[:8]))}...)")
        return int(found[0])

    def _matrix(self, key: int, contrasted: bool) -> np.ndarray:
        if contrasted and self.contrast_terms is None:
            raise InputError("no contrast was asked for: give contrast= a key or 'mean'")
        terms = self.contrast_terms if contrasted else self.terms
        return terms[:, :, self.column(key)]

    def query_side(self, key: int, contrasted: bool = False) -> np.ndarray:
        """[n_query_sources] each query source's share of the score at key (summed over the
        key's sources)."""
        return self._matrix(key, contrasted).sum(1)

    def key_side(self, key: int, contrasted: bool = False) -> np.ndarray:
        """[n_key_sources] each key source's share of the score at key."""
        return self._matrix(key, contrasted).sum(0)

    def strongest(self, key: int, k: int = 5, contrasted: bool = False
                  ) -> list[tuple[str, str, float]]:
        """The k (query source, key source, term) with the largest |term| at key."""
        matrix = self._matrix(key, contrasted)
        order = np.argsort(-np.abs(matrix), axis=None, kind="stable")[:int(k)]
        return [(self.query_sources[a], self.key_sources[b], float(matrix[a, b]))
                for a, b in (np.unravel_index(o, matrix.shape) for o in order)]

    def strongest_sources(self, key: int, side: str = "key", k: int = 5,
                          contrasted: bool = False) -> list[tuple[str, float]]:
        """The k sources of one side ("query" or "key") with the largest |share| at key."""
        if side not in ("query", "key"):
            raise InputError(f"side must be 'query' or 'key', got {side!r}")
        values = self.query_side(key, contrasted) if side == "query" \
            else self.key_side(key, contrasted)
        names = self.query_sources if side == "query" else self.key_sources
        order = np.argsort(-np.abs(values), kind="stable")[:int(k)]
        return [(names[o], float(values[o])) for o in order]

    def top_matrix(self, key: int, k: int = 6, contrasted: bool = False
                   ) -> tuple[list[str], list[str], np.ndarray]:
        """The matrix at key cut to the k query sources and the k key sources with the
        largest |share| (query_side, key_side), strongest first, plus one row and one column
        "other" holding the rest: (query names, key names, [k + 1, k + 1]) whose entries
        still sum to the score (or to the contrast). Fewer sources than k: all of them."""
        matrix = self._matrix(key, contrasted)
        rows = np.argsort(-np.abs(matrix.sum(1)), kind="stable")[:int(k)]
        cols = np.argsort(-np.abs(matrix.sum(0)), kind="stable")[:int(k)]
        rest_rows = np.setdiff1d(np.arange(matrix.shape[0]), rows)
        rest_cols = np.setdiff1d(np.arange(matrix.shape[1]), cols)
        row_groups = [[r] for r in rows] + ([list(rest_rows)] if rest_rows.size else [])
        col_groups = [[c] for c in cols] + ([list(rest_cols)] if rest_cols.size else [])
        cut = np.array([[matrix[np.ix_(a, b)].sum() for b in col_groups] for a in row_groups])
        names = ([self.query_sources[r] for r in rows] + [OTHER] * bool(rest_rows.size),
                 [self.key_sources[c] for c in cols] + [OTHER] * bool(rest_cols.size))
        return names[0], names[1], cut

    def parts(self, key: int, k: int = 6, contrasted: bool = False) -> "ScoreParts":
        """The score at key (or its contrast) as a sum a reader can check: the k query
        sources and the k key sources with the largest |share| (T5's position bias set
        apart), one row and one column "other" for the rest, and the totals of every row
        and column (see ScoreParts)."""
        return score_parts(self, key, k, contrasted)

    def contrast_with(self, reference) -> np.ndarray:
        """[n_q, n_k, K] terms minus those of key `reference` (one of the keys held) or,
        for "mean", minus their mean over the visible keys held: which sources make each key
        win over the reference (Kamath et al. 2025)."""
        return self.terms - _reference_terms(self.terms, self.keys, self.masked, reference)


def _reference_terms(terms: np.ndarray, keys: np.ndarray, masked: np.ndarray, reference):
    """[n_q, n_k, 1] the terms a contrast subtracts: one key's, or the visible keys' mean."""
    if isinstance(reference, str):
        if reference != "mean":
            raise InputError(f"contrast must be a key position or 'mean', got {reference!r}")
        visible = ~masked
        return terms[:, :, visible].mean(-1, keepdims=True)
    if isinstance(reference, bool) or not isinstance(reference, (int, np.integer)):
        raise InputError(f"contrast must be a key position or 'mean', got {reference!r}")
    found = np.flatnonzero(keys == int(reference))
    if not found.size:
        raise InputError(f"contrast key {reference} is outside the keys 0..{len(keys) - 1}")
    return terms[:, :, found[0]:found[0] + 1]


@dataclass
class ScoreParts:
    """One score (or one contrast) split by source as a matrix with its sums (ScoreAttribution
    .parts): cells[r, c] is query source rows[r] with key source cols[c]; rows and cols are
    the named sources, strongest first, then OTHER (every source not named, when there is
    one), then POSITION_BIAS (T5's relative position bias, a part of its own: its one cell
    is its row's and its column's only entry). Exactly, up to float rounding:
    cells.sum() == row_totals.sum() == col_totals.sum() == total (the score, or the gap to
    the reference key), named + others + position_bias == total, and on each side
    named + others + position_bias == total: query_named + query_others +
    position_bias == total, key_named + key_others + position_bias == total."""
    rows: list[str]
    cols: list[str]
    cells: np.ndarray  # [len(rows), len(cols)]
    row_totals: np.ndarray  # [len(rows)]: each query source's share (over every key source)
    col_totals: np.ndarray  # [len(cols)]: each key source's share (over every query source)
    total: float  # the score before any soft-cap, or the contrast
    named: float  # the named x named cells
    others: float  # every cell with OTHER on a side
    position_bias: float  # T5's relative position bias (0.0 without one)
    query_named: float  # the named query sources' shares
    query_others: float  # the rest of the query sources'
    key_named: float
    key_others: float
    n_query_others: int  # how many query sources OTHER holds
    n_key_others: int


def score_parts(found: ScoreAttribution, key: int, k: int = 6, contrasted: bool = False
                ) -> ScoreParts:
    """found's score at key (or its contrast) as ScoreParts, k sources named on each side."""
    matrix = found._matrix(key, contrasted)
    # each side's own sources: a dictionary's query and key features are two lists
    bias = [i for i, name in enumerate(found.query_sources) if name == POSITION_BIAS]
    key_bias = [i for i, name in enumerate(found.key_sources) if name == POSITION_BIAS]
    query_sources = np.array([i for i in range(matrix.shape[0]) if i not in bias], dtype=int)
    key_sources = np.array([i for i in range(matrix.shape[1]) if i not in key_bias], dtype=int)
    query_side, key_side = matrix.sum(1), matrix.sum(0)
    rows = query_sources[np.argsort(-np.abs(query_side[query_sources]), kind="stable")[:int(k)]]
    cols = key_sources[np.argsort(-np.abs(key_side[key_sources]), kind="stable")[:int(k)]]
    rest_rows = np.setdiff1d(query_sources, rows)
    rest_cols = np.setdiff1d(key_sources, cols)
    row_groups = [[r] for r in rows] + [list(rest_rows)] * bool(rest_rows.size) \
        + [bias] * bool(bias)
    col_groups = [[c] for c in cols] + [list(rest_cols)] * bool(rest_cols.size) \
        + [key_bias] * bool(key_bias)
    cells = np.array([[matrix[np.ix_(a, b)].sum() for b in col_groups] for a in row_groups])
    position_bias = float(matrix[bias[0], key_bias[0]]) if bias and key_bias else 0.0
    named = float(cells[:len(rows), :len(cols)].sum())
    total = float(matrix.sum())
    query_named, key_named = float(query_side[rows].sum()), float(key_side[cols].sum())
    return ScoreParts(
        rows=[found.query_sources[r] for r in rows] + [OTHER] * bool(rest_rows.size)
        + [POSITION_BIAS] * bool(bias),
        cols=[found.key_sources[c] for c in cols] + [OTHER] * bool(rest_cols.size)
        + [POSITION_BIAS] * bool(key_bias),
        cells=cells, row_totals=cells.sum(1), col_totals=cells.sum(0), total=total,
        named=named, others=total - named - position_bias, position_bias=position_bias,
        query_named=query_named, query_others=total - query_named - position_bias,
        key_named=key_named, key_others=total - key_named - position_bias,
        n_query_others=int(rest_rows.size), n_key_others=int(rest_cols.size))


def _position(value, n: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or not -n <= value < n:
        raise InputError(f"{what} must be a position 0..{n - 1} (or from the end, -1 the "
                         f"last), got {value!r}")
    return int(value) % n


def with_position_bias(names: list[str], terms: torch.Tensor, stream: StreamParts,
                       head: int, rows: torch.Tensor) -> tuple[list[str], torch.Tensor]:
    """T5's relative position bias as a source of its own on both sides: terms
    [n, n, r, T] -> [n + 1, n + 1, r, T] with the bias in the last diagonal cell."""
    if stream.position_bias is None:
        return names, terms
    n = len(names)
    grown = terms.new_zeros((n + 1, n + 1) + tuple(terms.shape[2:]))
    grown[:n, :n] = terms
    grown[n, n] = stream.position_bias[head, rows]
    return names + [POSITION_BIAS], grown


def _unrotated_scores(stream: StreamParts, head: int, rows: torch.Tensor):
    """[T] the query row's scores from the same query and keys before RoPE turns them by
    their positions (None without rotary positions): what the rotation changed."""
    if stream.stack.rotary(stream.n_tokens, stream.layer) is None:
        return None
    q = projected(stream, head, "q", rows, rotate=False)[0][:, 0].sum(0)  # [d_k]
    k = projected(stream, head, "k", rotate=False)[0].sum(0)  # [T, d_k]
    return (stream.block.attn.scale * (k @ q)).cpu().numpy()


def score_attribution(model, text_or_ids, layer: int, head: int, query: int, keys=None,
                      contrast=None, text_pair: str | None = None) -> ScoreAttribution:
    """Head (layer, head)'s pre-softmax scores from `query` to `keys` (None: every key
    position; masked keys are included and flagged), split into query source x key source
    (see the module docstring). contrast: a key position or "mean" (over the keys the query
    sees) whose terms contrast_terms subtracts. An encoder-decoder's source text is read by
    its encoder's self-attention. One forward of the layers up to `layer`."""
    layer, head = check_head(model, layer, head)
    ids, types, tokens = encoded_ids(model, text_or_ids, text_pair)
    n = len(ids)
    query = _position(query, n, "query")
    if keys is None:
        held = np.arange(n)
    else:
        held = np.array([_position(k, n, "a key") for k in np.atleast_1d(keys)], dtype=np.int64)
    stream = stream_parts(model, ids, types, layer)
    attn = stream.block.attn
    rows = torch.tensor([query], device="cpu")
    with torch.inference_mode():
        q = projected(stream, head, "q", rows)[0][:, 0]  # [n, d_k]
        k = projected(stream, head, "k")[0]  # [n, T, d_k]
        terms = attn.scale * torch.einsum("sd,tjd->stj", q, k)
        names, terms = with_position_bias(stream.names, terms[:, :, None], stream, head, rows)
        terms = terms[:, :, 0].cpu().numpy()
        scores = engine_scores(stream, head, rows)[0].cpu().numpy()
        unrotated = _unrotated_scores(stream, head, rows)
    masked = hidden_of(stream, rows)[0].numpy()
    contrast_terms = None
    if contrast is not None:
        if not isinstance(contrast, str):
            contrast = _position(contrast, n, "contrast")
        contrast_terms = (terms - _reference_terms(terms, np.arange(n), masked, contrast)
                          )[:, :, held]
    return ScoreAttribution(
        layer=layer, head=head, query=query, keys=held, terms=terms[:, :, held],
        query_sources=list(names), key_sources=list(names), scores=scores[held],
        masked=masked[held], softcap=float(attn.softcap), scale=float(attn.scale),
        kv_head=int(attn.kv_heads[head]), tokens=tokens,
        contrast=contrast, contrast_terms=contrast_terms,
        unrotated_scores=None if unrotated is None else unrotated[held])
