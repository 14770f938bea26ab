"""Inside one head of an encoder-decoder: the steps of inside.py for an encoder or decoder
self-attention head, or a cross-attention head, with T5's relative position bias as a step of
its own.

    cross-attention: X = the decoder's stream after its self-attention (normalized, pre-norm)
                     M = the encoder's output, [S, d]
                     Q = X W_Q^h [T, d_k];  K = M W_K^h, V = M W_V^h [S, d_k]
                     scores Q K^T [T, S] (no mask, no position bias) -> softmax -> A V -> W_O^h
    T5 self-attention: scores = Q K^T (T5 does not scale by 1/sqrt(d_k)), then
                     + B[h, bucket(j - i)]: the head's learned bias for the bucket of the
                     key-query distance (attention.relative_position_bucket), the same in
                     every layer of the stack, then the causal mask (decoder) -> softmax

Every array comes from the engine's own modules; the weights equal the trace's maps.
"""

from __future__ import annotations

import numpy as np
import torch

from ...core.errors import InputError
from ...engine.attention import hidden_keys, raw_scores, scaled_dot_product_attention
from ...engine.transformer import CrossInput
from ...models.seq2seq import KINDS
from .steps import HeadInternals, _np, head_internals


def _check(model, kind: str, layer, head) -> tuple[int, int]:
    if kind not in KINDS:
        raise InputError(f"the kind of attention is one of {', '.join(KINDS)}, got {kind!r}")
    config = model.network.config
    stack = config.encoder if kind == "encoder" else config.decoder
    for name, value, n in (("layer", layer, stack.n_layer), ("head", head, stack.n_head)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                or not 0 <= value < n:
            raise InputError(f"{name} must be 0..{n - 1} (counted from 0), got {value!r}")
    return int(layer), int(head)


def inside_one_head_seq2seq(model, source: str, target: str | None, kind: str, layer: int,
                            head: int) -> HeadInternals:
    """Every intermediate array of one encoder, decoder or cross-attention head of an
    encoder-decoder on a source and a target (the model's greedy output when target is
    None). HeadInternals.kind says which; key_tokens are the columns of its maps."""
    layer, head = _check(model, kind, layer, head)
    forced = model.teacher_forcing(source, target)
    net = model.network
    stack = net.encoder if kind == "encoder" else net.decoder
    block = stack.blocks[layer]
    with torch.no_grad():
        source_ids = torch.tensor([forced.source_ids], device=net.device)
        source_tokens = model.source_tokens(forced.source_ids, source)
        states = None
        if kind == "encoder":
            ids, rows, keys = source_ids, source_tokens, source_tokens
        else:
            states, _ = net.encode(source_ids)
            ids, rows = torch.tensor([forced.decoder_ids], device=net.device), model.display_tokens(
                forced.decoder_ids)
            keys = rows if kind == "decoder" else source_tokens
        n = ids.shape[1]
        bias = stack.attention_bias(n)  # causal mask and the relative position bias
        memory = None if states is None else CrossInput(states)
        start = stack.embed(net.source_vectors(ids) if kind == "encoder" else ids)
        hidden, _ = stack.run_layers(start, 0, layer, bias, memory=memory)
        if kind == "cross":
            hidden = block.after_self_attention(hidden, bias)
            attn, x, attn_bias = block.cross, block.cross_input(hidden), None
            q, k, v = attn.project_qkv(x, states)
            output, _ = attn(x, memory=states)
        else:
            attn, x, attn_bias = block.attn, block.attention_input(hidden), bias
            q, k, v = attn.project_qkv(x)
            output, _ = attn(x, bias=bias)
        context, weights = scaled_dot_product_attention(q, k, v, bias=attn_bias,
                                                        scale=attn.scale)
        kv = attn.kv_heads[head]
        # The steps before the softmax, kept for display: the engine's own raw_scores and
        # hidden_keys, the pieces of attention_scores (as inside_one_head keeps them)
        scores = raw_scores(q[:, head:head + 1], k[:, kv:kv + 1], attn.scale)[0, 0]
        causal = kind == "decoder"
        mask = torch.zeros_like(scores)
        unseen = hidden_keys(torch.arange(n, device=scores.device), scores.shape[-1], causal)
        if unseen is not None:
            mask.masked_fill_(unseen, float("-inf"))
        relative = None if kind == "cross" else stack.position_bias(n)
        position = {}
        if relative is not None:
            config = stack.config
            position = dict(
                position_bias=_np(relative[0, head]), buckets=stack.position_buckets(n).cpu().numpy(),
                bias_table=_np(stack.rel_bias.weight[:, head]),
                weights_without_bias=_np(torch.softmax(scores + mask, dim=-1)),
                relative_buckets=config.relative_buckets,
                relative_max_distance=config.relative_max_distance)
            masked = scores + relative[0, head] + mask
        else:
            masked = scores + mask
    return head_internals(
        attn, layer, head, hidden, x, q, k, v, scores, mask, masked, weights, context, output,
        tokens=list(rows), causal=causal, pre_ln=bool(block.pre_ln), text=source,
        extra={"source_truncated": forced.source_truncated, "generated": forced.generated},
        norm_name="RMSNorm" if stack.config.norm == "rmsnorm" else "LayerNorm",
        kind=kind, key_tokens=list(keys),
        memory=None if kind != "cross" else _np(states[0]), **position)
