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
    if hasattr(network, "blocks"):
        return network
    if getattr(network.config, "image", None) is not None:
        raise InputError("this encoder reads an image, whose strips have no token embedding "
                         "to split its scores into: score attribution reads token inputs")
    return network.encoder


def encoded_ids(model, text_or_ids, text_pair=None) -> tuple[list[int], list[int], list[str]]:
    """(ids, token types, display tokens) of a text (an encoder-decoder's source) or of
    pre-tokenized ids."""
    if isinstance(text_or_ids, str):
        if hasattr(model.network, "blocks"):
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


def embedding_parts(stack, ids: torch.Tensor, types: torch.Tensor):
    """[(name, [T, d])] the embeddings the stack adds before layer 0 (before its embedding
    norm): the token's (times the family's scale), the positions' and the token type's."""
    config = stack.config
    n = ids.shape[0]
    found = [("embed", stack.tok_emb.weight[ids].to(WORK) * config.embed_scale)]
    if config.positions == "learned":
        found.append(("pos_embed", stack.pos_emb.weight[
            torch.arange(n, device=ids.device) + config.position_offset].to(WORK)))
    elif config.positions == "sinusoidal":
        found.append(("pos_embed", stack.sinusoids(n).to(WORK)))
    if config.type_vocab_size:
        found.append(("type_embed", stack.type_emb.weight[types].to(WORK)))
    return found


def parts_bytes(n_sources: int, n_tokens: int, d_model: int) -> int:
    """What the split stream holds: sources x T x d float64 numbers (the largest array)."""
    return 8 * n_sources * n_tokens * d_model


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
    embeddings = embedding_parts(stack, id_tensor, type_tensor)
    n_sources = len(embeddings) + layer * (config.n_head + 1) + 1  # the bias part last
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
        parts = torch.empty(n_sources, n, config.d_model, dtype=WORK, device=device)
        bias = parts[-1]  # a view: the frozen norms update it in place
        bias.zero_()
        names = []
        for name, vector in embeddings:
            parts[len(names)] = vector
            names.append(name)
        if config.embedding_norm:
            filled = parts[:len(names)]
            frozen_norm(stack.emb_ln, filled, bias, filled.sum(0))
        for m in range(layer):
            _add_layer(stack.blocks[m], got, m, parts, bias, names)
        block = stack.blocks[layer]
        x = block.attention_input(got[("resid_pre", layer)][None])[0].to(WORK)
        names.append(BIAS)
        if block.pre_ln:
            frozen_norm(block.ln_1, parts[:-1], bias, got[("resid_pre", layer)].to(WORK))
        relative = stack.position_bias(n)
    captured = {name: got[(name, layer)] for name in AT_POINTS}
    return StreamParts(names, parts, x, layer, stack, captured,
                       None if relative is None else relative[0].to(WORK))


def _add_layer(block, got: dict, m: int, rows, bias, names: list[str]) -> None:
    """Layer m's heads and MLP joined to the split stream, through the frozen norms the
    engine's Block.forward passes them through (in place)."""
    attn = block.attn
    heads = head_results(attn, got[("z", m)])  # [H, T, d]
    head_bias = torch.zeros_like(bias)
    if attn.out.bias is not None:
        head_bias += attn.out.bias.to(WORK)
    if block.post_norms:  # Gemma 2: the heads' sum normalized before it joins the stream
        frozen_norm(block.ln_attn_out, heads, head_bias, heads.sum(0) + head_bias)
    start = len(names)
    rows[start:start + attn.n_head] = heads
    names.extend(head_name(m, h) for h in range(attn.n_head))
    bias += head_bias
    if not block.pre_ln and not block.parallel:  # post-norm: LN(h + attention)
        frozen_norm(block.ln_1, rows[:len(names)], bias,
                    (got[("resid_pre", m)] + got[("attn_out", m)]).to(WORK))
    rows[len(names)] = got[("mlp_out", m)].to(WORK)  # after its own post-norm, if any
    names.append(f"L{m}.mlp")
    if not block.pre_ln and not block.parallel:  # post-norm: LN(h + MLP)
        frozen_norm(block.ln_2, rows[:len(names)], bias,
                    (got[("resid_mid", m)] + got[("mlp_out", m)]).to(WORK))
