"""What every row of a batch of maps gives at once, measured as the batch comes out of the
forward (corpus mode, mha_viz.corpus.measuring): each row's sum of -p ln p and its sum, and
the mass each key receives. torch computes them a few segments at a time, so that a segment's
maps are read while they sit in the cache, on the forward's own threads, with a vectorized
logarithm (numpy's float32 log is scalar where the CPU has no AVX-512: 2.2-2.7 ns an element
on an AVX2 machine, against torch's ~1.2). Measured on MiniLM's 64 x 12 maps of 128 tokens,
one layer: 17 ms in one pass here against ~40 ms for numpy's entropy and column sums on two
threads, a segment each.

The entropy of a softmax's rows needs no logarithm of its weights when its scores are at hand:
ln p_j = s_j - m + ln max p (m the row's largest score), so H = sum_j p_j (m - s_j) - ln max p,
a difference, a product and a sum a row, with one logarithm (ScoreEntropies reads the scores
and the weights of a forward as its layers run them: 39 against 62 ms a layer of 10 segments
of 512 tokens, and closer to the formula in float64, every term being >= 0).

A block (mha_viz.maps.streaming.RowBlock) carries its RowSummary; the accumulators that read
one (analysis.entropy.RowEntropy, analysis.token_classes.ClassMass) take it in place of their
own pass over the rows. The numbers hold for rows whose hidden keys hold exact zeros, as a
softmax over masked scores gives them (a model's maps, weights or value-weighted)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Sequence

import numpy as np
import torch

from ..engine.interventions import Hooks

__all__ = ["RowSummary", "ScoreEntropies", "batch_summaries", "entropy_sums_from_scores",
           "DIAGONALS", "PARTS"]

# Elements of maps summarized in one torch call: a few segments of 128 tokens, one of 512
# (larger chunks leave the cache: 2x slower, measured).
_CHUNK_ELEMENTS = 1 << 20
_TINY = float(np.finfo(np.float32).tiny)
# What a summary may hold; an accumulator names those it reads (its summary_parts)
PARTS = ("entropy", "received", "diagonals")
# Rows whose logarithms are taken together: a band of a segment's heads' rows stays in the
# cache through the clamp, log, product and sum (MiniLM, 10 segments of 512 tokens: 65 ms a
# layer in bands of 64 rows against 88 ms in one pass a segment); a causal map's band is read
# up to its last key (the later keys hold zeros).
_BAND = 64
# m - s past which a key's weight is exactly 0 in float32 (e^-104 is below its smallest
# denormal): a hidden key's -inf (or the dtype's lowest) is clamped to it, so that its 0 weight
# times it is 0, not NaN.
_SCORE_SPAN = 200.0
# The diagonals a summary sums (key - query): the token class mass and the role scores read
# the previous token, the token itself and the next.
DIAGONALS = (-1, 0, 1)


@dataclass(frozen=True)
class RowSummary:
    """One segment's rows in one layer, each head's: float64 arrays, or None where not
    asked for. plogp: sum over keys of -p ln p (0 ln 0 = 0), [H, r]; row_sums: each row's sum
    [H, r] (a renormalized row's entropy is plogp / s + ln s); received: each key's mass summed
    over the rows, [H, K]."""
    plogp: np.ndarray | None
    row_sums: np.ndarray | None
    received: np.ndarray | None
    # offset (key - query: -1 the previous token, 0 itself, 1 the next) -> [H] the weights on
    # that diagonal summed over the rows
    diagonals: dict[int, np.ndarray] | None = None


def batch_summaries(maps: np.ndarray, lengths: Sequence[int], causal: bool = False,
                    parts: Collection[str] = PARTS,
                    from_scores: tuple[torch.Tensor, torch.Tensor] | None = None
                    ) -> list[RowSummary]:
    """maps float32 [B, H, W, W], a padded batch whose segment b's own maps are
    [b, :, :n_b, :n_b] (n_b = lengths[b]) -> each segment's RowSummary over its own rows and
    keys. causal: the maps give no weight to a later key (a causal model's), which is then
    not read. parts: which of PARTS to measure ("entropy": plogp and row_sums). from_scores:
    every row's (sum of -p ln p, sum), [B, H, W] each, measured from the scores of the
    softmax that made the maps (ScoreEntropies), read in place of logarithms of the maps."""
    entropy, received, diagonals = (part in parts for part in PARTS)
    tensor = torch.from_numpy(np.asarray(maps))  # a view: nothing is copied
    per_head = int(tensor.shape[1])
    out: list[RowSummary] = []
    buffer = None  # one buffer for every chunk's logarithms: a new one each time page-faults
    first = 0
    with torch.inference_mode():
        while first < len(lengths):
            n = int(lengths[first])
            last = first + 1  # segments of one length go together, a chunk at a time
            while (last < len(lengths) and int(lengths[last]) == n
                   and (last + 1 - first) * per_head * n * n <= _CHUNK_ELEMENTS):
                last += 1
            rows = tensor[first:last, :, :n, :n]
            plogp = sums = keys = sums_along = None
            if entropy and from_scores is not None:
                plogp, sums = (part[first:last, :, :n].double().cpu().numpy()
                               for part in from_scores)
            elif entropy:
                if buffer is None:
                    buffer = torch.empty(max(_CHUNK_ELEMENTS, rows.numel()), device=rows.device)
                plogp, sums = _entropy_sums(rows, buffer, causal)
            if received:
                keys = _sums(rows, -2)
            if diagonals:
                sums_along = {offset: _sums(torch.diagonal(rows, offset, -2, -1), -1)
                              for offset in DIAGONALS}
            out.extend(RowSummary(None if plogp is None else plogp[i],
                                  None if sums is None else sums[i],
                                  None if keys is None else keys[i],
                                  None if sums_along is None else
                                  {offset: d[i] for offset, d in sums_along.items()})
                       for i in range(last - first))
            first = last
    return out


def _entropy_sums(rows: torch.Tensor, buffer: torch.Tensor, causal: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(sum of -p ln p, sum) of every row of rows [c, H, n, n], a band of rows at a time. A
    causal map's band is read up to its last row's key (the later keys hold zeros): 56 % of
    the logarithms of 512 tokens."""
    n = rows.shape[-1]
    plogp = torch.empty(rows.shape[:-1], device=rows.device)
    sums = torch.empty(rows.shape[:-1], device=rows.device)
    for first, last, width in _bands(n, n, causal):
        piece = rows[:, :, first:last, :width]
        plogp[:, :, first:last] = _plogp(piece, buffer[:piece.numel()].view(piece.shape)
                                         ).sum(-1)
        sums[:, :, first:last] = piece.sum(-1)
    return plogp.neg_().numpy().astype(np.float64), sums.numpy().astype(np.float64)


def _bands(rows: int, keys: int, causal: bool):
    """(first, last, width) of each band of _BAND rows and the keys it reads: all of them, or a
    causal band's up to its last row's own (row r of T sees keys up to S - T + r)."""
    for first in range(0, rows, _BAND):
        last = min(rows, first + _BAND)
        yield first, last, min(keys, keys - rows + last) if causal else keys


def _plogp(rows: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """p ln p of every element (0 ln 0 = 0; the caller negates the row sums), written into
    out: torch's vectorized log of the rows clamped to the smallest normal float
    (torch.special.entr and xlogy run a scalar loop: 1.5x slower, measured)."""
    logs = torch.clamp(rows, min=_TINY, out=out)
    logs.log_()
    return logs.mul_(rows)


def _sums(tensor: torch.Tensor, dim: int) -> np.ndarray:
    """float64 sums along dim, added up in float32 (torch's sums add in cascades, so a row of
    8k keys stays within a few float32 ulps; converting every element to float64 first costs
    3-20x more, measured) and returned as float64, as the accumulators hold them."""
    return tensor.sum(dim).numpy().astype(np.float64)


class ScoreEntropies(Hooks):
    """The engine's hooks (engine.interventions) for a forward whose maps are read as it runs
    (Model.attention_by_layer): each layer's scores are kept until its softmax is taken, then
    every row's sums are measured from both (entropy_sums_from_scores) and the scores let go.
    sums[layer]: (sum of -p ln p, sum), float32 [B, H, T] each (pop it once read). The
    forward must be left as it is: scores or weights changed by another hook would not
    match."""

    def __init__(self, causal: bool):
        self.causal = bool(causal)
        self.sums: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._scores: torch.Tensor | None = None

    def __call__(self, name: str, layer: int | None, value: torch.Tensor) -> torch.Tensor:
        if name == "scores":
            self._scores = value
        elif name == "pattern" and self._scores is not None:
            self.sums[layer] = entropy_sums_from_scores(self._scores, value, self.causal)
            self._scores = None
        return value


def entropy_sums_from_scores(scores: torch.Tensor, weights: torch.Tensor, causal: bool = False
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """scores [B, H, T, S] and the weights a softmax made of them -> (sum of -p ln p, sum) of
    every row, float32 [B, H, T] each. All of a row's weights share one normalizer, so
    ln p_j = s_j - m + ln p_max (m its largest score) and sum -p ln p = sum_j p_j (m - s_j) -
    (sum p) ln p_max, every term >= 0. A band of rows of one sequence at a time (in the cache
    while its maximums, differences and products are taken). causal: a row gives no weight to
    keys past its own position (S - T + its row), which are then not read."""
    batch, heads, rows, keys = weights.shape
    plogp = torch.empty(weights.shape[:-1], dtype=torch.float32, device=weights.device)
    sums = torch.empty_like(plogp)
    buffer = torch.empty(heads * min(rows, _BAND) * keys, dtype=scores.dtype,
                         device=scores.device)
    with torch.inference_mode():
        for b in range(batch):
            for first, last, width in _bands(rows, keys, causal):
                s = scores[b, :, first:last, :width]
                p = weights[b, :, first:last, :width]
                top = s.amax(-1, keepdim=True)
                below = torch.sub(top, s, out=buffer[:s.numel()].view(s.shape))
                below.clamp_(max=_SCORE_SPAN)
                total = p.sum(-1)
                sums[b, :, first:last] = total
                # a product and a sum (torch.linalg.vecdot ran 4x slower once a model was
                # loaded, measured)
                plogp[b, :, first:last] = (below.mul_(p).sum(-1)
                                           - total * p.amax(-1).log_())
    return plogp, sums
