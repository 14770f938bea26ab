"""Heads compared by what they write (docs/analyses.md, "Head similarity"): each head's output
through its slice of W_O, the vector it adds to its stack's residual stream at each
position, and the cosine similarity of two heads' outputs averaged over the positions.

Attention maps compare heads only within one kind: a decoder self-attention row is a
distribution over the target and a cross-attention row one over the source, so no divergence
between them is defined. Both kinds write into the decoder's stream at the same target
positions, so their outputs can be compared: this is how heads of different kinds are set
side by side.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.errors import InputError
from ..engine.interventions import Interventions
from .heads import head_name

SHORT_KIND = {"encoder": "enc", "decoder": "self", "cross": "cross"}


def head_outputs_seq2seq(model, source: str, target: str | None = None
                         ) -> dict[str, np.ndarray]:
    """{"encoder": [L_enc, H, S, d], "decoder": [L_dec, H, T, d], "cross": [L_dec, H, T, d]}:
    what each head adds to its stack's residual stream at each position (its z through its
    slice of W_O, without the projection's bias), teacher-forced on the target (the model's
    own greedy output when target is None)."""
    forced = model.teacher_forcing(source, target)
    net = model.network
    encoder_hooks = Interventions(capture=("result",))
    decoder_hooks = Interventions(capture=("result", "cross_result"))
    with torch.inference_mode():
        states, _ = net.encode(torch.tensor([forced.source_ids], device=net.device),
                               hooks=encoder_hooks)
        net.decode(torch.tensor([forced.decoder_ids], device=net.device), states,
                   hooks=decoder_hooks)

    def stacked(hooks, point: str, n_layer: int) -> np.ndarray:
        # captured [1, T, H, d] per layer -> [L, H, T, d]
        return torch.stack([hooks.captured[(point, layer)][0].transpose(0, 1)
                            for layer in range(n_layer)]).double().cpu().numpy()

    config = net.config
    return {"encoder": stacked(encoder_hooks, "result", config.encoder.n_layer),
            "decoder": stacked(decoder_hooks, "result", config.decoder.n_layer),
            "cross": stacked(decoder_hooks, "cross_result", config.decoder.n_layer)}


def output_similarity(outputs) -> np.ndarray:
    """[N, N]: for heads whose outputs are [N, T, d] (the same T positions of one stream),
    the cosine similarity of two heads' outputs at each position, averaged over positions
    (each position counts once, whatever its norm). A zero output (a head switched off, or
    one that writes nothing there) has similarity 0 with every head at that position."""
    x = np.asarray(outputs, dtype=np.float64)
    if x.ndim != 3 or x.shape[0] == 0 or x.shape[1] == 0:
        raise InputError(f"outputs must be [heads, positions, width], got shape {x.shape}")
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    unit = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    flat = unit.transpose(1, 0, 2)  # [T, N, d]
    return np.einsum("tad,tbd->ab", flat, flat) / x.shape[1]


def outputs_of_kinds(outputs: dict[str, np.ndarray], kinds) -> tuple[np.ndarray, list[str]]:
    """The heads of several kinds that write into one stream, as [N, T, d] (kinds in the
    order given, each in layer order), with names such as "cross L1.H2"."""
    kinds = list(kinds)
    lengths = {outputs[k].shape[2] for k in kinds}
    if len(lengths) != 1:
        raise InputError(f"{' and '.join(kinds)} heads write at different positions: only "
                         f"heads of one stream can be compared")
    stacked, names = [], []
    for kind in kinds:
        n_layer, n_head = outputs[kind].shape[:2]
        stacked.append(outputs[kind].reshape(n_layer * n_head, *outputs[kind].shape[2:]))
        names += [f"{SHORT_KIND[kind]} {head_name(l, h)}" for l in range(n_layer)
                  for h in range(n_head)]
    return np.concatenate(stacked), names


def closest_across(similarity: np.ndarray, names: list[str], split: int, k: int = 10
                   ) -> list[tuple[str, str, float]]:
    """The k most similar pairs (a, b) with a among the first `split` heads and b among the
    rest (one kind against another), most similar first."""
    block = np.asarray(similarity)[:split, split:]
    order = np.argsort(-block, axis=None, kind="stable")[:k]
    rows, cols = np.unravel_index(order, block.shape)
    return [(names[r], names[split + c], float(block[r, c])) for r, c in zip(rows, cols)]
