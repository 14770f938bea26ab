"""Which heads write a hook_z dictionary's features, and from which source tokens (Kissane et
al. 2024, "Interpreting Attention Layer Outputs with Sparse Autoencoders"; docs/analyses.md,
"Features at the head").

- feature_heads: feature f's decoder-norm share of head h, ||W_dec[f, h-block]|| / sum_g
  ||W_dec[f, g-block]|| (weight-based head attribution).
- feature_sources: direct feature attribution by source position. A head's output before
  W_O at query i is z_i = concat_h sum_j alpha_ij^h v_j^h, and f's pre-activation there is
  affine in z_i (the dictionary's frame frozen at z_i: dictionaries.sae), so it splits
  exactly into terms [h, j] = alpha_ij^h v_j^h . W_enc[h-block, f] (scaled, and centred,
  as the frame says) plus one bias b_enc[f] - b_dec . W_enc[:, f].
- feature_from_source: of the features active at a query, the one a given source token
  builds most (an induction head's target: the feature it writes from there).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...core.errors import InputError
from ...engine.interventions import Interventions, run_with_hooks
from ..heads import head_name
from ..why.scores import _position as check_position  # one rule for a position
from ..why.stream import encoded_ids
from .activations import check_model_site

WORK = torch.float64


def _n_head_of(sae, model) -> int:
    if sae.site != "hook_z":
        raise InputError(f"head shares read a hook_z dictionary (each head's output before "
                         f"W_O); this one reads {sae.hook_name}")
    if model is not None:
        sae.check_model(model)
        return int(model.info.n_head)
    n_head = sae.metadata.get("n_head")
    if not isinstance(n_head, int) or n_head < 1 or sae.d_in % n_head:
        raise InputError("how many heads this dictionary's input holds is not in its file: "
                         "give model= (the model it reads)")
    return n_head


def feature_heads(sae, model=None) -> np.ndarray:
    """[d_sae, n_head]: each feature's decoder-norm share per head (rows sum to 1; a
    feature whose decoder row is zero has shares 0). The head count is the model's (model=)
    or the file's (metadata "n_head", which train_sae writes)."""
    n_head = _n_head_of(sae, model)
    rows = sae.decoder_rows(WORK).reshape(sae.d_sae, n_head, sae.d_in // n_head)
    norms = rows.norm(dim=-1)
    total = norms.sum(-1, keepdim=True)
    return torch.where(total > 0, norms / total.clamp_min(1e-300), 0.0).numpy()


@dataclass
class FeatureSources:
    """Feature `feature`'s pre-activation at `query` split over heads x source positions.

    terms [n_head, T]: terms[h, j] what head h carries from key j; terms.sum() + bias ==
    pre_activation (float64, from the engine's z through the dictionary's encoder).
    activation: the feature's activation there, in the dictionary's dtype (after its
    activation function: TopK, JumpReLU... which is not linear: the terms split what it
    reads)."""
    layer: int
    query: int
    feature: int
    terms: np.ndarray  # [n_head, T] float64
    bias: float
    pre_activation: float  # computed by the dictionary from the engine's z
    activation: float
    heads: list[str]
    tokens: list[str]

    def head_totals(self) -> np.ndarray:
        """[n_head] each head's share of the pre-activation (summed over sources)."""
        return self.terms.sum(1)

    def strongest(self, k: int = 5) -> list[tuple[str, int, float]]:
        """The k (head, source position, term) of largest |term|."""
        order = np.argsort(-np.abs(self.terms), axis=None, kind="stable")[:int(k)]
        return [(self.heads[h], int(j), float(self.terms[h, j]))
                for h, j in (np.unravel_index(o, self.terms.shape) for o in order)]


def head_values(model, ids: list[int], layer: int) -> dict:
    """One forward up to `layer`: its pattern [H, T, T], values per query head [H, T, d_k]
    and z [T, H * d_k] (float32, as the engine computed them)."""
    network = model.network
    hooks = Interventions(capture=[("pattern", layer), ("v", layer), ("z", layer)])
    with torch.inference_mode():
        run_with_hooks(network, torch.tensor([ids], device=network.device), hooks,
                       stop=layer + 1)
    attn = network.blocks[layer].attn
    values = hooks.captured[("v", layer)][0][attn.kv_index]  # [H, T, d_k]
    z = hooks.captured[("z", layer)][0]  # [H, T, d_k]
    return {"pattern": hooks.captured[("pattern", layer)][0], "v": values,
            "z": z.transpose(0, 1).reshape(z.shape[1], -1)}


def check_feature(sae, feature) -> int:
    if isinstance(feature, bool) or not isinstance(feature, (int, np.integer)) \
            or not 0 <= feature < sae.d_sae:
        raise InputError(f"feature must be 0..{sae.d_sae - 1}, got {feature!r}")
    return int(feature)


def feature_sources(model, sae, text_or_ids, query: int, feature: int) -> FeatureSources:
    """Feature `feature` of hook_z dictionary `sae`, at position `query` of a text (or token
    ids), split over heads x source positions (see the module docstring); one forward of
    the layers up to the dictionary's."""
    _n_head_of(sae, model)
    check_model_site(model, sae.site, sae.layer)
    feature = check_feature(sae, feature)
    ids, _, tokens = encoded_ids(model, text_or_ids)
    query = check_position(query, len(ids), "query")
    return _sources(sae, head_values(model, ids, sae.layer), query, feature, tokens)


def _sources(sae, got: dict, query: int, feature: int, tokens: list[str],
             activation: float | None = None) -> FeatureSources:
    """feature_sources from one forward's pattern, values and z (head_values); activation:
    the feature's at the query, when the caller has encoded it already."""
    # where the dictionary is (the CPU, as loaded): one query's row, the values and z
    held = sae.W_dec.device
    pattern = got["pattern"][:, query].to(held, WORK)  # [H, T]
    values = got["v"].to(held, WORK)  # [H, T, d_k]
    z = got["z"][query].to(held, WORK)  # [d_in]
    frame = sae.frame(z)
    weight, bias = sae.pre_weights(WORK)
    column = weight[:, feature].reshape(values.shape[0], values.shape[2])  # [H, d_k]
    terms = pattern * torch.einsum("htk,hk->ht", values, column)
    if frame.centre:  # frame(x) = s (x - mean x): each part's mean goes with it
        sums = pattern * values.sum(-1)  # [H, T]: each part's sum over the d_in numbers
        terms = terms - sums * weight[:, feature].sum() / sae.d_in
    terms = terms * frame.scale_in[0]
    pre = float(frame.apply(z) @ weight[:, feature] + bias[feature])  # the whole, at once
    if activation is None:
        activation = float(sae.encode(got["z"][query:query + 1])[0, feature])
    return FeatureSources(layer=sae.layer, query=query, feature=feature,
                          terms=terms.cpu().numpy(), bias=float(bias[feature]),
                          pre_activation=pre, activation=activation,
                          heads=[head_name(sae.layer, h) for h in range(values.shape[0])],
                          tokens=tokens)


def feature_from_source(model, sae, text_or_ids, query: int, source: int) -> FeatureSources:
    """Of the features active at `query` (activation > 0), the one the token at `source`
    builds most: the largest sum over heads of its terms at that source (feature_sources),
    split as feature_sources splits it. On an induction head's query and target (the token
    after the earlier copy), the feature the induction heads write from that target
    (docs/analyses.md). One forward; refused when no feature is active there."""
    _n_head_of(sae, model)
    check_model_site(model, sae.site, sae.layer)
    ids, _, tokens = encoded_ids(model, text_or_ids)
    query = check_position(query, len(ids), "query")
    source = check_position(source, query + 1, "source")  # a key the query sees
    got = head_values(model, ids, sae.layer)
    activations = sae.encode(got["z"][query:query + 1])[0]  # encoded once, for every feature
    active = torch.nonzero(activations > 0).flatten().tolist()
    if not active:
        raise InputError(f"no feature of this dictionary is active at query {query}")
    found = [_sources(sae, got, query, int(f), tokens, float(activations[f])) for f in active]
    return max(found, key=lambda s: (float(s.terms[:, source].sum()), -s.feature))
