"""Direct logit attribution (ANALYSES.md section 6; Elhage et al. 2021, "A Mathematical
Framework for Transformer Circuits"; TransformerLens's stack_head_results + apply_ln_to_stack).

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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError

__all__ = ["Attribution", "direct_logit_attribution", "attribute_run"]


@dataclass
class Attribution:
    heads: np.ndarray  # [L, H] each head's direct contribution
    rest: dict[str, float]  # "embeddings", "L{l} attention bias", "L{l} MLP", "final norm bias"
    total: float  # the final logit (difference) computed by the model itself
    position: int
    target: int
    contrast: int | None
    description: str  # "logit('␣Paris') − logit('␣London') at position 4"
    scale: float  # the final norm's frozen scale s_p

    @property
    def sum_of_components(self) -> float:
        return float(self.heads.sum() + sum(self.rest.values()))


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
    if not config.pre_norm or not config.final_norm or config.lm_head not in ("tied", "separate"):
        raise InputError("direct logit attribution needs a pre-norm model whose residual stream "
                         "is a sum of its components, ending in a norm and an unembedding "
                         "(GPT-2, Llama); this model is post-norm or has no such LM head")


def attribute_run(run, position: int, target, contrast=None) -> Attribution:
    """direct_logit_attribution from a model.run() that already happened (no new forward)."""
    from ..model import TargetMetric

    model = run.model
    check_attributable(model)
    net, config = model.network, model.network.config
    kind = "logit" if contrast is None else "logit_diff"
    metric = model.resolve_metric(TargetMetric(position, target, contrast, kind), run.n_tokens)
    p = metric.position
    with torch.no_grad():
        total = run.score(TargetMetric(p, metric.target, metric.contrast, kind))
        unembed = net.unembedding()
        direction = unembed[metric.target] - (0 if metric.contrast is None
                                              else unembed[metric.contrast])
        norm = net.final_ln
        x = run.final_residual[0, p]
        layer_norm = config.norm == "layernorm"
        centre = (lambda c: c - c.mean(-1, keepdim=True)) if layer_norm else (lambda c: c)
        if layer_norm:
            scale = torch.sqrt(x.var(unbiased=False) + norm.eps)
        else:
            scale = torch.sqrt(x.pow(2).mean() + norm.eps)
        read = norm.weight * direction / scale  # a component c contributes centre(c) . read

        def term(component: torch.Tensor) -> float:
            return float(centre(component.to(torch.float64)) @ read.to(torch.float64))

        heads = np.zeros((config.n_layer, config.n_head))
        rest = {"embeddings": term(run.embedded[0, p])}
        for layer, (block, record) in enumerate(zip(net.blocks, run.records)):
            attn = block.attn
            d_k = attn.d_head
            context = record["context"][0, :, p]  # [H, d_k]
            w_out = attn.out.weight.view(config.d_model, attn.n_head, d_k)  # [d, H, d_k]
            per_head = torch.einsum("hk,dhk->hd", context, w_out)  # each head through W_O^h
            heads[layer] = [term(per_head[h]) for h in range(attn.n_head)]
            if attn.out.bias is not None:
                rest[f"L{layer} attention bias"] = term(attn.out.bias)
            rest[f"L{layer} MLP"] = term(record["mlp_out"][0, p])
        if layer_norm and norm.bias is not None:
            rest["final norm bias"] = float(norm.bias.to(torch.float64)
                                            @ direction.to(torch.float64))
    return Attribution(heads=heads, rest=rest, total=total, position=p, target=metric.target,
                       contrast=metric.contrast, description=metric.description,
                       scale=float(scale))
