"""Direct logit attribution (docs/analyses.md, "Predictions, target metrics and direct logit
attribution"; Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits";
TransformerLens's stack_head_results + apply_ln_to_stack).

In a pre-norm model the final residual stream at position p is a sum of components: the
embeddings, every head's output (its context times its slice of W_O), every attention
output bias, every MLP's output. The logits are final_norm(x_p) W_U^T. Freezing the final
norm's scale s_p at its value on x_p makes them linear in the components:

    LayerNorm: c -> ((c - mean(c)) / s_p) . (gamma * u) and the bias adds beta . u
    RMSNorm:   c -> (c / s_p) . (gamma * u)

with u = W_U[target] - W_U[contrast] (or W_U[target] alone without a contrast). The terms
sum exactly to the final logit difference; what they leave out is every indirect effect (a
head changing what later layers do), which the exact ablation effect on the same metric
measures.

An encoder-decoder's decoder (T5) is read the same way, with one more set of components: each
cross-attention head's output. Everything the encoder did reaches the logits only through
them, so their direct effects say which heads carry the source into this prediction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core.errors import InputError
from ..models.scoring import TargetMetric

__all__ = ["Attribution", "direct_logit_attribution", "attribute_run",
           "direct_logit_attribution_seq2seq", "attribution_parts"]


@dataclass
class Attribution:
    heads: np.ndarray  # [L, H] each head's direct contribution (a decoder's self-attention)
    rest: dict[str, float]  # "embeddings", "L{l} attention bias", "L{l} MLP", "final norm bias"
    total: float  # the final logit (difference) computed by the model itself
    position: int
    target: int
    contrast: int | None
    description: str  # "logit('␣Paris') − logit('␣London') at position 4"
    scale: float  # the final norm's frozen scale s_p
    cross_heads: np.ndarray | None = None  # [L, H] an encoder-decoder's cross-attention heads

    @property
    def sum_of_components(self) -> float:
        cross = 0.0 if self.cross_heads is None else float(self.cross_heads.sum())
        return float(self.heads.sum() + cross + sum(self.rest.values()))


def attribution_parts(attribution: Attribution) -> dict[str, float]:
    """The components' terms gathered as a caption reads them: self-attention heads,
    cross-attention heads (0 without), MLPs, embeddings and the rest (biases); they sum to
    sum_of_components."""
    rest = attribution.rest
    parts = {"self-attention heads": float(attribution.heads.sum()),
             "cross-attention heads": 0.0 if attribution.cross_heads is None
             else float(attribution.cross_heads.sum()),
             "MLPs": float(sum(v for k, v in rest.items() if k.endswith(" MLP"))),
             "embeddings": float(rest.get("embeddings", 0.0))}
    parts["the rest"] = attribution.sum_of_components - sum(parts.values())
    return parts


def direct_logit_attribution(model, text: str, position: int, target, contrast=None,
                             head_mask=None) -> Attribution:
    """Each head's direct effect on logit(target) - logit(contrast) at ``position`` (the
    prediction made there). target / contrast: token ids or single-token strings. Needs a
    pre-norm model with a plain unembedding (GPT-2, the Llama family)."""
    check_attributable(model)
    return attribute_run(model.run(text, head_mask=head_mask, maps=False), position, target,
                         contrast)


def check_attributable(model) -> None:
    config = model.network.config
    config = getattr(config, "decoder", config)  # an encoder-decoder: its decoder predicts
    if not config.pre_norm or not config.final_norm or config.lm_head not in ("tied", "separate"):
        raise InputError("direct logit attribution needs a pre-norm model whose residual stream "
                         "is a sum of its components, ending in a norm and an unembedding "
                         "(GPT-2, Llama, T5); this model is post-norm or has no such LM head")
    why = config.logits_are_a_sum_of_terms
    if why:  # a number per head would be a silent wrong number
        raise InputError(f"direct logit attribution is not exact for this model: {why}. Use "
                         f"exact ablation or patching (Pruning impact, Circuits) instead")


class FrozenNormReader:
    """How much a component c of the final residual stream x (at one position) adds to the
    logits along a direction, with the final norm's scale frozen at its value on x:
    centre(c) . (gamma * u * unembed_scale) / s. The components' terms sum to the logit
    (difference) itself, the final norm's bias and the logits' bias being components too."""

    def __init__(self, stack, x: torch.Tensor, direction: torch.Tensor):
        config, norm = stack.config, stack.final_ln
        self.layer_norm = config.norm == "layernorm"
        x, direction = x.to(torch.float64), direction.to(torch.float64)  # whatever the weights
        if self.layer_norm:
            self.scale = torch.sqrt(x.var(unbiased=False) + norm.eps)
        else:
            self.scale = torch.sqrt(x.pow(2).mean() + norm.eps)
        self.read = norm.weight.to(torch.float64) * direction * config.unembed_scale / self.scale
        self.constant = {}
        if self.layer_norm and getattr(norm, "bias", None) is not None:
            self.constant["final norm bias"] = float(
                (norm.bias * config.unembed_scale).to(torch.float64) @ direction.to(torch.float64))

    def term(self, component: torch.Tensor) -> float:
        c = component.to(torch.float64)
        return float((c - c.mean(-1, keepdim=True) if self.layer_norm else c) @ self.read)

    def head_terms(self, attn, context: torch.Tensor) -> list[float]:
        """Each head's term from its output before W_O, context [H, d_k] at the position."""
        w_out = attn.out.weight.view(attn.d_model, attn.n_head, attn.d_head)
        per_head = torch.einsum("hk,dhk->hd", context, w_out)  # each head through W_O^h
        return [self.term(per_head[h]) for h in range(attn.n_head)]


