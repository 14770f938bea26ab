"""Head importance: exact ablation effects, gradient importance, and the pruning curve.

docs/analyses.md, "Pruning impact". The score is model.score (model.info.score_name says
which: GPT-2's next-token loss, BERT's masked-LM loss, or the embedding shift of a
sentence-embedding BERT).
A head mask xi [L, H] gates each head's output before the output projection; 1 keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
from torch.nn import functional as F

from ..core.errors import InputError
from .heads import head_name, normalize_layers, rank_heads

ABLATION_MODES = ("zero", "mean")  # a head switched off: its output removed, or its mean
CURVE_RANKINGS = ("gradient", "ablation")  # what a pruning curve ranks heads by


def _texts(text) -> list[str]:
    texts = [text] if isinstance(text, str) else list(text)
    if not texts:
        raise InputError("no texts given")
    return texts


def _base_mask(model, head_mask) -> torch.Tensor:
    if head_mask is None:
        return torch.ones(model.info.n_layer, model.info.n_head, device=model.network.device)
    return model.check_head_mask(head_mask).detach().clone()


def _one_hot_masks(base: torch.Tensor, heads: list[tuple[int, int]], value: float = 0.0):
    """[len(heads), L, H]: base with one head set to value in each row."""
    masks = base.expand(len(heads), *base.shape).clone()
    for row, (layer, head) in enumerate(heads):
        masks[row, layer, head] = value
    return masks


def _chunks(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _default_batch(model, n_tokens: int) -> int:
    # Keep one chunk's attention scores around 256 MB: [B, H, T, T] float32.
    per_item = model.info.n_head * n_tokens * n_tokens * 4
    return int(max(1, min(model.info.n_head, (256 << 20) // max(per_item, 1))))


@torch.no_grad()
def _ablation_one(model, text, mode, base, batch_size, progress=None, metric=None):
    net = model.network
    inputs = model.score_inputs(text, metric=metric)
    n_layer, n_head = model.info.n_layer, model.info.n_head
    ids, types = inputs.input_ids, inputs.token_type_ids
    bias = net.attention_bias(ids.shape[1])
    layer_inputs = []
    h, _ = net.run_layers(net.embed(ids, types), 0, None, bias, head_mask=base, ablation=mode,
                          layer_inputs=layer_inputs)
    baseline = float(model.score_from_last_hidden(net.finish(h), inputs)[0])
    effects = np.zeros((n_layer, n_head))
    batch = batch_size or _default_batch(model, ids.shape[1])
    for layer in range(n_layer):
        # Ablating a head of this layer changes nothing below it: start from the hidden state
        # entering the layer, and run this layer's heads as one batch.
        heads = [(layer, head) for head in range(n_head) if base[layer, head] != 0]
        for chunk in _chunks(heads, batch):
            masks = _one_hot_masks(base, chunk)
            start = layer_inputs[layer].expand(len(chunk), -1, -1)
            out, _ = net.run_layers(start, layer, None, bias, head_mask=masks, ablation=mode)
            scores = model.score_from_last_hidden(net.finish(out), inputs)
            for (l, hd), score in zip(chunk, scores.tolist()):
                effects[l, hd] = score - baseline
        if progress is not None:
            progress(layer + 1, n_layer)
    return effects, baseline


def ablation_effects(model, text, mode: str = "zero", head_mask=None,
                     batch_size: int | None = None, progress=None, metric=None) -> np.ndarray:
    """[L, H]: score(with head (l, h) removed) - score(), exactly (one forward per head).

    mode="zero" removes the head's output; mode="mean" replaces it by its mean over positions.
    head_mask: heads already removed (the sweep is then relative to that mask; heads already
    at 0 get effect 0). A list of texts gives the mean over texts. Hidden states below each
    layer are computed once and reused, and a layer's ablations run as one batch.
    progress(done, total), if given, is called after each layer of each text.
    metric: a model.TargetMetric to measure instead of the model's score (then a head that
    helps the target has a negative effect).
    """
    base = _base_mask(model, head_mask)
    texts = _texts(text)
    total = len(texts) * model.info.n_layer
    per_text = []
    for index, one in enumerate(texts):
        report = None if progress is None else (
            lambda done, _total, index=index: progress(index * model.info.n_layer + done, total))
        per_text.append(_ablation_one(model, one, mode, base, batch_size, report, metric)[0])
    return np.mean(per_text, axis=0)


def _gradient_one(model, text, base, metric=None):
    inputs = model.score_inputs(text, metric=metric)
    gates = base.clone().requires_grad_(True)
    score = model.score_tensor(inputs, gates)
    (grad,) = torch.autograd.grad(score, gates)
    return grad.abs().cpu().numpy()


def embedding_jacobian_norms(model, text, head_mask=None, batch_size: int | None = None,
                             progress=None):
    """[L, H]: || d e / d xi_lh || where e is the normalized mean-pooled last hidden state,
    by forward-mode differentiation: one-hot tangents, a layer's heads as one batch, each
    started from the (reused) hidden state entering that layer, below which the tangent is 0."""
    base = _base_mask(model, head_mask)
    net = model.network
    inputs = model.score_inputs(text)
    n_layer, n_head = model.info.n_layer, model.info.n_head
    ids, types = inputs.input_ids, inputs.token_type_ids
    bias = net.attention_bias(ids.shape[1])
    norms = np.zeros((n_layer, n_head))
    batch = batch_size or _default_batch(model, ids.shape[1])
    with torch.no_grad():
        layer_inputs = []
        net.run_layers(net.embed(ids, types), 0, None, bias, head_mask=base,
                       layer_inputs=layer_inputs)
        with fwAD.dual_level():
            for layer in range(n_layer):
                for chunk in _chunks([(layer, h) for h in range(n_head)], batch):
                    tangent = torch.zeros(len(chunk), n_layer, n_head, device=base.device)
                    for row, (l, h) in enumerate(chunk):
                        tangent[row, l, h] = 1.0
                    gates = fwAD.make_dual(base.expand(len(chunk), -1, -1).clone(), tangent)
                    start = layer_inputs[layer].expand(len(chunk), -1, -1)
                    out, _ = net.run_layers(start, layer, None, bias, head_mask=gates)
                    embedding = F.normalize(net.finish(out).mean(1), dim=-1)
                    jacobian = fwAD.unpack_dual(embedding).tangent  # [chunk, d]
                    for (l, h), value in zip(chunk, jacobian.norm(dim=-1).tolist()):
                        norms[l, h] = value
                    if progress is not None:  # per batch of heads: the bar moves steadily
                        progress(layer * n_head + chunk[-1][1] + 1, n_layer * n_head)
    return norms


def gradient_bytes_per_squared_token(n_layer: int, n_head: int) -> int:
    """What gradient_importance holds per squared token: its backward pass keeps every head's
    attention (up to two [T, T] float32 arrays per head: the weights and what made them).
    benchmarks/held_memory.py measured SmolLM2 (270 heads): 0.64 of this at 2,048 tokens,
    1.03 at 1,024, 1.9 at 512 (1 GB in all: there the activations kept per token count)."""
    return 8 * int(n_layer) * int(n_head)


def second_order_gradient(score_kind: str, metric=None) -> bool:
    """Whether gradient_importance gives the second-order estimate (forward-mode, one pass per
    head) rather than one backward pass: for the embedding shift, whose gradient is exactly 0
    at its minimum with every head on."""
    return metric is None and score_kind == "embedding_shift"


def gradient_importance(model, text, normalize: bool | str = False, head_mask=None,
                        progress=None, metric=None) -> np.ndarray:
    """[L, H] head importance from derivatives of the score with respect to the head gates
    (Michel, Levy, Neubig 2019): I_lh = E_x |d score(x) / d xi_lh| at xi = head_mask (all
    ones by default), one backward pass per text.

    The embedding-shift score (BERT without an MLM head) is at its minimum, 0, when nothing
    is masked, so its gradient there is exactly 0. For that score we return the second-order
    Taylor estimate of the score change when the head is removed instead:
    1 - cos(e(xi - 1_lh), e(xi)) ~= 0.5 || d e / d xi_lh ||^2, with e the normalized
    embedding (computed by forward-mode differentiation; it costs about one forward per head).

    normalize="layer" divides each layer's row by its l2 norm (Michel et al.'s variant).
    progress(done, total), if given, is called as the work advances. metric: a
    model.TargetMetric to differentiate instead of the model's score.
    """
    base = _base_mask(model, head_mask)
    texts = _texts(text)
    per_text = []
    for index, one in enumerate(texts):
        if second_order_gradient(model.info.score_kind, metric):
            n = model.info.n_layer * model.info.n_head
            report = None if progress is None else (
                lambda done, _total, index=index: progress(index * n + done, len(texts) * n))
            per_text.append(0.5 * embedding_jacobian_norms(model, one, base,
                                                           progress=report) ** 2)
        else:
            per_text.append(_gradient_one(model, one, base, metric))
            if progress is not None:
                progress(index + 1, len(texts))
    importance = np.mean(per_text, axis=0)
    if normalize == "layer":
        importance = normalize_layers(importance)
    elif normalize not in (False, None):
        raise InputError(f"normalize must be False or 'layer', got {normalize!r}")
    return importance


@dataclass
class PruningCurve:
    fractions: np.ndarray  # fraction of heads removed after each step (starts at 0)
    scores: np.ndarray  # the score after each step (mean over texts)
    removed: list[list[tuple[int, int]]] = field(default_factory=list)  # heads removed per step
    by: str = "gradient"
    masks: list[np.ndarray] = field(default_factory=list)  # the head mask after each step


def check_curve(by: str, step: float) -> None:
    """A pruning curve's ranking and step, as every curve takes them."""
    if by not in CURVE_RANKINGS:
        raise InputError(f"by must be 'gradient' or 'ablation', got {by!r}")
    if not 0 < step <= 1:
        raise InputError("step must be a fraction in (0, 1]")


