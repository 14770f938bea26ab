"""Attention sinks (Xiao et al. 2023; the metric of Gu et al. 2025, "When Attention Sink
Emerges in Language Models"): a head's attention to the first token, alpha = (1/T) sum_i
A[i, 0] over every query row i (the first row included, as Gu et al. write it); a head is a
sink head on a text when alpha > epsilon (0.3 by default), and the sink metric is the share
of sink heads. Measured on the text and on the same number of one repeated token, where Gu
et al. find the sink dispersed in models with rotary positions (the first token is then no
different from the others).

Beside it, what makes the first token a sink: its key's norm (against the mean norm of the
other keys) and the cosine of the queries with it (against their mean cosine with the other
keys they read), per head, read at the rotated queries and keys of one forward."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from ...core.errors import InputError
from ...engine.interventions import Interventions
from ..token_classes import token_class_mass
from .reading import prompt_ids

SINK_EPSILON = 0.3  # Gu et al. 2025's threshold on the attention to the first token
ROW_BLOCK = 256  # query rows whose cosines with every key are computed at once


@dataclass(frozen=True)
class SinkStats:
    """Per head [L, H], on one input: the attention to the first token, its key's norm and
    the mean norm of the other keys (a query head reads its key/value head's keys), the mean
    cosine of the queries (rows 1..T-1) with the first key and with the other keys they
    read."""
    first_attention: np.ndarray
    first_key_norm: np.ndarray
    other_key_norm: np.ndarray
    first_cosine: np.ndarray
    other_cosine: np.ndarray
    n_tokens: int
    epsilon: float = SINK_EPSILON

    @property
    def sink_heads(self) -> np.ndarray:
        """[L, H] bools: heads whose attention to the first token exceeds epsilon."""
        return self.first_attention > self.epsilon

    @property
    def share(self) -> float:
        """Gu et al.'s sink metric: the share of sink heads."""
        return float(self.sink_heads.mean())

    @property
    def n_sink_heads(self) -> int:
        return int(self.sink_heads.sum())

    @property
    def key_norm_ratio(self) -> np.ndarray:
        """[L, H] the first key's norm over the other keys' mean norm."""
        return self.first_key_norm / np.maximum(self.other_key_norm, 1e-12)

    @property
    def cosine_gap(self) -> np.ndarray:
        """[L, H] the queries' mean cosine with the first key minus with the other keys."""
        return self.first_cosine - self.other_cosine


@dataclass(frozen=True)
class SinkScores:
    """The sink statistics on the text and on one token repeated as often."""
    natural: SinkStats
    repeated: SinkStats
    repeated_token: int


class _QueryKeyStats:
    """Reads each layer's rotated queries and keys as the forward makes them (engine hooks:
    rot_q comes just before rot_k) and keeps the per-head statistics, never the vectors."""

    def __init__(self, info, causal: bool):
        shape = (info.n_layer, info.n_head)
        self.kv = torch.as_tensor(info.kv_heads, device="cpu")
        self.causal = causal
        self.out = {name: np.zeros(shape) for name in ("first_key_norm", "other_key_norm",
                                                       "first_cosine", "other_cosine")}
        self._q = None

    def hooks(self, n_layer: int) -> Interventions:
        hooks = Interventions()
        for layer in range(n_layer):
            hooks.apply("rot_q", layer, self._keep_q)
            hooks.apply("rot_k", layer, lambda k, layer=layer: self._read(layer, k))
        return hooks

    def _keep_q(self, q):
        self._q = q
        return q

    def _read(self, layer: int, k):
        q, kv = self._q[0].float(), self.kv.to(k.device)
        keys = k[0].float()[kv] if k.shape[1] != q.shape[0] else k[0].float()  # one per head
        norms = keys.norm(dim=-1)  # [H, T]
        self.out["first_key_norm"][layer] = norms[:, 0].cpu().numpy()
        self.out["other_key_norm"][layer] = norms[:, 1:].mean(1).cpu().numpy()
        unit_q, unit_k = F.normalize(q[:, 1:], dim=-1), F.normalize(keys, dim=-1)
        self.out["first_cosine"][layer] = (unit_q @ unit_k[:, 0, :, None])[..., 0].mean(1) \
            .cpu().numpy()
        self.out["other_cosine"][layer] = self._other_cosine(unit_q, unit_k[:, 1:]).numpy()
        self._q = None
        return k

    def _other_cosine(self, unit_q, unit_k) -> torch.Tensor:
        """[H] the mean over query rows 1.. of each row's mean cosine with the keys 1.. it
        reads (1..i in a causal model, all of them otherwise), a block of rows at a time."""
        n_rows = unit_q.shape[1]
        sums = torch.zeros(unit_q.shape[0], dtype=torch.float64, device="cpu")
        for start in range(0, n_rows, ROW_BLOCK):
            block = unit_q[:, start:start + ROW_BLOCK] @ unit_k.transpose(1, 2)  # [H, r, T-1]
            if self.causal:  # query row 1 + r reads keys 1..1 + r: the first r + 1 of unit_k
                seen = torch.arange(block.shape[-1], device=block.device)[None, :] <= \
                    torch.arange(start, start + block.shape[1], device=block.device)[:, None]
                block = (block * seen).sum(-1) / seen.sum(-1)
            else:
                block = block.mean(-1)
            sums += block.sum(1).cpu().double()  # float64 on the CPU: MPS has none
        return sums / n_rows


def _stats(model, ids: list[int], epsilon: float) -> SinkStats:
    if len(ids) < 2:
        raise InputError("a sink needs a text of at least two tokens")
    info = model.info
    trace = model.trace_ids(ids)
    first = token_class_mass(trace)["first token"]
    reader = _QueryKeyStats(info, info.causal)
    model.run_hooked(ids, reader.hooks(info.n_layer))
    return SinkStats(first, **reader.out, n_tokens=len(ids), epsilon=epsilon)


def repeated_ids(model, ids: list[int], token=None) -> tuple[list[int], int]:
    """ids with every token after the leading special ones (a BOS) replaced by one token:
    ``token`` (an id or a one-token text), else the text's first token that is not special."""
    encoded = model.encoding_of_ids(ids)
    lead = 0
    while lead < len(ids) and encoded.special_mask[lead]:
        lead += 1
    if lead == len(ids):
        raise InputError("the text has no token that is not special")
    chosen = ids[lead] if token is None else model.token_id(token)
    return ids[:lead] + [chosen] * (len(ids) - lead), chosen


def sink_scores(model, text, epsilon: float = SINK_EPSILON, max_tokens: int | None = None,
                repeated_token=None, progress=None) -> SinkScores:
    """Every head's attention to the first token, its key norm and query cosines, on ``text``
    (a text, or token ids) and on one token repeated as many times (``repeated_token``, by
    default the text's first non-special token). epsilon: the sink threshold (Gu et al.:
    0.3). max_tokens: the text cut to this many tokens (default: the model's context)."""
    if not 0 < float(epsilon) < 1:
        raise InputError(f"epsilon is a share of attention between 0 and 1, got {epsilon}")
    ids = prompt_ids(model, text, "the text")
    limit = model.info.max_positions if max_tokens is None else min(int(max_tokens),
                                                                     model.info.max_positions)
    ids = ids[:max(2, limit)]
    repeated, token = repeated_ids(model, ids, repeated_token)
    natural = _stats(model, ids, float(epsilon))
    if progress is not None:
        progress(1, 2)
    again = _stats(model, repeated, float(epsilon))
    if progress is not None:
        progress(2, 2)
    return SinkScores(natural, again, token)
