"""Head importance in an encoder-decoder (docs/analyses.md, "Pruning impact"), over every head
of the encoder's self-attention, the decoder's self-attention and the decoder's
cross-attention: the exact ablation effect of each head, its gradient importance, and the
pruning curve that removes heads of all three kinds in one ranking.

A head is switched off as everywhere in mha-viz: its output (the context, before W_O) is
multiplied by its gate xi, 0 to remove it (Michel et al. 2019). The score is the target's
teacher-forced loss (nats/token), or a target metric at one target position: the logit
difference of two tokens, a token's logit, or its log-probability.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from ..core.errors import InputError
from ..models.seq2seq import KINDS
from .pruning import PruningCurve, check_curve, curve_steps

# At most this many copies of the pair per forward (t5-small: 145 ablations in 2 batches).
ABLATION_BATCH = 96
METRIC_KINDS = ("logit_diff", "logit", "logprob")


def head_shapes(model) -> dict[str, tuple[int, int]]:
    """{kind: (layers, heads)} of an encoder-decoder's three kinds of attention."""
    encoder, decoder = model.network.config.encoder, model.network.config.decoder
    return {"encoder": (encoder.n_layer, encoder.n_head),
            "decoder": (decoder.n_layer, decoder.n_head),
            "cross": (decoder.n_layer, decoder.n_head)}


def total_heads(model) -> int:
    """Every head of an encoder-decoder: encoder, decoder and cross-attention."""
    return sum(l * h for l, h in head_shapes(model).values())


