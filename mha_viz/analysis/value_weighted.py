"""What a head moves, not only where it looks (docs/analyses.md, "What a head moves").

Kobayashi et al. 2020 ("Attention is Not Only a Weight: Analyzing Transformers with Vector
Norms"): head h moves alpha_ij f_h(x_j) from key j to query i, f_h(x_j) = (x_j W_V^h + b_V^h)
W_O^h. value_weighted_maps gives ||alpha_ij f_h(x_j)|| = alpha_ij ||f_h(x_j)|| for every head,
[L, H, T, T] (or rows summing to 1, normalized=True: what Model.trace(..., weights="value")
holds, so that every statistic reads them as it reads the weights).

Kobayashi et al. 2021 ("Incorporating Residual and Normalization Layers into Analysis of
Masked Language Models"): a layer's attention output joins the residual stream (and, in a
post-norm layer, a LayerNorm). With the norm's scale frozen at its value on this input, the
sum splits exactly into one vector per key token; context_mixing gives each query's share
that comes from the other tokens, with the weights, the attention alone, with the residual,
and with the norm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..core.errors import InputError
from ..engine.interventions import Interventions
from ..engine.wiring import ATTENTION, join_norm, output_norm
from ..maps.ondemand import BLOCK_ELEMENTS
from ..maps.value_weighted import ValueNorms, weigh_maps
from .token_classes import token_class_mass

__all__ = ["value_weighted_maps", "value_norms", "context_mixing", "ContextMixing",
           "why_no_mixing", "SinkShares", "sink_shares"]


def _check_model(model) -> None:
    if model.info.encoder_decoder:
        raise InputError("value-weighted maps read a decoder-only or encoder model's "
                         "self-attention; an encoder-decoder's are not computed yet")


def value_weighted_maps(model, text, normalized: bool = False, text_pair: str | None = None,
                        max_tokens: int | None = None, maps="auto"):
    """||alpha_ij f_h(x_j)|| for every layer, head, query i and key j: float32 [L, H, T, T]
    (text: a string or token ids). normalized: each row divided by its sum (rows sum to 1).

    Computed as the maps are, a block of query rows at a time: each key's norm
    ||f_h(x_j)|| ([L, H, T], from the values the forward computes) times the weights. maps:
    as Model.trace takes it: a long input ("on_demand", or "auto" past
    AUTO_FULL_MAPS_BYTES) gives on-demand maps (maps.value_weighted.ValueWeightedMaps:
    .rows, .head_map, .layer_maps, .row_blocks) instead of the whole array."""
    _check_model(model)
    norms = ValueNorms(model.network)
    _, found = model.run_hooked(text, norms, text_pair, max_tokens, maps=maps)
    if found is None:
        raise InputError("value-weighted maps are maps: use maps='full', 'on_demand' or 'auto'")
    return weigh_maps(found, norms.array(), normalized)


def value_norms(model, text, text_pair: str | None = None, max_tokens: int | None = None
                ) -> np.ndarray:
    """||f_h(x_j)||: how large a vector each key sends through each head, float32 [L, H, T]
    (one forward, no maps)."""
    _check_model(model)
    norms = ValueNorms(model.network)
    model.run_hooked(text, norms, text_pair, max_tokens)
    return norms.array()


# --- the residual and the norm (Kobayashi et al. 2021) --------------------------------------


def why_no_mixing(config) -> str:
    """Why a layer's attention output and residual cannot be split into one vector per key
    token exactly ("" when they can)."""
    if config.parallel_residual:
        return ("its attention and its MLP read the layer's input side by side and add one "
                "sum to the stream, so there is no stream after the attention alone to split "
                "into each token's share")
    return ""


@dataclass
class ContextMixing:
    """Each query's share that comes from the other tokens (Kobayashi et al. 2021's
    context-mixing ratio), per layer and query, [L, T]: sum_{j != i} ||c_ij|| / sum_j ||c_ij||,
    where c_ij is what token j contributes to query i's output at each stage:

    weights: c_ij = the weight, averaged over heads (1 - the mean weight on itself);
    attention: c_ij = sum_h alpha_ij f_h(x_j), the attention layer's output alone;
    residual: plus the residual, query i's own stream, added to c_ii (through each
      sub-layer output norm first, where the layers have one: with its scale frozen);
    residual_norm: then through the LayerNorm that follows the sum, its scale frozen (a
      post-norm layer, BERT's); None where no norm follows the sum (pre-norm layers).
    The output projection's bias and the norm's own bias belong to no token and are left
    out, as Kobayashi et al. leave them out."""
    weights: np.ndarray
    attention: np.ndarray
    residual: np.ndarray
    residual_norm: np.ndarray | None
    tokens: list[str]

    def layer_means(self) -> dict[str, np.ndarray]:
        """Each stage's ratio averaged over queries, [L] per stage."""
        stages = {"weights": self.weights, "attention": self.attention,
                  "residual": self.residual, "residual_norm": self.residual_norm}
        return {name: ratio.mean(axis=1) for name, ratio in stages.items()
                if ratio is not None}


class _FrozenNorm:
    """A LayerNorm or RMSNorm with its scale frozen at its value on this input: z ->
    D(z) / s_i, linear in z. D: the gain times the centring (LayerNorm) or the gain alone."""

    def __init__(self, norm: nn.Module, actual: torch.Tensor):
        self.centred = isinstance(norm, nn.LayerNorm)
        self.gain = norm.weight.detach().to("cpu", torch.float64)
        spread = actual - actual.mean(-1, keepdim=True) if self.centred else actual
        self.scale = torch.sqrt(spread.pow(2).mean(-1) + norm.eps)  # [T]: the frozen scale

    def linear(self, z: torch.Tensor) -> torch.Tensor:
        """D(z): the norm's linear part, before the division by the scale."""
        return self.gain * (z - z.mean(-1, keepdim=True) if self.centred else z)


def context_mixing(model, text, text_pair: str | None = None, max_tokens: int | None = None,
                   maps="auto") -> ContextMixing:
    """Kobayashi et al. 2021's context-mixing ratios of every layer (see ContextMixing), from
    one forward: its maps (held, or on demand for a long input: maps as Model.trace takes
    it), and each layer's stream, values and head outputs. A layer whose attention and MLP
    run side by side (parallel attention) gets an InputError saying why."""
    _check_model(model)
    net = model.network
    why = why_no_mixing(net.config)
    if why:
        raise InputError(f"the attention + residual share is not computed for this model: {why}")
    capture = Interventions(capture=["resid_pre", "v", "z"])
    enc, found = model.run_hooked(text, capture, text_pair, max_tokens, maps=maps)
    if found is None:
        raise InputError("context mixing reads the maps: use maps='full', 'on_demand' or 'auto'")
    n_layer, n_tokens = net.config.n_layer, len(enc.input_ids)
    stages = ["weights", "attention", "residual"] + ([] if net.config.pre_norm
                                                      else ["residual_norm"])
    out = {name: np.empty((n_layer, n_tokens)) for name in stages}
    for layer in range(n_layer):
        def captured(name):
            return capture.captured.pop((name, layer))[0].to("cpu", torch.float64)
        rows = (lambda start, stop: found[layer, :, start:stop]) if isinstance(
            found, np.ndarray) else (lambda start, stop: found.rows(layer, start, stop))
        ratios = _layer_mixing(net.blocks[layer], captured("resid_pre"), captured("v"),
                               captured("z"), rows, n_tokens)
        for name in stages:
            out[name][layer] = ratios[name]
    with model._tokenizer_lock:
        tokens = list(model.tokenizer.convert_ids_to_tokens(enc.input_ids))
    return ContextMixing(out["weights"], out["attention"], out["residual"],
                         out.get("residual_norm"), tokens)


def _layer_mixing(block, stream, values, heads_out, rows, n_tokens) -> dict[str, np.ndarray]:
    """One layer's ratios [T] per stage. stream [T, d] (the layer's input), values
    [H_kv, T, d_k], heads_out [H, T, d_k] (each head's z), all float64; rows(start, stop):
    the maps' rows [H, r, T]."""
    attn = block.attn
    per_head = attn.out.weight.detach().to("cpu", torch.float64).view(
        attn.d_model, attn.n_head, attn.d_head)  # W_O^h: [d, H, d_k]
    sent = torch.einsum("htk,dhk->htd", values[attn.kv_index.cpu()], per_head)  # f_h(x_j)
    output = torch.einsum("htk,dhk->td", heads_out, per_head)  # the heads' sum, before b_O
    if attn.out.bias is not None:
        output = output + attn.out.bias.detach().to("cpu", torch.float64)
    # the sub-layer's output norm (post_norms), then the stream; then a post-norm layer's
    # LayerNorm over their sum: each frozen at its scale on this input
    own_norm, sum_norm = (output_norm(block.wiring, ATTENTION),
                          join_norm(block.wiring, ATTENTION))
    outer = None if own_norm is None else _FrozenNorm(block.module_of(own_norm), output)
    joined = stream + (output if outer is None else outer.linear(output) / outer.scale[:, None])
    after = None if sum_norm is None else _FrozenNorm(block.module_of(sum_norm), joined)

    def own(z, queries, stage):
        """Query i's own term at a stage, from z [r, d] = sum_h alpha_hii f_h(x_i): through
        the sub-layer's output norm, plus its stream, through the norm after the sum."""
        if stage == "attention":
            return z
        if outer is not None:
            z = outer.linear(z) / outer.scale[queries, None]
        z = z + stream[queries]
        if stage == "residual_norm":
            z = after.linear(z) / after.scale[queries, None]
        return z

    stages = ["attention", "residual"] + ([] if after is None else ["residual_norm"])
    # per key j and stage: the Gram matrix [T, H, H] of its heads' vectors through the
    # stage's linear parts (the per-query scales divide later): the squared norm of
    # sum_h alpha_hij D(f_h(x_j)) is alpha_ij^T G_j alpha_ij
    grams = {}
    for stage in stages:
        linear = sent
        if stage != "attention" and outer is not None:
            linear = outer.linear(linear)
        if stage == "residual_norm":
            linear = after.linear(linear)
        grams[stage] = torch.einsum("htd,gtd->thg", linear, linear).numpy()
    scales = {"attention": np.ones(n_tokens),
              "residual": np.ones(n_tokens) if outer is None else outer.scale.numpy()}
    if after is not None:
        scales["residual_norm"] = scales["residual"] * after.scale.numpy()
    out = {name: np.empty(n_tokens) for name in ["weights", *stages]}
    step = max(1, BLOCK_ELEMENTS // (8 * attn.n_head * n_tokens))
    for start in range(0, n_tokens, step):
        stop = min(start + step, n_tokens)
        alpha = np.asarray(rows(start, stop), dtype=np.float64)  # [H, r, T]
        queries = np.arange(start, stop)
        own_weight = alpha[:, np.arange(stop - start), queries]  # [H, r]: on itself
        out["weights"][start:stop] = 1.0 - own_weight.mean(axis=0)
        # the diagonal directly: query i's own vector, plus its stream
        self_sent = torch.einsum("hr,hrd->rd", torch.from_numpy(own_weight),
                                 sent[:, start:stop])
        for stage in stages:
            squared = np.einsum("hrt,thg,grt->rt", alpha, grams[stage], alpha, optimize=True)
            norms = np.sqrt(np.maximum(squared, 0.0)) / scales[stage][start:stop, None]
            norms[np.arange(stop - start), queries] = 0.0
            own_norm = torch.linalg.vector_norm(own(self_sent, queries, stage), dim=-1).numpy()
            others = norms.sum(axis=1)
            out[stage][start:stop] = others / (others + own_norm)
    return out


@dataclass(frozen=True)
class SinkShares:
    """The first token's share of the weights and of what heads move: per head [L, H] (the
    mean over every query row, token_class_mass's "first token") and over every head."""
    of_weights: np.ndarray
    of_moved: np.ndarray

    @property
    def weights_mean(self) -> float:
        return float(self.of_weights.mean())

    @property
    def moved_mean(self) -> float:
        return float(self.of_moved.mean())

    def widest_gap(self) -> tuple[int, int]:
        """(layer, head) of the head whose first token takes the most more of its weight
        than of what it moves: where the two views differ most (the sink)."""
        gap = np.asarray(self.of_weights) - np.asarray(self.of_moved)
        layer, head = np.unravel_index(int(np.argmax(gap)), gap.shape)
        return int(layer), int(head)


def sink_shares(weights_trace, moved_trace) -> SinkShares:
    """The first token both ways (Kobayashi et al. 2020): its share of the attention weights
    (a trace of weights) beside its share of what the heads move (the same input traced
    with weights="value")."""
    if weights_trace.value_weighted or not moved_trace.value_weighted:
        raise InputError("sink_shares takes a trace of the weights, then one of what moves "
                         "(Model.trace(..., weights='value'))")
    return SinkShares(token_class_mass(weights_trace)["first token"],
                      token_class_mass(moved_trace)["first token"])
