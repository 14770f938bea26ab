"""The input of one layer's heads as a sum of the parts that wrote it (docs/analyses.md, "Why
a head attends"; Elhage et al. 2021).

The residual stream entering layer l is the embeddings (token, learned or fixed positions,
token types) plus, for every earlier layer, each head's output (its context through its
slice of W_O), the MLP's output and the biases. Every norm between them and the heads
(the embedding norm, a post-norm model's LayerNorms after each sub-layer, Gemma 2's norms
on each sub-layer's output, the pre-attention norm) is frozen at its value on this input:
x -> w * centre(x) / sigma + b with sigma read from the engine's own activations (from the
sum of the parts where the engine keeps no activation: the embeddings before their norm, the
heads' sum before Gemma 2's norm of it), which is linear. So every part goes through the
same frozen steps and the parts still sum exactly to what the heads read. One forward with
the engine's named points (engine.interventions) gives every activation needed; nothing is
run again per source.

The split follows the engine's own description of its wiring, not a copy of its forward:
the stack's embedding terms and norm, and each block's steps in order (Block.wiring,
engine.wiring): an attention step adds a part per head, a non-linear sub-layer (the MLP) one
part, the engine's output where it joins the stream; an add joins parts; a norm is frozen.
After every layer the parts' running sum is checked against the stream the engine computed
(the next layer's input; at the last, what the heads read): a family whose wiring changed
in one place and not the other gets a WiringError naming the layer and the gap, never a
wrong figure.

A layer's MLP output is one part (the MLP itself is not linear); the biases of every layer
and the norms' offsets (LayerNorm's beta) are one part, "bias".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ...core.errors import InputError
from ...engine.interventions import Interventions
from ...engine.transformer import TransformerStack
from ...engine.wiring import (ADD, ATTENTION, INPUT, NORM, OUTPUT, WiringError, producer,
                              the_step)
from ..heads import head_name

WORK = torch.float64  # the parts are summed by the hundred: float64 keeps the sum the engine's
BIAS = "bias"
# the points kept from each layer below the one decomposed, and at that layer
BELOW_POINTS = ("resid_pre", "z", "attn_out", "resid_mid", "mlp_out")
AT_POINTS = ("resid_pre", "rot_q", "rot_k", "pattern")


@dataclass
class StreamParts:
    """The attention input X of one layer split by source (float64, batch removed).

    names [n]: "embed", "pos_embed", "type_embed", "L0.H3", "L0.mlp", ..., "bias".
    parts [n, T, d]: parts.sum(0) equals x, the attention input the engine computed.
    captured: the engine's activations of the layer (rot_q [1, H, T, d_k], rot_k
    [1, H_kv, T, d_k], pattern [1, H, T, T], resid_pre [1, T, d])."""
    names: list[str]
    parts: torch.Tensor
    x: torch.Tensor
    layer: int
    stack: object  # the TransformerStack that ran
    captured: dict
    position_bias: torch.Tensor | None  # [H, T, T] T5's relative position bias, else None

    @property
    def block(self):
        return self.stack.blocks[self.layer]

    @property
    def n_tokens(self) -> int:
        return int(self.x.shape[0])


def stack_of(model):
    """The TransformerStack a model's self-attention runs in: its network, or an
    encoder-decoder's encoder (whose self-attention over the source is decomposed; the
    decoder's would take the cross-attention heads and the encoder's output as sources,
    which is not built)."""
    network = model.network
    if network.device.type == "mps":
        raise InputError("score attribution and composition add their parts in float64, "
                         "which Apple's MPS devices do not compute: load the model on the "
                         "CPU (or a CUDA GPU) for them")
    if isinstance(network, TransformerStack):
        return network
    if getattr(network.config, "image", None) is not None:
        raise InputError("this encoder reads an image, whose strips have no token embedding "
                         "to split its scores into: score attribution reads token inputs")
    return network.encoder


def encoded_ids(model, text_or_ids, text_pair=None) -> tuple[list[int], list[int], list[str]]:
    """(ids, token types, display tokens) of a text (an encoder-decoder's source) or of
    pre-tokenized ids."""
    if isinstance(text_or_ids, str):
        if isinstance(model.network, TransformerStack):
            enc = model.encode(text_or_ids, text_pair)
            ids, types = enc.input_ids, enc.token_type_ids
        else:
            ids, _ = model.encode_source(text_or_ids)
            types = [0] * len(ids)
    else:
        ids = [int(i) for i in np.asarray(text_or_ids).reshape(-1)]
        stack = stack_of(model)
        if not ids or len(ids) > stack.config.max_positions or min(ids) < 0 \
                or max(ids) >= stack.config.vocab_size:
            raise InputError(f"token ids must be 1 to {stack.config.max_positions} ids in "
                             f"[0, {stack.config.vocab_size})")
        types = [0] * len(ids)
    return list(ids), list(types), model.display_tokens(ids)


def why_no_split(model) -> str | None:
    """Why no score of this model can be split by source (its device, an image encoder), or
    None when its self-attention can be: what a page asks before offering the split."""
    try:
        stack_of(model)
    except InputError as error:
        return str(error)
    return None


def check_head(model, layer, head) -> tuple[int, int]:
    config = stack_of(model).config
    for value, name, limit in ((layer, "layer", config.n_layer), (head, "head", config.n_head)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                or not 0 <= value < limit:
            raise InputError(f"{name} must be 0..{limit - 1} (counted from 0), got {value!r}")
    return int(layer), int(head)


def frozen_norm(norm: nn.Module, parts: torch.Tensor, bias: torch.Tensor, x: torch.Tensor):
    """A norm applied to parts [n, T, d] and the bias part [T, d] whose sum is its input x
    [T, d], with its scale frozen at x's (in place; returns nothing). LayerNorm:
    w * (p - mean(p)) / sqrt(var(x) + eps), beta joining the bias part; RMSNorm:
    w * p / sqrt(mean(x^2) + eps) (the engine holds Gemma's 1 + w as the weight)."""
    if isinstance(norm, nn.Identity):
        return
    if isinstance(norm, nn.LayerNorm):
        scale = torch.sqrt(x.var(-1, unbiased=False) + norm.eps)
        parts -= parts.mean(-1, keepdim=True)
        bias -= bias.mean(-1, keepdim=True)
    elif isinstance(norm, nn.RMSNorm):
        eps = norm.eps if norm.eps is not None else torch.finfo(torch.float32).eps
        scale = torch.sqrt(x.pow(2).mean(-1) + eps)
    else:  # a norm the engine does not build today
        raise InputError(f"a {type(norm).__name__} cannot be frozen into a linear step")
    parts /= scale[:, None]
    bias /= scale[:, None]
    weight = getattr(norm, "weight", None)
    if weight is not None:
        parts *= weight.to(WORK)
        bias *= weight.to(WORK)
    if getattr(norm, "bias", None) is not None:
        bias += norm.bias.to(WORK)


def head_results(attn, z: torch.Tensor) -> torch.Tensor:
    """Each head's output through its slice of W_O: z [H, T, d_k] -> [H, T, d] (WORK),
    multiplied in the weights' dtype as the engine multiplies them."""
    w_out = attn.out.weight.view(attn.d_model, attn.n_head, attn.d_head)
    return torch.einsum("htk,dhk->htd", z.to(w_out.dtype), w_out).to(WORK)


def parts_bytes(n_sources: int, n_tokens: int, d_model: int) -> int:
    """What the split stream holds: sources x T x d float64 numbers (the largest array)."""
    return 8 * n_sources * n_tokens * d_model


# the part a non-linear sub-layer adds is named after its step: "L3.mlp", "L3.cross"
SOURCE_NAMES = {"mlp": "mlp", "cross_attention": "cross"}


def sources_of(block) -> int:
    """The parts a block's sub-layers add to the split stream: one per head of its
    attention, one per other sub-layer."""
    return sum(block.attn.n_head if step.kind == ATTENTION else 1 for step in block.wiring
               if step.kind != NORM and step.kind != ADD)


def stream_parts(model, ids: list[int], types: list[int], layer: int) -> StreamParts:
    """The attention input of `layer` split by source (see the module docstring), from one
    forward of the layers up to it."""
    from ...core.budget import ONE_INPUT_SHARE, budget_bytes, size_text

    stack = stack_of(model)
    config = stack.config
    device = stack.device
    n = len(ids)
    id_tensor = torch.tensor(ids, dtype=torch.long, device=device)
    type_tensor = torch.tensor(types, dtype=torch.long, device=device)
    with torch.inference_mode():
        embeddings = stack.embedding_terms(
            id_tensor[None], type_tensor[None] if config.type_vocab_size else None)
    n_sources = len(embeddings) + sum(sources_of(stack.blocks[m]) for m in range(layer)) + 1
    need = parts_bytes(n_sources, n, config.d_model)
    if need > ONE_INPUT_SHARE * budget_bytes():
        raise InputError(f"splitting layer {layer}'s input into its {n_sources} sources over "
                         f"{n} tokens would hold {size_text(need)}, more than this server "
                         f"keeps for one input: use a shorter text or an earlier layer")
    hooks = Interventions(capture=[(p, m) for m in range(layer) for p in BELOW_POINTS]
                          + [(p, layer) for p in AT_POINTS])
    with torch.inference_mode():
        h = stack.embed(id_tensor[None], type_tensor[None] if config.type_vocab_size else None)
        stack.run_layers(h, 0, layer + 1, stack.attention_bias(n), hooks=hooks)
        got = {key: value[0] for key, value in hooks.captured.items()}
        split = _Split(torch.empty(n_sources, n, config.d_model, dtype=WORK, device=device),
                       _tolerance(stack))
        stream = split.append([name for name, _ in embeddings],
                              torch.stack([term.reshape(-1, n, config.d_model)[0].to(WORK)
                                           for _, term in embeddings]))
        if stack.embedding_norm is not None:
            stream = split.norm(stack.embedding_norm, stream, None, ())
        split.check(stream, got[("resid_pre", 0)], "the embeddings (layer 0's input)")
        for m in range(layer):
            stream = _Block(split, stack.blocks[m], m, got).value(stream, OUTPUT)
            split.check(stream, got[("resid_pre", m + 1)],
                        f"layer {m}'s output (layer {m + 1}'s input)")
        block = stack.blocks[layer]
        resid_pre = got[("resid_pre", layer)]
        x = block.attention_input(resid_pre[None])[0].to(WORK)
        read = the_step(block.wiring, ATTENTION).reads[0]
        stream = _Block(split, block, layer, got).value(stream, read)
        if (stream.start, stream.stop) != (0, n_sources - 1):
            raise WiringError(f"layer {layer}'s heads read {stream.stop - stream.start} of "
                              f"the {n_sources - 1} sources the wiring adds")
        split.parts[-1] = stream.bias
        split.names.append(BIAS)
        split.check(stream, x, f"what layer {layer}'s heads read", split.parts.sum(0))
        relative = stack.position_bias(n)
    captured = {name: got[(name, layer)] for name in AT_POINTS}
    return StreamParts(split.names, split.parts, x, layer, stack, captured,
                       None if relative is None else relative[0].to(WORK))


def _tolerance(stack) -> float:
    """How far, relative to the stream's size at a position, the parts' sum may lie from the
    engine's stream: the engine's sums (in its dtype) and the parts' (float64) differ by
    rounding, about 1e-7 in float32 and 1e-3 to 1e-2 in half precisions on the test
    models; past this a part is missing, counted twice or wrongly normalized."""
    return max(1e-4, 8 * torch.finfo(stack.dtype).eps)


@dataclass
class _Value:
    """A value of a block's wiring in the split stream: parts rows start..stop-1 plus bias
    [T, d], whose sum is total [T, d]; or, for a non-linear sub-layer's output not yet
    joined, the engine's point holding it (point) and its part's name. stale: why it can
    no longer be read (a norm changed its parts in place)."""
    start: int = 0
    stop: int = 0
    bias: torch.Tensor | None = None
    total: torch.Tensor | None = None
    point: str = ""
    name: str = ""
    stale: str = ""


class _Split:
    """The parts [n, T, d] being filled, their names, and the steps every block's wiring
    applies to them: append new parts, add values, freeze a norm."""

    def __init__(self, parts: torch.Tensor, tolerance: float):
        self.parts, self.tolerance = parts, tolerance
        self.names: list[str] = []

    def append(self, names: list[str], rows: torch.Tensor, bias=None) -> _Value:
        start = len(self.names)
        if start + len(names) >= self.parts.shape[0]:  # the last row is the bias part's
            raise WiringError(f"the wiring adds more sources than the {self.parts.shape[0] - 1} "
                              f"its blocks declare")
        self.parts[start:start + len(names)] = rows
        self.names.extend(names)
        bias = torch.zeros_like(rows[0]) if bias is None else bias
        return _Value(start, start + len(names), bias, rows.sum(0) + bias)

    def add(self, values: list[_Value], layer: int) -> _Value:
        """The sum of values: their parts, which must be consecutive rows, and biases."""
        ordered = sorted(values, key=lambda v: v.start)
        for before, after in zip(ordered, ordered[1:]):
            if before.stop != after.start:
                raise WiringError(f"layer {layer} adds values whose parts are not one run of "
                                  f"sources ({before.start}..{before.stop}, "
                                  f"{after.start}..{after.stop})")
        return _Value(ordered[0].start, ordered[-1].stop, sum(v.bias for v in values),
                      sum(v.total for v in values))

    def norm(self, norm, value: _Value, x, live) -> _Value:
        """value through norm with its scale frozen at x's (the engine's input to it; None:
        the value's own sum), in place: the values sharing its parts are read no more."""
        x = value.total if x is None else x
        bias, total = value.bias.clone(), value.total.clone()
        frozen_norm(norm, self.parts[value.start:value.stop], bias, x)
        frozen_norm(norm, self.parts[:0], total, x)  # the sum goes the same way
        for other in [value, *live]:
            if other.start < value.stop and value.start < other.stop:
                other.stale = "its parts were normalized in place"
        return _Value(value.start, value.stop, bias, total)

    def check(self, value: _Value, engine: torch.Tensor, where: str,
              total: torch.Tensor | None = None) -> None:
        """WiringError when the parts' sum (value's running total, or `total`) is not the
        engine's stream at this point: relative to its size at each position."""
        total = value.total if total is None else total
        engine = engine.to(WORK)
        gaps = (total - engine).norm(dim=-1) / engine.norm(dim=-1).clamp_min(1e-12)
        worst = int(gaps.argmax())
        if not float(gaps[worst]) <= self.tolerance:
            raise WiringError(
                f"split by source, {where} does not add up to what the engine computed: a "
                f"relative gap of {float(gaps[worst]):.3g} at position {worst}, past "
                f"{self.tolerance:.0e}. The engine's wiring there and its description "
                f"(Block.wiring) differ")


class _Block:
    """One block's values in the split stream, computed as its wiring says, when asked for."""

    def __init__(self, split: _Split, block, layer: int, got: dict):
        self.split, self.block, self.layer, self.got = split, block, layer, got
        self.values: dict[str, _Value] = {}

    def value(self, stream: _Value, name: str) -> _Value:
        """The value `name` of the block, the block's input being `stream`."""
        self.values[INPUT] = stream
        return self._value(name)

    def _engine(self, name: str):
        """The engine's own value of `name` at this layer (float64), None when it keeps none."""
        found = self.got.get((name, self.layer))
        if found is not None:
            return found.to(WORK)
        step = producer(self.block.wiring, name)
        if step is None or step.kind != ADD:
            return None
        reads = [self._engine(read) for read in step.reads]
        return None if any(r is None for r in reads) else sum(reads)

    def _value(self, name: str) -> _Value:
        found = self.values.get(name)
        if found is not None:
            if found.stale:
                raise WiringError(f"layer {self.layer}'s wiring reads {name} after "
                                  f"{found.stale}: the split cannot follow it")
            return found
        step = producer(self.block.wiring, name)
        if step is None:
            raise WiringError(f"layer {self.layer}'s wiring reads {name}, which no step writes")
        if step.kind == ATTENTION:
            found = self._heads()
        elif step.kind == ADD:
            found = self.split.add([self._joined(read) for read in step.reads], self.layer)
        elif step.kind == NORM:
            source = self._value(step.reads[0])
            if source.point:  # a sub-layer's own output norm: the engine's value after it
                found = _Value(point=name, name=source.name)
            else:
                found = self.split.norm(self.block.module_of(step), source,
                                        self._engine(step.reads[0]), self.values.values())
        else:  # a non-linear sub-layer: one part, the engine's output where it joins
            found = _Value(point=name, name=f"L{self.layer}.{SOURCE_NAMES[step.kind]}")
        self.values[name] = found
        return found

    def _joined(self, name: str) -> _Value:
        """The value `name` as an add reads it: a sub-layer's output joins the stream as its
        part, the engine's value at that point (kept, so that it joins once)."""
        found = self._value(name)
        if found.point:
            point = self.got.get((found.point, self.layer))
            if point is None:
                raise WiringError(f"layer {self.layer}'s {found.name} joins the stream at "
                                  f"{found.point}, where the engine keeps no activation")
            found = self.values[name] = self.split.append([found.name], point[None].to(WORK))
        return found

    def _heads(self) -> _Value:
        """Each head's output through its slice of W_O, from the engine's z; W_O's bias."""
        attn = self.block.attn
        heads = head_results(attn, self.got[("z", self.layer)])  # [H, T, d]
        bias = torch.zeros_like(heads[0])
        if attn.out.bias is not None:
            bias += attn.out.bias.to(WORK)
        return self.split.append([head_name(self.layer, h) for h in range(attn.n_head)],
                                 heads, bias)
