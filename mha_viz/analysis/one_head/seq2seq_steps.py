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

from ...core.errors import InputError
from ...models.seq2seq import KINDS
from .steps import HeadInternals, inside_one_head


def inside_one_head_seq2seq(model, source: str, target: str | None, kind: str, layer: int,
                            head: int) -> HeadInternals:
    """Every intermediate array of one encoder, decoder or cross-attention head of an
    encoder-decoder on a source and a target (the model's greedy output when target is
    None). HeadInternals.kind says which; key_tokens are the columns of its maps. The same
    steps as any head's, over another set of the model's maps:
    inside_one_head(model, source, layer, head, target=target, maps=kind)."""
    if kind not in KINDS:
        raise InputError(f"the kind of attention is one of {', '.join(KINDS)}, got {kind!r}")
    return inside_one_head(model, source, layer, head, target=target, maps=kind)
