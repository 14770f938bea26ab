"""One head's slices of its layer's projection matrices, in x @ W form."""

from __future__ import annotations

import torch


def head_weight_slices(attn, head: int) -> dict[str, torch.Tensor | None]:
    """The weights of one query head in ``x @ W`` form: W_Q, W_K, W_V [d, d_k], b_Q, b_K, b_V
    [d_k], W_O [d_k, d] (the rows of W_O^T that this head's context multiplies). K and V are
    those of the key/value head this query head reads."""
    dk = attn.d_head
    kv = attn.kv_heads[head]
    q_width, kv_width = attn.n_head * dk, attn.n_kv_head * dk
    if attn.fused_qkv:
        weight, bias = attn.qkv.weight, attn.qkv.bias  # rows: Q block, K block, V block
        blocks = [(0, head), (q_width, kv), (q_width + kv_width, kv)]
        parts = [(weight[start + i * dk:start + (i + 1) * dk],
                  None if bias is None else bias[start + i * dk:start + (i + 1) * dk])
                 for start, i in blocks]
    else:
        parts = [(lin.weight[i * dk:(i + 1) * dk],
                  None if lin.bias is None else lin.bias[i * dk:(i + 1) * dk])
                 for lin, i in ((attn.query, head), (attn.key, kv), (attn.value, kv))]
    (wq, bq), (wk, bk), (wv, bv) = parts
    return {"W_Q": wq.T, "W_K": wk.T, "W_V": wv.T, "b_Q": bq, "b_K": bk, "b_V": bv,
            "W_O": attn.out.weight[:, head * dk:(head + 1) * dk].T}
