"""transformers' own Llama (eager attention) with heads restricted to a sink and a window,
written here from the definition (StreamingLLM): restricted head h's query i reads keys
j < sink and i - window < j <= i only. The mask is a custom 4-D additive attention mask, one
per layer (a forward pre-hook on each layer's self-attention hands it in), so some heads of
some layers can be restricted and the rest read the whole causal context."""

import numpy as np
import torch
import torch.nn.functional as F


def restricted_mask(n_tokens: int, sink: int, window: int, heads_row) -> torch.Tensor:
    """[1, H, T, T] additive mask: 0 where head h's query i reads key j, the most negative
    float32 elsewhere (later keys for every head; far keys for the restricted heads)."""
    i = np.arange(n_tokens)[:, None]
    j = np.arange(n_tokens)[None, :]
    causal = j <= i
    near = (j < sink) | (j > i - window)
    heads_row = np.asarray(heads_row, dtype=bool)
    seen = np.where(heads_row[:, None, None], causal & near, causal)  # [H, T, T]
    mask = np.where(seen, 0.0, np.finfo(np.float32).min).astype(np.float32)
    return torch.from_numpy(mask)[None]


def run_restricted(ref, ids, sink: int, window: int, heads, output_attentions=False):
    """transformers' output on ids with heads [L, H] (bools) restricted: one 4-D mask per
    layer, handed to each self-attention module by a pre-hook."""
    heads = np.asarray(heads, dtype=bool)
    n = len(ids)
    masks = [restricted_mask(n, sink, window, heads[layer]) for layer in range(len(heads))]
    handles = []
    for layer, block in enumerate(ref.model.layers):
        def hand_in(module, args, kwargs, mask=masks[layer]):
            kwargs["attention_mask"] = mask
            return args, kwargs
        handles.append(block.self_attn.register_forward_pre_hook(hand_in, with_kwargs=True))
    try:
        with torch.no_grad():
            return ref(torch.tensor([list(ids)]), output_attentions=output_attentions)
    finally:
        for handle in handles:
            handle.remove()


def next_token_loss(logits, ids) -> float:
    """The mean next-token cross-entropy of logits [1, T, V] on ids (nats)."""
    return float(F.cross_entropy(logits[0, :-1].float(), torch.tensor(list(ids[1:]))))


def restricted_loss(ref, ids, sink: int, window: int, heads) -> float:
    return next_token_loss(run_restricted(ref, ids, sink, window, heads).logits, ids)