def attribute_run(run, position: int, target, contrast=None) -> Attribution:
    """direct_logit_attribution from a model.run() that already happened (no new forward)."""
    model = run.model
    check_attributable(model)
    net, config = model.network, model.network.config
    kind = "logit" if contrast is None else "logit_diff"
    metric = model.resolve_metric(TargetMetric(position, target, contrast, kind), run.n_tokens)
    p = metric.position
    with torch.no_grad():
        total = run.score(TargetMetric(p, metric.target, metric.contrast, kind))
        reader = FrozenNormReader(net, run.final_residual[0, p],
                                  _direction(net, metric.target, metric.contrast))
        heads = np.zeros((config.n_layer, config.n_head))
        rest = {"embeddings": reader.term(run.embedded[0, p])}
        for layer, (block, record) in enumerate(zip(net.blocks, run.records)):
            heads[layer] = reader.head_terms(block.attn, record["context"][0, :, p])
            if block.attn.out.bias is not None:
                rest[f"L{layer} attention bias"] = reader.term(block.attn.out.bias)
            rest[f"L{layer} MLP"] = reader.term(record["mlp_out"][0, p])
        rest.update(reader.constant)
        rest.update(_logits_bias_term(net, metric.target, metric.contrast))
    return Attribution(heads=heads, rest=rest, total=total, position=p, target=metric.target,
                       contrast=metric.contrast, description=metric.description,
                       scale=float(reader.scale))


def _logits_bias_term(stack, target: int, contrast: int | None) -> dict[str, float]:
    """The bias added to the logits (BART's final_logits_bias, Phi's and GPT-J's LM head
    bias), as one more term of the sum; none without one."""
    if not stack.config.logits_bias:
        return {}
    bias = stack.logits_bias
    return {"logits bias": float(bias[target] - (0 if contrast is None else bias[contrast]))}


def _direction(stack, target: int, contrast: int | None) -> torch.Tensor:
    """W_U[target] - W_U[contrast], or W_U[target] alone."""
    unembed = stack.unembedding()
    return unembed[target] - (0 if contrast is None else unembed[contrast])


def direct_logit_attribution_seq2seq(model, source: str, target: str | None, position: int,
                                     token=None, contrast=None) -> Attribution:
    """An encoder-decoder's prediction at decoder ``position`` (of target token ``position``,
    teacher-forced on ``target``, or on the model's greedy output when target is None): each
    decoder self-attention head's (``heads``) and cross-attention head's (``cross_heads``)
    direct effect on logit(token) - logit(contrast). token: the target's own token there
    unless given; contrast: none (the logit alone) or a token id or single-token string.
    Needs a pre-norm decoder (T5); BART and Marian renormalize after every layer."""
    from ..engine.interventions import Interventions

    check_attributable(model)
    forced = model.teacher_forcing(source, target)
    n = len(forced.labels)
    p = int(position) + (n if int(position) < 0 else 0)
    if not 0 <= p < n:
        raise InputError(f"position {position} is outside the target's {n} tokens")
    token = forced.labels[p] if token is None else model.token_id(token)
    contrast = None if contrast is None else model.token_id(contrast)
    net, decoder = model.network, model.network.decoder
    last = decoder.config.n_layer - 1
    hooks = Interventions(capture=("z", "cross_z", "mlp_out", ("resid_pre", 0),
                                   ("resid_post", last)))
    with torch.no_grad():
        states, _ = net.encode(torch.tensor([forced.source_ids], device=net.device))
        hidden, _, _ = net.decode(torch.tensor([forced.decoder_ids], device=net.device), states,
                                  hooks=hooks)
        logits = decoder.lm_logits(hidden[0, p]).float()
        total = float(logits[token] - (0 if contrast is None else logits[contrast]))
        got = hooks.captured
        reader = FrozenNormReader(decoder, got[("resid_post", last)][0, p],
                                  _direction(decoder, token, contrast))
        shape = (decoder.config.n_layer, decoder.config.n_head)
        heads, cross_heads = np.zeros(shape), np.zeros(shape)
        rest = {"embeddings": reader.term(got[("resid_pre", 0)][0, p])}
        for layer, block in enumerate(decoder.blocks):
            heads[layer] = reader.head_terms(block.attn, got[("z", layer)][0, :, p])
            cross_heads[layer] = reader.head_terms(block.cross, got[("cross_z", layer)][0, :, p])
            for name, attn in (("attention", block.attn), ("cross-attention", block.cross)):
                if attn.out.bias is not None:
                    rest[f"L{layer} {name} bias"] = reader.term(attn.out.bias)
            rest[f"L{layer} MLP"] = reader.term(got[("mlp_out", layer)][0, p])
        rest.update(reader.constant)
        rest.update(_logits_bias_term(decoder, token, contrast))
    shown = model.display_tokens([token] + ([] if contrast is None else [contrast]))
    what = f"logit('{shown[0]}')" + ("" if contrast is None else f" − logit('{shown[1]}')")
    return Attribution(heads=heads, rest=rest, total=total, position=p, target=token,
                       contrast=contrast, description=f"{what} at target position {p}",
                       scale=float(reader.scale), cross_heads=cross_heads)
