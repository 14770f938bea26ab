"""The GPT-2 and BERT stacks, built on attention.MultiHeadAttention.

Both are one class, TransformerStack, parameterised by StackConfig: GPT-2 is pre-LN, causal,
with learned positions, a final LayerNorm and an LM head tied to the token embedding; BERT is
post-LN, bidirectional, with token-type embeddings, an embedding LayerNorm and (when the
checkpoint carries one) the masked-LM head. The forward is split into embed / run_layers /
finish so analyses can restart from the hidden state entering any layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .attention import MultiHeadAttention, causal_mask_bias, padding_mask_bias

# Activation names as they appear in config.json. "gelu_new", "gelu_fast" and
# "gelu_pytorch_tanh" are all the tanh approximation that GPT-2 was trained with.
ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
}


@dataclass(frozen=True)
class StackConfig:
    arch: str  # "gpt2" (pre-LN, causal) or "bert" (post-LN, bidirectional)
    n_layer: int
    n_head: int
    d_model: int
    d_ff: int
    vocab_size: int
    max_positions: int
    layer_norm_eps: float
    activation: str
    type_vocab_size: int = 0
    has_lm_head: bool = False
    # GPT-2 variants (scale_attn_weights, scale_attn_by_inverse_layer_idx) change the scale
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False

    @property
    def causal(self) -> bool:
        return self.arch == "gpt2"

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head

    def attention_scale(self, layer: int) -> float:
        scale = self.d_head ** -0.5 if self.scale_attn_weights else 1.0
        if self.scale_attn_by_inverse_layer_idx:
            scale /= float(layer + 1)
        return scale


class Block(nn.Module):
    """One transformer layer: attention + MLP with residuals, pre-LN (GPT-2) or post-LN (BERT)."""

    def __init__(self, config: StackConfig, layer: int):
        super().__init__()
        self.pre_ln = config.arch == "gpt2"
        self.attn = MultiHeadAttention(config.d_model, config.n_head, fused_qkv=self.pre_ln,
                                       scale=config.attention_scale(layer))
        self.ln_1 = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ln_2 = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.mlp_in = nn.Linear(config.d_model, config.d_ff)
        self.mlp_out = nn.Linear(config.d_ff, config.d_model)
        self.act = ACTIVATIONS[config.activation]

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp_out(self.act(self.mlp_in(x)))

    def forward(self, h, bias=None, head_mask=None, ablation="zero", attention_mask=None,
                weights_out=None):
        if self.pre_ln:
            attended, weights = self.attn(self.ln_1(h), bias, head_mask, ablation,
                                          attention_mask, weights_out)
            h = h + attended
            return h + self.mlp(self.ln_2(h)), weights
        attended, weights = self.attn(h, bias, head_mask, ablation, attention_mask, weights_out)
        h = self.ln_1(h + attended)
        return self.ln_2(h + self.mlp(h)), weights


class TransformerStack(nn.Module):
    def __init__(self, config: StackConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.max_positions, config.d_model)
        if config.arch == "bert":
            self.type_emb = nn.Embedding(max(config.type_vocab_size, 1), config.d_model)
            self.emb_ln = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.blocks = nn.ModuleList(Block(config, layer) for layer in range(config.n_layer))
        if config.arch == "gpt2":
            self.final_ln = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        if config.arch == "bert" and config.has_lm_head:
            # BERT's MLM head: dense -> activation -> LayerNorm -> decoder tied to tok_emb
            self.mlm_dense = nn.Linear(config.d_model, config.d_model)
            self.mlm_ln = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
            self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))

    # --- the forward, in pieces ---------------------------------------------------------

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None):
        """[B, T] ids -> hidden state entering layer 0, [B, T, d]."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        h = self.tok_emb(input_ids) + self.pos_emb(positions)
        if self.config.arch == "bert":
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            h = self.emb_ln(h + self.type_emb(token_type_ids))
        return h

    def attention_bias(self, length: int, attention_mask: torch.Tensor | None = None,
                       dtype=torch.float32):
        """The additive mask every layer shares: causal for GPT-2, padding when given."""
        bias = causal_mask_bias(length, dtype) if self.config.causal else None
        if attention_mask is not None and not bool(attention_mask.all()):
            padding = padding_mask_bias(attention_mask, dtype)
            bias = padding if bias is None else bias + padding
        return bias

    def run_layers(self, h, start=0, stop=None, bias=None, head_mask=None, ablation="zero",
                   attention_mask=None, attentions_out=None, keep_attentions=False,
                   layer_inputs=None):
        """Run layers start..stop-1 on h (the hidden state entering layer `start`).

        head_mask: [L, H] or [B, L, H] gates (see attention.gate_heads), indexed by absolute
        layer. attentions_out: [L, H, T, T] buffer the softmax writes into (batch of 1).
        keep_attentions: return a list of every layer's [B, H, T, T] weights.
        layer_inputs: a list that receives the hidden state entering each layer.
        """
        stop = self.config.n_layer if stop is None else stop
        kept = []
        for layer in range(start, stop):
            if layer_inputs is not None:
                layer_inputs.append(h)
            gate = None
            if head_mask is not None:
                gate = head_mask[layer] if head_mask.dim() == 2 else head_mask[:, layer]
            out = None if attentions_out is None else attentions_out[layer].unsqueeze(0)
            h, weights = self.blocks[layer](h, bias, gate, ablation, attention_mask, out)
            if keep_attentions:
                kept.append(weights)
        return h, kept

    def finish(self, h):
        """Hidden state after the last layer -> the model's last hidden state."""
        return self.final_ln(h) if self.config.arch == "gpt2" else h

    def lm_logits(self, last_hidden):
        """Vocabulary logits from the last hidden state (GPT-2 LM head / BERT MLM head)."""
        if self.config.arch == "gpt2":
            return last_hidden @ self.tok_emb.weight.T
        if not self.config.has_lm_head:
            raise RuntimeError("this BERT checkpoint has no masked-LM head")
        x = self.mlm_ln(ACTIVATIONS[self.config.activation](self.mlm_dense(last_hidden)))
        return x @ self.tok_emb.weight.T + self.mlm_bias

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, head_mask=None,
                ablation="zero", attentions_out=None, keep_attentions=False):
        """ids [B, T] -> (last hidden [B, T, d], list of per-layer weights if kept)."""
        bias = self.attention_bias(input_ids.shape[1], attention_mask)
        h = self.embed(input_ids, token_type_ids)
        h, kept = self.run_layers(h, 0, None, bias, head_mask, ablation, attention_mask,
                                  attentions_out, keep_attentions)
        return self.finish(h), kept
