"""What a decoder's cross-attention reads from the encoder (CrossInput), handed to every
decoder layer by TransformerStack.run_layers."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class CrossInput:
    """What a decoder's cross-attention reads: the encoder's output states [B, S, d], the
    padding bias of its tokens ([B, 1, 1, S] or None), a gate per cross head ([L, H],
    [B, L, H] or None) and where the weights go: kept (a list, every layer's [B, H, T, S]
    appended) or weights_out ([L, H, T, S], written in place; batch of 1)."""
    states: torch.Tensor
    bias: torch.Tensor | None = None
    head_mask: torch.Tensor | None = None
    ablation: str = "zero"
    kept: list | None = None
    weights_out: torch.Tensor | None = None

    def weights_out_for(self, layer: int):
        return None if self.weights_out is None else self.weights_out[layer].unsqueeze(0)
