"""A feature's dashboard, as numbers (nothing drawn): where it fires on a text, a head's
strongest features on it, and the tokens a feature's decoder row raises and lowers through
the model's unembedding. Its strongest snippets over a corpus are a corpus job
(corpus/feature_snippets.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...core.errors import InputError
from ..why.stream import encoded_ids
from .activations import SKIPPED_POSITIONS, check_model_site, site_activations
from .heads import check_feature

BEFORE, AFTER = 8, 2  # tokens of a text shown before and after where a feature fires


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

    def peak(self, feature: int, skip: int = SKIPPED_POSITIONS) -> tuple[int, float]:
        """(the position where the feature fires most, its activation there), the first
        `skip` positions left out as training leaves them out (activations.SKIPPED_POSITIONS;
        a text that short: all of it); the first such position when it fires nowhere."""
        values = self.of(feature)
        start = int(skip) if len(values) > int(skip) else 0
        position = start + int(np.argmax(values[start:]))
        return position, float(values[position])

    def window(self, position: int, before: int = BEFORE, after: int = AFTER
               ) -> tuple[list[str], int]:
        """(the tokens around `position`, before and after it as far as the text goes,
        its index among them): a snippet of the text where a feature fires."""
        position = int(position)
        start = max(0, position - int(before))
        return self.tokens[start:position + int(after) + 1], position - start


@dataclass
class HeadFeatures:
    """A head's strongest features on a text, of a hook_z dictionary of its layer,
    strongest first: each feature's activation summed over the text (`summed`; the first
    `skipped` positions left out, as training leaves them out), its decoder-norm share on
    the head (`share`, feature_heads) and their product (`weight`): the part of the
    feature's activity that the head's share of its decoder row accounts for, by which they
    are ranked. `peak`: the position where each fires most."""
    head: int
    features: list[int]
    summed: np.ndarray  # [k]
    share: np.ndarray  # [k]
    weight: np.ndarray  # [k] summed * share
    peak: list[int]
    skipped: int


def head_features(firing: FeatureFiring, shares: np.ndarray, head: int, k: int = 10,
                  skip: int = SKIPPED_POSITIONS) -> HeadFeatures:
    """The k features of firing's hook_z dictionary that the head writes most on the text:
    ranked by (activation summed over the text) x (decoder-norm share on the head, shares
    = feature_heads(sae)), features that never fire left out (see HeadFeatures)."""
    shares = np.asarray(shares, dtype=np.float64)
    if shares.ndim != 2 or shares.shape[0] != firing.acts.shape[1]:
        raise InputError(f"shares must be [d_sae, n_head] = [{firing.acts.shape[1]}, ...] "
                         f"(feature_heads of the dictionary that fired), got {shares.shape}")
    if isinstance(head, bool) or not 0 <= int(head) < shares.shape[1]:
        raise InputError(f"head must be 0..{shares.shape[1] - 1}, got {head!r}")
    skip = int(skip) if firing.acts.shape[0] > int(skip) else 0
    summed = firing.acts[skip:].astype(np.float64).sum(0)
    weight = summed * shares[:, int(head)]
    order = [int(f) for f in np.argsort(-weight, kind="stable")[:int(k)] if weight[f] > 0]
    return HeadFeatures(int(head), order, summed[order], shares[order, int(head)],
                        weight[order], [firing.peak(f, skip)[0] for f in order], skip)


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
    values = site_activations(model, torch.tensor([ids], device="cpu"),
                             [(sae.site, sae.layer)])[0][0]
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
    row = sae.decoder_rows(torch.float32)[feature].to(stack.device)  # the model's device
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
