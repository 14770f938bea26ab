"""Head ablation in an encoder-decoder (docs/analyses.md, "Pruning impact"): how much the
teacher-forced loss of the target rises when one head is switched off, for every head of
the encoder's self-attention, the decoder's self-attention and the decoder's
cross-attention.

A head is switched off as everywhere in mha-viz: its output (the context, before W_O) is
multiplied by 0 (Michel et al. 2019). Every ablation runs in one batch: the source and the
target repeated once per head plus once unchanged, each copy with its own gates.
"""

from __future__ import annotations

import numpy as np
import torch

from ..seq2seq import KINDS

# At most this many copies of the pair per forward (t5-small: 145 ablations in 2 batches).
ABLATION_BATCH = 96


def ablation_effects_seq2seq(model, source: str, target: str | None = None
                             ) -> dict[str, np.ndarray]:
    """{kind: [L, H]}: the target's loss (nats/token) with that head switched off minus
    the loss of the whole model, for "encoder", "decoder" and "cross"; plus "base", the
    whole model's loss. Without a target, the model's own greedy output is the target."""
    forced = model.teacher_forcing(source, target)
    net = model.network
    encoder, decoder = net.config.encoder, net.config.decoder
    shapes = {"encoder": (encoder.n_layer, encoder.n_head),
              "decoder": (decoder.n_layer, decoder.n_head),
              "cross": (decoder.n_layer, decoder.n_head)}
    cases = [(None, 0, 0)] + [(kind, layer, head) for kind in KINDS
                              for layer in range(shapes[kind][0])
                              for head in range(shapes[kind][1])]
    labels = torch.tensor(forced.labels)
    losses = []
    with torch.inference_mode():
        for start in range(0, len(cases), ABLATION_BATCH):
            chunk = cases[start:start + ABLATION_BATCH]
            gates = {kind: torch.ones(len(chunk), *shapes[kind]) for kind in KINDS}
            for row, (kind, layer, head) in enumerate(chunk):
                if kind is not None:
                    gates[kind][row, layer, head] = 0.0
            batch = len(chunk)
            states, _ = net.encode(torch.tensor([forced.source_ids] * batch),
                                   head_mask=gates["encoder"])
            last, _, _ = net.decode(torch.tensor([forced.decoder_ids] * batch), states,
                                    head_mask=gates["decoder"], cross_head_mask=gates["cross"])
            logits = net.decoder.lm_logits(last)  # [B, T, vocab]
            per_token = torch.nn.functional.cross_entropy(
                logits.transpose(1, 2), labels.expand(batch, -1), reduction="none")
            losses.extend(per_token.mean(dim=1).tolist())
    base = losses[0]
    out = {kind: np.zeros(shapes[kind]) for kind in KINDS}
    for (kind, layer, head), loss in zip(cases[1:], losses[1:]):
        out[kind][layer, head] = loss - base
    out["base"] = np.asarray(base)
    return out
