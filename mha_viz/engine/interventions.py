"""The engine's one intervention mechanism: named activation points a caller reads or replaces
during a forward (activation patching, path patching, attribution patching, the activation
cache all go through it; nothing outside the engine reaches into its blocks).

The engine calls ``hooks(name, layer, value)`` at each point and continues with what it
returns. Points, with the engine's own layouts (B batch, T tokens, d model width, H query
heads, H_kv key/value heads, d_k head width):

    per layer  resid_pre [B, T, d]   the residual stream entering the layer
               attn_in   [B, T, d]   what the heads read (may become [B, 3, H, T, d]: one
                                     stream per head and per q/k/v input, for edges)
               q         [B, H, T, d_k]      queries, before rotary positions
               k, v      [B, H_kv, T, d_k]   keys and values of each key/value head, keys
                                     before rotation ([B, H, T, d_k] with ungroup_kv: the key
                                     and value as each query head reads them)
               rot_q, rot_k                  queries and keys as scored: after rotary
                                             positions (q and k, in models without them)
               scores    [B, H, T, T]        what the softmax reads: q k^T scaled, soft-capped
                                             and masked (-inf, or the dtype's lowest for a
                                             padded key), float32 at least
               pattern   [B, H, T, T]        the softmax weights, as multiplied with V
               z         [B, H, T, d_k]      each head's output before W_O
               result    [B, T, H, d]        each head's output through its slice of W_O
                                             (computed only when wanted)
               attn_out  [B, T, d]   the attention layer's output (sum of results + bias)
               resid_mid [B, T, d]   the stream the MLP reads (after attention)
               mlp_in    [B, T, d]   what the MLP reads (normally resid_mid)
               mlp_out   [B, T, d]
               resid_post [B, T, d]  the stream leaving the layer
    decoder    cross_q, cross_k, cross_v, cross_scores, cross_pattern, cross_z, cross_result:
    layers     the same points of the cross-attention sub-layer (queries [B, H, T, d_k] from
               the decoder stream, keys and values [B, H, S, d_k] from the encoder's output,
               scores and pattern [B, H, T, S]); cross_out [B, T, d] its output
               (encoder-decoders)
    final      scale     [B, T, 1]   the final norm's scale (computed only when wanted)

Grouped-query models: k and v belong to key/value heads. Replacing key/value head g's k
changes what every query head of its group reads; with ungroup_kv=True each query head gets
its own copy, so one query head's key or value can be replaced while its peers keep theirs
(what "patching head h's k" means in mha_viz; docs/analyses.md, "Causal interventions").
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable

import torch

LAYER_POINTS = ("resid_pre", "attn_in", "q", "k", "v", "rot_q", "rot_k", "scores", "pattern",
                "z", "result", "attn_out", "resid_mid", "mlp_in", "mlp_out", "resid_post")
CROSS_PREFIX = "cross_"
CROSS_POINTS = tuple(CROSS_PREFIX + name for name in ("q", "k", "v", "scores", "pattern", "z",
                                                     "result", "out"))
FINAL_POINTS = ("scale",)
# Points the engine computes only when asked (they cost work a plain forward skips).
OPTIONAL_POINTS = ("result", "cross_result", "scale")


class Hooks:
    """No intervention: the base the engine's hooks argument expects."""

    ungroup_kv = False

    def wants(self, name: str, layer: int | None) -> bool:
        """Whether an optional point (result, scale) should be computed."""
        return False

    def __call__(self, name: str, layer: int | None, value: torch.Tensor) -> torch.Tensor:
        return value


class Prefixed(Hooks):
    """Another Hooks seen under prefixed names: a decoder layer's cross-attention calls the
    attention's own points (q, z, ...), which its caller sees as cross_q, cross_z, ..."""

    def __init__(self, hooks: Hooks, prefix: str = CROSS_PREFIX):
        self.hooks, self.prefix = hooks, prefix
        self.ungroup_kv = hooks.ungroup_kv

    def wants(self, name: str, layer: int | None) -> bool:
        return self.hooks.wants(self.prefix + name, layer)

    def __call__(self, name: str, layer: int | None, value: torch.Tensor) -> torch.Tensor:
        return self.hooks(self.prefix + name, layer, value)