@dataclass(frozen=True)
class _PairScore:
    """The score of one source/target pair under any gates: the teacher-forced loss, or a
    target metric at one target position (resolved to token ids)."""
    source_ids: list[int]
    decoder_ids: list[int]
    labels: list[int]
    position: int | None = None  # None: the loss over every target token
    token: int | None = None
    contrast: int | None = None
    kind: str = "loss"
    description: str = "teacher-forced loss of the target (nats/token)"

    def __call__(self, net, gates: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B] scores for a batch of gates {kind: [B, L, H]}."""
        batch = gates["encoder"].shape[0]
        return self.run(net, [self.source_ids] * batch, gates=gates)

    def run(self, net, sources: list, gates: dict | None = None, encoder_hooks=None,
            decoder_hooks=None) -> torch.Tensor:
        """[B] scores of the target read after each of B sources (token ids, or an image
        encoder's strips), with the gates {kind: [B, L, H]} and hooks given."""
        gates = gates or {}
        states, _ = net.encode(torch.tensor(sources, device=net.device),
                               head_mask=gates.get("encoder"), hooks=encoder_hooks)
        last, _, _ = net.decode(torch.tensor([self.decoder_ids] * len(sources),
                                             device=net.device), states,
                                head_mask=gates.get("decoder"),
                                cross_head_mask=gates.get("cross"), hooks=decoder_hooks)
        return self.of_hidden(net, last)

    def of_hidden(self, net, last: torch.Tensor) -> torch.Tensor:
        """[B] scores from the decoder's last hidden states [B, T, d]."""
        batch = last.shape[0]
        if self.position is None:
            logits = net.decoder.lm_logits(last).float()  # [B, T, vocab]
            per_token = F.cross_entropy(logits.transpose(1, 2),
                                        torch.tensor(self.labels, device=logits.device)
                                        .expand(batch, -1),
                                        reduction="none")
            return per_token.mean(dim=1)
        logits = net.decoder.lm_logits(last[:, self.position]).float()  # [B, vocab]
        if self.kind == "logprob":
            return torch.log_softmax(logits, dim=-1)[:, self.token]
        value = logits[:, self.token]
        return value if self.contrast is None else value - logits[:, self.contrast]

    @property
    def higher_is_better(self) -> bool:
        return self.kind != "loss"


def pair_score(model, source: str, target: str | None = None, metric=None) -> _PairScore:
    """What the analyses below measure. metric None: the target's teacher-forced loss; else
    an object with position (a target position, negative counts from the end), target (a
    token id or a one-token string), contrast (the same, or None) and kind ("logit_diff",
    "logit" or "logprob"), such as model.TargetMetric. Without a target the model's own
    greedy output is the target."""
    forced = model.teacher_forcing(source, target)
    if not forced.labels:
        raise InputError("the target has no tokens to score")
    base = dict(source_ids=forced.source_ids, decoder_ids=forced.decoder_ids,
                labels=forced.labels)
    if metric is None:
        return _PairScore(**base)
    n = len(forced.labels)
    position = int(metric.position) + (n if int(metric.position) < 0 else 0)
    if not 0 <= position < n:
        raise InputError(f"position {metric.position} is outside the target's {n} tokens")
    kind = getattr(metric, "kind", "logit_diff")
    if kind not in METRIC_KINDS:
        raise InputError(f"the metric's kind is one of {', '.join(METRIC_KINDS)}, got {kind!r}")
    token = model.token_id(metric.target)
    contrast = None if kind != "logit_diff" or metric.contrast is None \
        else model.token_id(metric.contrast)
    shown = model.display_tokens([token] + ([] if contrast is None else [contrast]))
    what = {"logit": f"logit('{shown[0]}')", "logprob": f"log p('{shown[0]}')",
            "logit_diff": f"logit('{shown[0]}')" + (
                "" if contrast is None else f" − logit('{shown[1]}')")}[kind]
    return _PairScore(**base, position=position, token=token, contrast=contrast, kind=kind,
                      description=f"{what} at target position {position}")


def _check_gates(model, head_masks) -> dict[str, torch.Tensor]:
    """{kind: [L, H]} float gates, all ones where not given."""
    shapes = head_shapes(model)
    device = model.network.device
    gates = {kind: torch.ones(shape, device=device) for kind, shape in shapes.items()}
    for kind, mask in (head_masks or {}).items():
        if kind not in shapes:
            raise InputError(f"the kind of attention is one of {', '.join(KINDS)}, got {kind!r}")
        mask = torch.as_tensor(np.asarray(mask, dtype=np.float32), device=device)
        if tuple(mask.shape) != shapes[kind]:
            raise InputError(f"the {kind} head mask must have shape {shapes[kind]}, got "
                             f"{tuple(mask.shape)}")
        gates[kind] = mask.clone()
    return gates


def _score_of(model, score: _PairScore, gates: dict[str, torch.Tensor]) -> float:
    with torch.inference_mode():
        return float(score(model.network, {k: g[None] for k, g in gates.items()})[0])


def ablation_effects_seq2seq(model, source: str, target: str | None = None, metric=None,
                             head_masks=None) -> dict[str, np.ndarray]:
    """{kind: [L, H]}: the score with that head switched off minus the score with the gates
    of head_masks (every head on by default), for "encoder", "decoder" and "cross"; plus
    "base", that unablated score. The score is the target's loss unless a metric is given
    (see pair_score). Heads already switched off by head_masks get 0. Every ablation runs in
    batches of copies of the pair, each copy with its own gates."""
    score = pair_score(model, source, target, metric)
    base_gates = _check_gates(model, head_masks)
    shapes = head_shapes(model)
    cases = [(None, 0, 0)] + [(kind, layer, head) for kind in KINDS
                              for layer in range(shapes[kind][0])
                              for head in range(shapes[kind][1])
                              if base_gates[kind][layer, head] != 0]
    values = []
    with torch.inference_mode():
        for start in range(0, len(cases), ABLATION_BATCH):
            chunk = cases[start:start + ABLATION_BATCH]
            gates = {kind: base_gates[kind].expand(len(chunk), *shapes[kind]).clone()
                     for kind in KINDS}
            for row, (kind, layer, head) in enumerate(chunk):
                if kind is not None:
                    gates[kind][row, layer, head] = 0.0
            values.extend(score(model.network, gates).tolist())
    base = values[0]
    out = {kind: np.zeros(shapes[kind]) for kind in KINDS}
    for (kind, layer, head), value in zip(cases[1:], values[1:]):
        out[kind][layer, head] = value - base
    out["base"] = np.asarray(base)
    return out


def gradient_importance_seq2seq(model, source: str, target: str | None = None, metric=None,
                                head_masks=None) -> dict[str, np.ndarray]:
    """{kind: [L, H]}: |d score / d xi| for every head's gate xi at the gates of head_masks
    (every head on by default), from one backward pass (Michel, Levy & Neubig 2019); plus
    "base", the score there."""
    score = pair_score(model, source, target, metric)
    gates = {kind: g.requires_grad_(True) for kind, g in _check_gates(model, head_masks).items()}
    value = score(model.network, {kind: g[None] for kind, g in gates.items()})[0]
    grads = torch.autograd.grad(value, [gates[kind] for kind in KINDS])
    out = {kind: grad.abs().cpu().numpy().astype(np.float64) for kind, grad in zip(KINDS, grads)}
    out["base"] = np.asarray(float(value.detach()))
    return out


def pruning_curve_seq2seq(model, source: str, target: str | None = None, step: float = 0.1,
                          by: str = "gradient", metric=None, progress=None) -> PruningCurve:
    """Remove the least important remaining heads of all three kinds together, step * (every
    head) at a time, re-estimating importance after each step (Michel et al.'s iterative
    pruning), and record the score. by="gradient": the smallest |d score / d xi| first;
    by="ablation": the smallest exact harm first (a loss's rise, a metric's fall), so heads
    whose removal helps go first. removed[i] lists (kind, layer, head) and masks[i] is
    {kind: [L, H]} after step i; progress(done, total) after each step."""
    check_curve(by, step)
    score = pair_score(model, source, target, metric)
    shapes = head_shapes(model)
    total = total_heads(model)
    per_step, n_steps = curve_steps(total, step)
    masks = {kind: np.ones(shape, dtype=np.float32) for kind, shape in shapes.items()}
    harm = -1.0 if score.higher_is_better else 1.0

    def measured() -> float:
        return _score_of(model, score, {k: torch.as_tensor(m, device=model.network.device)
                                        for k, m in masks.items()})

    fractions, scores = [0.0], [measured()]
    removed, kept_masks = [[]], [{k: m.copy() for k, m in masks.items()}]
    while any(m.sum() > 0 for m in masks.values()):
        if by == "gradient":
            importance = gradient_importance_seq2seq(model, source, target, metric, masks)
        else:
            effects = ablation_effects_seq2seq(model, source, target, metric, masks)
            importance = {kind: harm * effects[kind] for kind in KINDS}
        remaining = [(kind, l, h) for kind in KINDS for l in range(shapes[kind][0])
                     for h in range(shapes[kind][1]) if masks[kind][l, h]]
        remaining.sort(key=lambda klh: importance[klh[0]][klh[1], klh[2]])
        chosen = remaining[:per_step]
        for kind, l, h in chosen:
            masks[kind][l, h] = 0
        fractions.append(1 - sum(m.sum() for m in masks.values()) / total)
        scores.append(measured())
        removed.append(chosen)
        kept_masks.append({k: m.copy() for k, m in masks.items()})
        if progress is not None:
            progress(len(fractions) - 1, n_steps)
    return PruningCurve(np.array(fractions), np.array(scores), removed, by, kept_masks)


def kept_fractions(curve: PruningCurve, model) -> dict[str, np.ndarray]:
    """{kind: [steps + 1]}: the fraction of that kind's heads still on after each step of a
    pruning_curve_seq2seq (Michel et al. found a translation model's cross-attention the
    most sensitive to pruning: its heads are the last to go)."""
    shapes = head_shapes(model)
    return {kind: np.array([float(masks[kind].sum()) / (shapes[kind][0] * shapes[kind][1])
                            for masks in curve.masks]) for kind in KINDS}


def importance_agreement(gradient, effects) -> float | None:
    """Pearson r between gradient importance and the size of the exact ablation effect over
    every head: [L, H] arrays, or {kind: [L, H]} dicts (every kind's heads together; other
    keys such as "base" are ignored). None when either is constant."""
    if isinstance(gradient, dict):
        gradient = np.concatenate([np.ravel(gradient[k]) for k in KINDS])
        effects = np.concatenate([np.ravel(effects[k]) for k in KINDS])
    a, b = np.ravel(gradient).astype(float), np.abs(np.ravel(effects)).astype(float)
    if a.std() == 0 or b.std() == 0:
        return None
    r = float(np.corrcoef(a, b)[0, 1])
    return r if np.isfinite(r) else None
