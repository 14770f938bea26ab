"""A head's pre-softmax score split into query-side feature x key-side feature terms of a
residual dictionary at the layer's input (Kamath et al. 2025, "Tracing Attention Computation
Through Feature Interactions"; docs/analyses.md, "Features at the head").

The residual stream entering the layer, x_i, is written by the dictionary as
    x_i = sum_f a_f(x_i) d_f + b_dec' + e_i
(d_f the decoder row, a_f the activation, b_dec' the decoder bias, each through the
dictionary's frame undone with x_i's own numbers; e_i the error: what the dictionary
leaves out). These parts are the sources of score attribution (why/scores.py): a StreamParts
whose parts are "f<index>" (each feature active at some position held), "error", "b_dec" and
"bias" (the pre-attention norm's offset and the projections' biases), through the same
frozen norm, W_Q, W_K, QK-norm and RoPE (why.scores.projected). The terms sum exactly to the
engine's score; the error's rows and columns say how much of it the features do not
explain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ...core.errors import InputError
from ...engine.interventions import Interventions, run_with_hooks
from ..why.scores import ScoreAttribution, engine_scores, hidden_of, projected
from ..why.stream import AT_POINTS, WORK, StreamParts, check_head, encoded_ids, frozen_norm, stack_of
from .activations import check_model_site
from .heads import check_position

ERROR, B_DEC, BIAS = "error", "b_dec", "bias"


def feature_name(index: int) -> str:
    """Feature 12 as a source: "f12"."""
    return f"f{int(index)}"


def feature_index(name: str) -> int | None:
    """A source's feature: "f12" -> 12; None for "error", "b_dec" and "bias"."""
    text = str(name)
    return int(text[1:]) if text.startswith("f") and text[1:].isdigit() else None


@dataclass
class FeaturePairs:
    """One score as a sum of feature pairs (FeatureScoreAttribution.pairs): `pairs`, the k
    (query feature, key feature, term) of largest |term|, strongest first; `parts`, every
    term that holds one of the dictionary's other parts, on either side, by the first of
    them it holds in the order "error", "b_dec", "bias" (so that no term counts twice);
    `others`, the `n_others` feature pairs not named. Exactly, up to float rounding:
    named + sum(parts) + others == total, the score before any soft-cap."""
    pairs: list[tuple[str, str, float]]
    named: float
    parts: dict[str, float]
    others: float
    n_others: int
    total: float


@dataclass
class FeatureScoreAttribution(ScoreAttribution):
    """ScoreAttribution whose sources are a dictionary's features ("f<index>"), its decoder
    bias ("b_dec"), its error ("error") and the model's biases ("bias"), these three last on
    both sides. The query side holds the features active at the query; the key side those
    active at any key held. activations: {position: {feature: activation}} at the query
    and the keys held."""
    activations: dict = field(default_factory=dict)

    def pairs(self, key: int, k: int = 8) -> FeaturePairs:
        """The score at key as named feature pairs, the error, decoder-bias and bias terms,
        and the other pairs (see FeaturePairs)."""
        matrix = self._matrix(key, False)
        left = np.ones(matrix.shape, dtype=bool)  # the terms not yet counted
        parts = {}
        for part in (ERROR, B_DEC, BIAS):
            holds = np.zeros(matrix.shape, dtype=bool)
            holds[[i for i, name in enumerate(self.query_sources) if name == part], :] = True
            holds[:, [j for j, name in enumerate(self.key_sources) if name == part]] = True
            parts[part] = float(matrix[holds & left].sum())
            left &= ~holds
        flat = np.flatnonzero(left)
        order = flat[np.argsort(-np.abs(matrix.ravel()[flat]), kind="stable")[:int(k)]]
        named = [(self.query_sources[a], self.key_sources[b], float(matrix[a, b]))
                 for a, b in zip(*np.unravel_index(order, matrix.shape))]
        total = float(matrix.sum())
        named_sum = float(sum(term for _, _, term in named))
        return FeaturePairs(named, named_sum, parts, total - named_sum - sum(parts.values()),
                            len(flat) - len(order), total)

    def activation(self, position: int, name: str) -> float:
        """The activation of feature `name` ("f12") at a position held (0.0 where it is
        inactive, or for "error", "b_dec", "bias")."""
        feature = feature_index(name)
        if feature is None:
            return 0.0
        return float(self.activations.get(int(position), {}).get(feature, 0.0))


def check_residual(sae, layer: int) -> None:
    """The dictionary must read the stream entering `layer` (resid_pre of it, or resid_post
    of the layer before)."""
    reads = ((sae.site == "resid_pre" and sae.layer == layer)
             or (sae.site == "resid_post" and sae.layer == layer - 1))
    if not reads:
        raise InputError(f"the dictionary reads {sae.hook_name}; a score of layer {layer} "
                         f"splits into the features of the stream entering it "
                         f"(blocks.{layer}.hook_resid_pre)")