class Interventions(Hooks):
    """Capture and replacement at named points.

    capture: names to keep at every layer, or (name, layer) pairs; kept values land in
    ``captured[(name, layer)]`` (detached unless keep_graph: attribution needs the graph).
    replace(name, layer, source, mask): value -> where(mask, source, value), broadcasting
    (mask None: source everywhere). apply(name, layer, fn): value -> fn(value). Several
    interventions at one point run in the order given.
    """

    def __init__(self, capture=(), ungroup_kv: bool = False, keep_graph: bool = False):
        self.capture_all = {c for c in capture if isinstance(c, str)}
        self.capture_at = {tuple(c) for c in capture if not isinstance(c, str)}
        self.ungroup_kv = ungroup_kv
        self.keep_graph = keep_graph
        self.captured: dict[tuple[str, int | None], torch.Tensor] = {}
        self._edits: dict[tuple[str, int | None], list[Callable]] = defaultdict(list)

    def replace(self, name: str, layer: int | None, source: torch.Tensor,
                mask: torch.Tensor | None = None) -> "Interventions":
        check_point(name, layer)
        if mask is None:
            self._edits[(name, layer)].append(lambda value: source.expand_as(value))
        else:
            self._edits[(name, layer)].append(lambda value: torch.where(mask, source, value))
        return self

    def apply(self, name: str, layer: int | None,
              fn: Callable[[torch.Tensor], torch.Tensor]) -> "Interventions":
        check_point(name, layer)
        self._edits[(name, layer)].append(fn)
        return self

    def wants(self, name: str, layer: int | None) -> bool:
        return (name in self.capture_all or (name, layer) in self.capture_at
                or (name, layer) in self._edits)

    def __call__(self, name: str, layer: int | None, value: torch.Tensor) -> torch.Tensor:
        for edit in self._edits.get((name, layer), ()):
            value = edit(value)
        if name in self.capture_all or (name, layer) in self.capture_at:
            self.captured[(name, layer)] = value if self.keep_graph else value.detach()
        return value


def check_point(name: str, layer: int | None) -> None:
    if layer is None:
        if name not in FINAL_POINTS:
            raise ValueError(f"'{name}' is a per-layer point; give a layer")
    elif name not in LAYER_POINTS + CROSS_POINTS:
        raise ValueError(f"unknown activation point '{name}': one of "
                         f"{', '.join(LAYER_POINTS + CROSS_POINTS + FINAL_POINTS)}")


def run_with_hooks(network, ids: torch.Tensor, hooks: Hooks | None = None, start: int = 0,
                   h: torch.Tensor | None = None, stop: int | None = None) -> torch.Tensor:
    """The residual stream [B, T, d] leaving layer stop - 1 (the last, by default) of ids
    [B, T], with hooks (attention on whole rows, so the pattern point exists); from layer
    ``start`` when h, the stream entering it, is given (a patched run reuses the unpatched
    run's stream below the patch)."""
    if h is None:
        h, start = network.embed(ids), 0
    bias = network.attention_bias(ids.shape[1]) if network.config.causal else None
    final, _ = network.run_layers(h, start, stop, bias, hooks=hooks)
    return final


def point_width(info, name: str, n_tokens: int, ungroup_kv: bool = False) -> int:
    """Numbers one token of one layer holds at a point (info: a ModelInfo): what a capture
    of it costs, L x T x this x 4 bytes over a whole run."""
    kv = info.n_head if ungroup_kv else info.n_kv_head
    return {"q": info.n_head * info.d_head, "z": info.n_head * info.d_head,
            "rot_q": info.n_head * info.d_head, "rot_k": kv * info.d_head,
            "k": kv * info.d_head, "v": kv * info.d_head, "pattern": info.n_head * n_tokens,
            "scores": info.n_head * n_tokens,
            "result": info.n_head * info.d_model, "scale": 1}.get(name, info.d_model)