def curve_steps(total_heads: int, step: float) -> tuple[int, int]:
    """(heads removed per step, steps) of a pruning curve over total_heads heads: step *
    total_heads rounded, at least one; the last step takes what is left."""
    per_step = max(1, int(round(step * total_heads)))
    return per_step, -(-int(total_heads) // per_step)


def harm_sign(metric=None) -> float:
    """+1 for a loss (it rises when a head that matters goes), -1 for a target metric (it
    falls): harm_sign * effect > 0 means the head mattered."""
    return 1.0 if metric is None else -1.0


def heads_that_matter(effects, metric=None) -> list[tuple[int, int]]:
    """[L, H] ablation effects -> (layer, head) from the most harmful removal down (a loss's
    largest rise, a target metric's largest fall)."""
    return rank_heads(harm_sign(metric) * np.asarray(effects, dtype=np.float64))


def heads_whose_removal_helps(effects, metric=None, top: int = 5) -> list[tuple[int, int]]:
    """Up to ``top`` heads whose removal improves the score (lowers a loss, raises a metric),
    the most helpful removal first."""
    harm = harm_sign(metric)
    return [(l, h) for l, h in heads_that_matter(effects, metric)[::-1]
            if harm * effects[l, h] < 0][:top]


def effects_both_ways(effects, metric=None) -> bool:
    """Whether the ablation effects need a colour scale both ways: always for a target metric
    (it may rise or fall), for a loss when some removal lowers it."""
    return metric is not None or bool((harm_sign(metric) * np.asarray(effects) < 0).any())


def curve_table(curve: PruningCurve, score_column: str, kept: dict | None = None) -> dict:
    """A pruning curve as table columns (for CSV): the fraction removed, the score, the
    fraction of each kind still on (an encoder-decoder's, ``kept``) and the heads removed at
    each step ("L3.H7", or "cross:L3.H7" where a step names the kind)."""
    def name(removed) -> str:
        *kind, layer, head = removed
        return ":".join([*kind, head_name(layer, head)])

    return {"fraction_removed": curve.fractions, score_column: curve.scores,
            **{f"{kind}_heads_on": share for kind, share in (kept or {}).items()},
            "heads_removed_this_step": [" ".join(name(one) for one in step_heads)
                                        for step_heads in curve.removed]}


def _mean_score(model, texts, mask, metric=None) -> float:
    return float(np.mean([model.score(t, head_mask=mask, metric=metric) for t in texts]))


def pruning_curve(model, text, step: float = 0.1, by: str = "gradient",
                  mode: str = "zero", progress=None, metric=None) -> PruningCurve:
    """Remove the least important remaining heads, step * (L*H) at a time, re-estimating
    importance after each step, and record the score: Michel et al.'s iterative pruning.

    by="gradient": gradient_importance at the current mask (least |derivative| first);
    by="ablation": exact ablation_effects at the current mask (smallest score increase first,
    so heads whose removal helps go first). progress(done, total), if given, is called after
    each step. metric: a model.TargetMetric to record instead of the score; by="ablation"
    then removes first the heads whose removal lowers the metric least (or raises it).
    """
    check_curve(by, step)
    texts = _texts(text)
    n_layer, n_head = model.info.n_layer, model.info.n_head
    total = n_layer * n_head
    per_step, n_steps = curve_steps(total, step)
    mask = np.ones((n_layer, n_head), dtype=np.float32)
    fractions, scores = [0.0], [_mean_score(model, texts, mask, metric)]
    removed, masks = [[]], [mask.copy()]
    harm = harm_sign(metric)
    while mask.sum() > 0:
        if by == "gradient":
            importance = gradient_importance(model, texts, head_mask=mask, metric=metric)
        else:
            importance = harm * np.mean([ablation_effects(model, t, mode, head_mask=mask,
                                                          metric=metric) for t in texts], axis=0)
        remaining = [(l, h) for l in range(n_layer) for h in range(n_head) if mask[l, h]]
        remaining.sort(key=lambda lh: importance[lh])
        chosen = remaining[:per_step]
        for l, h in chosen:
            mask[l, h] = 0
        fractions.append(1 - mask.sum() / total)
        scores.append(_mean_score(model, texts, mask, metric))
        removed.append(chosen)
        masks.append(mask.copy())
        if progress is not None:
            progress(len(fractions) - 1, n_steps)
    return PruningCurve(np.array(fractions), np.array(scores), removed, by, masks)