def dictionary_stream(model, sae, ids: list[int], layer: int, positions: np.ndarray):
    """(StreamParts of the layer's attention input split into the dictionary's parts at
    every position, the activations [T, d_sae] float64): one forward up to the layer."""
    from ...core.budget import ONE_INPUT_SHARE, budget_bytes, size_text

    stack = stack_of(model)
    n = len(ids)
    hooks = Interventions(capture=[(p, layer) for p in AT_POINTS])
    with torch.inference_mode():
        run_with_hooks(stack, torch.tensor([ids], device=stack.device), hooks, stop=layer + 1)
    got = {name: hooks.captured[(name, layer)][0] for name in AT_POINTS}
    resid = got["resid_pre"].to(WORK)  # [T, d]
    device = resid.device  # the model's; the dictionary encodes where it is (the CPU)
    acts = sae.encode(got["resid_pre"].float()).to(device, WORK)  # [T, d_sae], as it does
    active = torch.nonzero(acts[positions].abs().sum(0)).flatten()  # features held
    need = 8 * (len(active) + 3) * n * resid.shape[1]
    if need > ONE_INPUT_SHARE * budget_bytes():
        raise InputError(f"{len(active):,} features over {n:,} tokens would hold "
                         f"{size_text(need)}, more than this server keeps for one input: "
                         f"give fewer keys (keys=) or a shorter text")
    frame = sae.frame(resid)
    rows = sae.decoder_rows(WORK)[active.cpu()].to(device)  # [n_f, d]
    parts = torch.empty(len(active) + 3, n, resid.shape[1], dtype=WORK, device=resid.device)
    parts[:len(active)] = (acts[:, active].T[:, :, None] * rows[:, None, :]
                           * frame.scale_out[None])
    parts[-3] = sae.b_dec.to(device, WORK) * frame.scale_out + frame.shift_out  # b_dec'
    parts[-2] = resid - parts[:-2].sum(0)  # the error: x minus the reconstruction
    parts[-1] = 0.0
    names = [feature_name(f) for f in active.tolist()] + [B_DEC, ERROR, BIAS]
    block = stack.blocks[layer]
    if block.pre_ln:
        frozen_norm(block.ln_1, parts[:-1], parts[-1], resid)
    x = block.attention_input(got["resid_pre"][None])[0].to(WORK)
    relative = stack.position_bias(n)
    stream = StreamParts(names, parts, x, layer, stack, got,
                         None if relative is None else relative[0].to(WORK))
    return stream, acts


def feature_score_attribution(model, text_or_ids, layer: int, head: int, query: int,
                              sae=None, keys=None) -> FeatureScoreAttribution:
    """Head (layer, head)'s pre-softmax scores from `query` to `keys` (None: every key
    position; masked keys are included and flagged) split into query-side x key-side parts
    of a residual dictionary `sae` at the layer's input (see the module docstring)."""
    if sae is None:
        raise InputError("give sae= a residual dictionary of the stream entering the layer")
    layer, head = check_head(model, layer, head)
    check_residual(sae, layer)
    check_model_site(model, sae.site, sae.layer)
    sae.check_model(model)
    ids, _, tokens = encoded_ids(model, text_or_ids)
    n = len(ids)
    query = check_position(query, n, "query")
    held = (np.arange(n) if keys is None else np.array(
        [check_position(k, n, "a key") for k in np.atleast_1d(keys)], dtype=np.int64))
    stream, acts = dictionary_stream(model, sae, ids, layer,
                                     np.unique(np.append(held, query)))
    attn = stream.block.attn
    rows = torch.tensor([query], device="cpu")
    with torch.inference_mode():
        q = projected(stream, head, "q", rows)[0][:, 0]  # [n_parts, d_k]
        k = projected(stream, head, "k")[0][:, held]  # [n_parts, K, d_k]
        always = torch.arange(len(stream.names), device="cpu") >= len(stream.names) - 3  # b_dec..
        present_q = torch.nonzero(q.abs().sum(-1).cpu().gt(0) | always).flatten()
        present_k = torch.nonzero(k.abs().sum((-1, -2)).cpu().gt(0) | always).flatten()
        terms = attn.scale * torch.einsum("sd,tjd->stj", q[present_q], k[present_k])
        scores = engine_scores(stream, head, rows)[0].cpu().numpy()
    masked = hidden_of(stream, rows)[0].numpy()
    names = stream.names
    positions = np.unique(np.append(held, query))
    return FeatureScoreAttribution(
        layer=layer, head=head, query=query, keys=held, terms=terms.cpu().numpy(),
        query_sources=[names[i] for i in present_q.tolist()],
        key_sources=[names[i] for i in present_k.tolist()], scores=scores[held],
        masked=masked[held], softcap=float(attn.softcap), scale=float(attn.scale),
        kv_head=int(attn.kv_heads[head]), tokens=tokens,
        activations={int(p): {int(f): float(acts[p, f]) for f in
                              torch.nonzero(acts[p]).flatten().tolist()} for p in positions})
