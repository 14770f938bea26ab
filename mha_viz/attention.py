"""Multi-head attention, written out step by step so every head's weights can be kept.

Notation (shared with the "Inside one head" page): B batch, T tokens, d = d_model, H heads,
d_k = d / H. X [B, T, d] -> Q, K, V [B, H, T, d_k] -> scores Q K^T / sqrt(d_k) + mask ->
softmax -> weights [B, H, T, T] -> weights V [B, H, T, d_k] -> combine -> [B, T, d] -> W_O.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """[B, T, d] -> [B, H, T, d_k]."""
    batch, length, width = x.shape
    return x.view(batch, length, n_head, width // n_head).transpose(1, 2)


def combine_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, T, d_k] -> [B, T, H * d_k]; the inverse of split_heads."""
    batch, n_head, length, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, length, n_head * d_k)


def causal_mask_bias(length: int, dtype=torch.float32, device=None) -> torch.Tensor:
    """Additive mask [T, T]: 0 where query i may see key j (j <= i), -inf above the diagonal."""
    bias = torch.full((length, length), float("-inf"), dtype=dtype, device=device)
    return torch.triu(bias, diagonal=1)


def padding_mask_bias(attention_mask: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """[B, T] of 1 (real token) / 0 (padding) -> additive bias [B, 1, 1, T] hiding padded keys.

    Uses the dtype's most negative finite value rather than -inf so that a padded query row,
    which may see no real key, still gives finite (ignored) numbers instead of NaN.
    """
    hidden = (1.0 - attention_mask.to(dtype)) * torch.finfo(dtype).min
    return hidden[:, None, None, :]


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None = None,
    scale: float | None = None,
    weights_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T * scale + bias) V with the softmax written out and its weights returned.

    q, k, v: [B, H, T, d_k]; bias broadcastable to [B, H, T, T] (additive: 0 or -inf/min).
    weights_out, when given, is a [B, H, T, T] tensor the weights are written into, so a
    caller collecting every layer's maps (a trace) needs no copy afterwards.
    Returns (context [B, H, T, d_k], weights [B, H, T, T]).
    """
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-1, -2))
    scores.mul_(scale)
    if bias is not None:
        scores.add_(bias)
    if weights_out is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        weights = torch.softmax(scores, dim=-1, out=weights_out)
    return torch.matmul(weights, v), weights


def gate_heads(context: torch.Tensor, head_mask: torch.Tensor, mode: str = "zero",
               attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Apply a per-head gate to the heads' outputs (before the output projection).

    context [B, H, T, d_k]; head_mask [H] or [B, H] of floats in [0, 1] (1 keeps the head).
    mode="zero": out_h = g_h * context_h, so g = 0 removes the head (Michel et al. 2019).
    mode="mean": out_h = g_h * context_h + (1 - g_h) * mean over positions of context_h, so
    g = 0 replaces the head's output by its mean (mean ablation).
    """
    gate = head_mask.to(context.dtype)
    if gate.dim() == 1:
        gate = gate[None, :]
    gate = gate[:, :, None, None]
    if mode == "zero":
        return context * gate
    if mode == "mean":
        if attention_mask is None:
            mean = context.mean(dim=2, keepdim=True)
        else:
            weights = attention_mask.to(context.dtype)[:, None, :, None]
            mean = (context * weights).sum(2, keepdim=True) / weights.sum(2, keepdim=True)
        return gate * context + (1 - gate) * mean
    raise ValueError(f"unknown ablation mode {mode!r}; use 'zero' or 'mean'")


class MultiHeadAttention(nn.Module):
    """Self-attention with either one fused QKV projection (GPT-2's c_attn) or three separate
    ones (BERT's query/key/value), an output projection, optional masks and a per-head gate."""

    def __init__(self, d_model: int, n_head: int, fused_qkv: bool = True, bias: bool = True,
                 scale: float | None = None):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model {d_model} is not divisible by {n_head} heads")
        self.d_model, self.n_head, self.d_head = d_model, n_head, d_model // n_head
        self.fused_qkv = fused_qkv
        self.scale = scale if scale is not None else 1.0 / math.sqrt(self.d_head)
        if fused_qkv:
            self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        else:
            self.query = nn.Linear(d_model, d_model, bias=bias)
            self.key = nn.Linear(d_model, d_model, bias=bias)
            self.value = nn.Linear(d_model, d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """X [B, T, d] -> Q, K, V, each [B, H, T, d_k]."""
        if self.fused_qkv:
            q, k, v = self.qkv(x).split(self.d_model, dim=-1)
        else:
            q, k, v = self.query(x), self.key(x), self.value(x)
        return split_heads(q, self.n_head), split_heads(k, self.n_head), split_heads(v, self.n_head)

    def forward(
        self,
        x: torch.Tensor,
        bias: torch.Tensor | None = None,
        head_mask: torch.Tensor | None = None,
        ablation: str = "zero",
        attention_mask: torch.Tensor | None = None,
        weights_out: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, d] -> (output [B, T, d], weights [B, H, T, T]).

        bias: additive attention mask (causal and/or padding). head_mask: see gate_heads; the
        returned weights are the softmax's, untouched by the gate.
        """
        q, k, v = self.project_qkv(x)
        context, weights = scaled_dot_product_attention(q, k, v, bias, self.scale, weights_out)
        if head_mask is not None:
            context = gate_heads(context, head_mask, ablation, attention_mask)
        return self.out(combine_heads(context)), weights

    def fuse(self) -> "MultiHeadAttention":
        """Turn separate Q/K/V projections into one fused projection (same numbers, one GEMM)."""
        if self.fused_qkv:
            return self
        fused = nn.Linear(self.d_model, 3 * self.d_model, bias=self.query.bias is not None)
        with torch.no_grad():
            fused.weight.copy_(torch.cat([self.query.weight, self.key.weight, self.value.weight]))
            if fused.bias is not None:
                fused.bias.copy_(torch.cat([self.query.bias, self.key.bias, self.value.bias]))
        del self.query, self.key, self.value
        self.qkv, self.fused_qkv = fused, True
        return self
