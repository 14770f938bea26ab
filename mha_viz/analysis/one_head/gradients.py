"""How one head's projections learn (docs/analyses.md, "Inside one head"): the gradient of
a loss with respect to the head's W_Q and W_O, computed by autograd through the whole model,
and the same numbers from the chain rule's two formulas:

    dL/dW_Q^h = X^T dL/dQ^h        (Q^h = X W_Q^h + b_Q^h)
    dL/dW_O^h = C^h^T dL/dY        (Y = sum_h C^h W_O^h + b_O)

with X the attention input, C^h the head's context (its z) and Y the attention output, each
gradient read at the engine's intervention points (attn_in, q, z, attn_out).

Losses: "next_token", the model's mean next-token cross-entropy on the text (causal models
with an LM head); "output_norm", L = 1/2 ||Y||^2 of this layer's attention output (any
model: then dL/dY = Y, the simplest chain rule to follow by hand).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from ...core.errors import InputError
from ...engine.interventions import Interventions, run_with_hooks
from ...engine.placement import to_numpy

LOSSES = ("next_token", "output_norm")


@dataclass
class HeadGradients:
    """dL/dW_Q^h [d_model, d_k] and dL/dW_O^h [d_k, d_model] (in the x @ W convention the
    page uses), by autograd and by the formulas, and the loss."""
    loss_name: str
    loss: float
    d_W_Q: np.ndarray  # autograd
    d_W_O: np.ndarray
    d_W_Q_formula: np.ndarray  # X^T dL/dQ
    d_W_O_formula: np.ndarray  # C^T dL/dY
    d_Q: np.ndarray  # [T, d_k] dL/dQ^h
    d_Y: np.ndarray  # [T, d_model] dL/dY

    @property
    def largest_difference(self) -> float:
        return float(max(np.abs(self.d_W_Q - self.d_W_Q_formula).max(),
                         np.abs(self.d_W_O - self.d_W_O_formula).max()))


def losses_for(model) -> tuple[str, ...]:
    """The losses this model offers: the next-token loss needs a causal LM head."""
    if model.info.causal and model.info.has_lm_head and not model.info.encoder_decoder:
        return LOSSES
    return ("output_norm",)


def head_gradients(model, text: str, layer: int, head: int, loss: str = "next_token"
                   ) -> HeadGradients:
    """The gradient of `loss` with respect to head `head` of layer `layer`'s W_Q and W_O
    on `text`, by autograd and by the formulas X^T dL/dQ and C^T dL/dY."""
    if loss not in losses_for(model):
        raise InputError(f"this model offers the loss {' or '.join(losses_for(model))}, "
                         f"not {loss!r}")
    info, net = model.info, model.network
    if info.encoder_decoder or not getattr(net.blocks[0].attn, "fused_qkv", False):
        raise InputError("the gradient step reads one fused W_QKV: GPT-2, BERT and the Llama "
                         "family have it (an encoder-decoder's heads do not)")
    if not (0 <= int(layer) < info.n_layer and 0 <= int(head) < info.n_head):
        raise InputError(f"layer must be 0..{info.n_layer - 1} and head 0..{info.n_head - 1}")
    ids = model.network_inputs(model.encode(text))[0]
    if ids.shape[1] < 2:
        raise InputError("the text needs at least two tokens")
    attn = net.blocks[layer].attn
    dk = info.d_head
    rows = slice(head * dk, (head + 1) * dk)  # the head's query rows of the fused W_QKV
    hooks = Interventions(capture=[("attn_in", layer), ("q", layer), ("z", layer),
                                   ("attn_out", layer)], keep_graph=True)
    weights = [attn.qkv.weight, attn.out.weight]
    with torch.enable_grad():
        for w in weights:
            w.requires_grad_(True)
        try:
            final = run_with_hooks(net, ids, hooks)
            got = hooks.captured
            y = got[("attn_out", layer)]
            if loss == "next_token":
                logits = net.lm_logits(net.finish(final))[0, :-1]
                value = F.cross_entropy(logits.float(), ids[0, 1:])
            else:
                value = 0.5 * (y ** 2).sum()
            d_qkv, d_out, d_q, d_y = torch.autograd.grad(
                value, [attn.qkv.weight, attn.out.weight, got[("q", layer)], y])
        finally:
            for w in weights:
                w.requires_grad_(False)
    with torch.no_grad():  # what the heads read: the normalized stream in a pre-norm model
        x = net.blocks[layer].attention_input(got[("attn_in", layer)])[0]  # [T, d]
    z = got[("z", layer)][0, head].detach()  # [T, d_k]
    d_q_head = d_q[0, head]  # [T, d_k]
    return HeadGradients(
        loss_name=loss, loss=float(value.detach()),
        d_W_Q=to_numpy(d_qkv[rows].T), d_W_O=to_numpy(d_out[:, rows].T),
        d_W_Q_formula=to_numpy(x.T @ d_q_head), d_W_O_formula=to_numpy(z.T @ d_y[0]),
        d_Q=to_numpy(d_q_head), d_Y=to_numpy(d_y[0]))
