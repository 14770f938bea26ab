"""Value-weighted maps (Kobayashi et al. 2020, "Attention is Not Only a Weight"): what a head
moves from key j to query i is alpha_ij f_h(x_j), with f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h
the vector key j sends through head h. Its norm is alpha_ij ||f_h(x_j)||: the weight times a
per-key norm. So the norms [L, H, T] are computed once, from the values the forward computes
(the engine's "v" point: after the projection, its bias and any clamp), and each block of
rows of the weights is multiplied by them: nothing bigger than the maps is ever held.

weights="value" (Model.trace, Model.run, Model.attention_by_layer, corpus runs) gives maps
whose rows are alpha_ij ||f_h(x_j)|| / sum_k alpha_ik ||f_h(x_k)||: they sum to 1 like the
weights, so every statistic that reads maps (entropy, token-class mass, distance, similarity,
roles, the corpus) reads them unchanged. Whole maps are weighed in place; on-demand maps
(long inputs) are wrapped, each block of rows weighed as it is rebuilt (ValueWeightedMaps).
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.errors import InputError
from ..engine.interventions import Hooks
from ..engine.placement import to_numpy
from .ondemand import OnDemandMaps

WEIGHTS = ("attention", "value")  # what a map's rows are: the softmax, or what heads move


def check_weights(weights) -> str:
    """"attention" (the softmax's weights) or "value" (value-weighted, normalized rows)."""
    if weights not in WEIGHTS:
        raise InputError(f"weights must be 'attention' or 'value', got {weights!r}")
    return weights


def output_factors(attn) -> torch.Tensor:
    """[H, d_k, d_k] float32 R_h with ||z W_O^h|| = ||z R_h^T|| for every z (R_h of the QR
    factorization of head h's slice of W_O, [d, d_k]): a head's output norm from its d_k
    numbers instead of d, computed in float64 from the weights whatever their dtype. Kept on
    the module while its weight is unchanged (the factorization costs more than a layer's
    forward on a short text)."""
    weight = attn.out.weight
    key = (weight.data_ptr(), weight._version, weight.device, weight.dtype)
    kept = attn.__dict__.get("_output_factors")
    if kept is not None and kept[0] == key:
        return kept[1]
    with torch.inference_mode(False):  # ordinary tensors, kept across calls
        wide = weight.detach().to("cpu", torch.float64)  # [d, H * d_k]
        per_head = wide.view(wide.shape[0], attn.n_head, attn.d_head).permute(1, 0, 2)
        factors = torch.linalg.qr(per_head, mode="r").R.to(weight.device, torch.float32)
    attn.__dict__["_output_factors"] = (key, factors)
    return factors


def value_output_norms(attn, v: torch.Tensor) -> torch.Tensor:
    """||f_h(x_j)|| for every query head h and position j: v [B, H_kv or H, T, d_k] (each
    key/value head's values, bias included) -> float32 [B, H, T]. Heads sharing a key/value
    head read the same values through their own slice of W_O. Computed in float32 (from
    bfloat16 or float16 values too), never in a half precision."""
    values = v.float()
    if values.shape[1] != attn.n_head:
        values = values[:, attn.kv_index]
    return torch.linalg.vector_norm(values @ output_factors(attn).transpose(-1, -2), dim=-1)


class ValueNorms(Hooks):
    """Reads every layer's values at the engine's "v" point and keeps their output norms
    (norms[layer]: [B, H, T]); passes everything to `inner` (another Hooks) first."""

    def __init__(self, network, inner: Hooks | None = None):
        self.network, self.inner = network, inner
        self.ungroup_kv = False if inner is None else inner.ungroup_kv
        self.norms: dict[int, torch.Tensor] = {}

    def wants(self, name: str, layer: int | None) -> bool:
        return self.inner is not None and self.inner.wants(name, layer)

    def __call__(self, name: str, layer: int | None, value: torch.Tensor) -> torch.Tensor:
        if self.inner is not None:
            value = self.inner(name, layer, value)
        if name == "v":
            self.norms[layer] = value_output_norms(self.network.blocks[layer].attn, value)
        return value

    def array(self, sequence: int = 0) -> np.ndarray:
        """float32 [L, H, T]: one sequence's norms, every layer."""
        return np.stack([self.norms[layer][sequence].cpu().numpy()
                         for layer in sorted(self.norms)])


def weigh_rows(rows: np.ndarray, norms: np.ndarray, normalized: bool = True) -> np.ndarray:
    """rows [H, r, T] float32 of weights -> alpha_ij ||f_h(x_j)|| in place (norms [H, T]),
    each row divided by its sum when normalized (summed in float64; a row whose every seen
    key sends a zero vector stays 0)."""
    rows *= norms[:, None, :]
    if normalized:
        sums = rows.sum(axis=-1, keepdims=True, dtype=np.float64)
        np.divide(rows, np.where(sums > 0, sums, 1.0), out=rows, casting="unsafe")
    return rows


def weights_by_layer(network, h, bias, mask, weights: str = "attention",
                     hooks: Hooks | None = None):
    """network.weights_by_layer(h, bias, mask) (a padded batch, one layer at a time: yields
    (layer, [B, H, W, W])), each sequence's rows value-weighted when weights is "value" (a
    padded key's weight is 0, so every sequence's rows are its own). hooks: the engine's, for
    the forward (maps.summaries.ScoreEntropies)."""
    if check_weights(weights) == "attention":
        yield from network.weights_by_layer(h, bias, mask, hooks=hooks)
        return
    norms = ValueNorms(network, inner=hooks)
    for layer, found in network.weights_by_layer(h, bias, mask, hooks=norms):
        values = to_numpy(norms.norms.pop(layer))
        for sequence in range(found.shape[0]):
            weigh_rows(found[sequence], values[sequence])
        yield layer, found


def weigh_maps(maps, norms: np.ndarray, normalized: bool = True):
    """Maps as a forward gives them (float32 [L, H, T, T], weighed in place a layer at a
    time, or on-demand maps, wrapped) -> value-weighted maps."""
    if isinstance(maps, OnDemandMaps):
        return ValueWeightedMaps(maps, norms, normalized)
    for layer in range(maps.shape[0]):
        weigh_rows(maps[layer], norms[layer], normalized)
    return maps


class ValueWeightedMaps(OnDemandMaps):
    """Another on-demand maps' rows times each key's value norm (and normalized): rows
    rebuilt by the base, weighed block by block. What a saved trace holds: the base's queries
    and keys, and the norms."""

    def __init__(self, base: OnDemandMaps, norms: np.ndarray, normalized: bool = True):
        self.base, self.normalized = base, bool(normalized)
        self.norms = np.ascontiguousarray(norms, dtype=np.float32)
        self.n_layer, self.n_head, self.n_tokens = base.n_layer, base.n_head, base.n_tokens
        self.causal, self.kv_heads, self.head_width = base.causal, base.kv_heads, base.head_width
        shape = (self.n_layer, self.n_head, self.n_tokens)
        if self.norms.shape != shape:
            raise InputError(f"value norms must be [L, H, T] = {list(shape)}, got "
                             f"{list(self.norms.shape)}")

    def queries_keys(self, layer: int):
        return self.base.queries_keys(layer)

    def score_bias(self, rows: torch.Tensor, n_keys: int):
        return self.base.score_bias(rows, n_keys)

    def score_settings(self, layer: int) -> tuple[int, float]:
        return self.base.score_settings(layer)

    def held_bytes(self) -> int:
        return int(self.base.held_bytes()) + int(self.norms.nbytes)

    def queries_keys_arrays(self):
        return self.base.queries_keys_arrays()

    def saved_arrays(self) -> dict[str, np.ndarray]:
        if not self.normalized:
            raise InputError("a trace holds normalized value-weighted maps (rows summing to 1)")
        return {**self.base.saved_arrays(), "value_norms": self.norms}

    def saved_bytes(self) -> int:
        return int(self.base.saved_bytes()) + int(self.norms.nbytes)

    def _weights(self, layer: int, heads: list[int], rows: np.ndarray) -> np.ndarray:
        # the base's rows as any reader gets them (its public gather_rows), then weighed
        return weigh_rows(self.base.gather_rows(layer, rows, heads), self.norms[layer, heads],
                          self.normalized)
