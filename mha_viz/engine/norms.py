"""RMSNorm as the families compute it in bfloat16 and float16 (in float32 every order gives
the same numbers).

Both normalize in float32. Llama, Mistral, Qwen, Phi-3, OLMo 2 and T5 then round the
normalized stream to the weights' dtype and multiply by the weight in that dtype; Gemma
multiplies by its (1 + w) in float32 and rounds once, as torch.nn.RMSNorm does. One rounding
apart, the two differ by up to a unit in the last place of every element, enough to move a
bfloat16 model's maps by more than the rest of its arithmetic does.

The weight itself is kept in float32 in every model (checkpoints.build_stack: it is small):
Gemma stores w and scales by 1 + w computed in float32, which rounded to bfloat16 would be
another number; for the others a bfloat16 weight widened and rounded back is itself.
"""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.RMSNorm):
    """torch.nn.RMSNorm (the same parameter, "weight"); scale_in_float32 False rounds before
    scaling (Llama's order), True after (Gemma's, and torch's own)."""

    def __init__(self, width: int, eps: float, scale_in_float32: bool = False):
        super().__init__(width, eps=eps)
        self.scale_in_float32 = scale_in_float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            return super().forward(x)
        wide = x.float()
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.scale_in_float32:
            return (normed * self.weight.float()).to(x.dtype)
        return self.weight.to(x.dtype) * normed.to(x.dtype)
