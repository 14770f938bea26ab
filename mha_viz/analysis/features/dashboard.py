"""A feature's dashboard, as numbers (nothing drawn): where it fires on a text, and the
tokens its decoder row raises and lowers through the model's unembedding. Its strongest
snippets over a corpus are a corpus job (corpus/feature_snippets.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...core.errors import InputError
from ..why.stream import encoded_ids
from .activations import check_model_site, site_activations
from .heads import check_feature


@dataclass
class FeatureFiring:
    """Every feature's activation at every position of one text.

    acts [T, d_sae] float32 (0 where a feature is inactive), in the dictionary's encoding of
    the engine's activations at its site."""
    tokens: list[str]
    acts: np.ndarray
    hook_name: str

    def of(self, feature: int) -> np.ndarray:
        """[T] one feature's activation at each position."""
        return self.acts[:, int(feature)]

    def strongest_features(self, k: int = 10) -> list[tuple[int, float]]:
        """The k features with the largest activation anywhere in the text, with it."""
        peak = self.acts.max(0)
        order = np.argsort(-peak, kind="stable")[:int(k)]
        return [(int(f), float(peak[f])) for f in order if peak[f] > 0]

    def at(self, position: int, k: int = 10) -> list[tuple[int, float]]:
        """The k most active features at one position."""
        row = self.acts[int(position)]
        order = np.argsort(-row, kind="stable")[:int(k)]
        return [(int(f), float(row[f])) for f in order if row[f] > 0]


def feature_firing(model, sae, text_or_ids) -> FeatureFiring:
    """Where each of the dictionary's features fires on a text (one forward up to its
    layer; position 0 included, though dictionaries mha-viz trains never saw it)."""
    from ...core.budget import ONE_INPUT_SHARE, budget_bytes, size_text

    sae.check_model(model)
    check_model_site(model, sae.site, sae.layer)
    ids, _, tokens = encoded_ids(model, text_or_ids)
    need = 4 * len(ids) * sae.d_sae
    if need > ONE_INPUT_SHARE * budget_bytes():
        raise InputError(f"{sae.d_sae:,} features over {len(ids):,} tokens would hold "
                         f"{size_text(need)}, more than this server keeps for one input: use "
                         f"a shorter text")
    values = site_activations(model, torch.tensor([ids]), [(sae.site, sae.layer)])[0][0]
    acts = sae.encode(values).float().numpy()
    return FeatureFiring(tokens, acts, sae.hook_name)


@dataclass
class OutputTokens:
    """The tokens a feature's decoder row raises (top) and lowers (bottom) when read
    straight through the final norm's weight and the unembedding: (token, logit) pairs."""
    feature: int
    top: list[tuple[str, float]]
    bottom: list[tuple[str, float]]


def feature_output_tokens(model, sae, feature: int, k: int = 10) -> OutputTokens:
    """Feature `feature`'s direct effect on the logits (the logit lens of its decoder row):
    a hook_z row goes through each head's slice of W_O into the stream; the stream's
    direction is multiplied by the final norm's weight (its scale and centring are those of
    a whole stream, not of one direction) and by W_U. A model without an unembedding (an
    encoder's embeddings, a masked-LM head) has no such tokens."""
    sae.check_model(model)
    check_model_site(model, sae.site, sae.layer)
    feature = check_feature(sae, feature)
    stack = model.network
    if stack.config.lm_head not in ("tied", "separate"):
        raise InputError("this model has no plain unembedding to read a feature's tokens "
                         "through")
    row = sae.decoder_rows(torch.float32)[feature]
    with torch.no_grad():
        if sae.site == "hook_z":
            attn = stack.blocks[sae.layer].attn
            w_out = attn.out.weight.float().view(attn.d_model, attn.n_head, attn.d_head)
            row = torch.einsum("dhk,hk->d", w_out, row.view(attn.n_head, attn.d_head))
        if stack.config.final_norm and getattr(stack.final_ln, "weight", None) is not None:
            row = row * stack.final_ln.weight.float()
        logits = stack.unembedding().float() @ (row * stack.config.unembed_scale)
    k = max(1, min(int(k), logits.shape[0]))
    top, bottom = torch.topk(logits, k), torch.topk(-logits, k)
    names = model.display_tokens
    return OutputTokens(feature,
                        list(zip(names(top.indices.tolist()), top.values.tolist())),
                        list(zip(names(bottom.indices.tolist()), (-bottom.values).tolist())))
