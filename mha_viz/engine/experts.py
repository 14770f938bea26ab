"""A mixture-of-experts MLP (Shazeer et al. 2017, "Outrageously Large Neural Networks"; as
Mixtral uses it, Jiang et al. 2024): a router scores each token for every expert, the k
experts with the highest softmax probability each run their own gated MLP on it, and their
outputs are summed, weighted by those k probabilities renormalized to sum to 1. Attention is
untouched: a token's MLP output, which the next layers' heads read, is the only thing the
routing changes."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class MixtureOfExperts(nn.Module):
    """router [E, d]; w_in [E, 2 d_ff, d] each expert's [gate; up]; w_out [E, d, d_ff]."""

    def __init__(self, d_model: int, d_ff: int, n_experts: int, top_k: int, act):
        super().__init__()
        self.top_k, self.act = top_k, act
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.w_in = nn.Parameter(torch.empty(n_experts, 2 * d_ff, d_model))
        self.w_out = nn.Parameter(torch.empty(n_experts, d_model, d_ff))

    def routing(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N, d] -> (weights [N, k], experts [N, k]): each token's k experts, by the
        router's softmax probability, and their probabilities renormalized to sum to 1."""
        probabilities = torch.softmax(self.router(x).float(), dim=-1)
        weights, experts = torch.topk(probabilities, self.top_k, dim=-1)
        return weights / weights.sum(dim=-1, keepdim=True), experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        weights, experts = self.routing(flat)
        out = torch.zeros_like(flat)
        for expert in experts.unique().tolist():  # each expert on the tokens routed to it
            token, slot = torch.where(experts == expert)
            gate, up = F.linear(flat[token], self.w_in[expert]).chunk(2, dim=-1)
            hidden = F.linear(self.act(gate) * up, self.w_out[expert])
            out.index_add_(0, token, hidden * weights[token, slot, None].to(hidden.dtype))
        return out.reshape(x.shape)
