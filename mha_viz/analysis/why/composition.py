"""Composition: how much of a head's scores and output pass through each earlier head
(docs/analyses.md, "Why a head attends"; Elhage et al. 2021, "A Mathematical Framework for
Transformer Circuits").

On a text (text_composition), from the same split input as score attribution (scores.py):
for head h of layer l, Q-composition with an earlier source g is g's share of h's scores
through the query side, the terms scale * <q_g(i), k(j)>; K-composition through the key
side, scale * <q(i), k_g(j)>; V-composition g's share of what h writes, sum_j a_ij v_g(j)
W_O^h. A share is

    share_g = sum_ij a_ij |c_g(i, j) - mean_{j' seen by i} c_g(i, j')|
              / sum_s sum_ij a_ij |c_s(i, j) - mean_{j'} c_s(i, j')|

over the pairs (i, j) the mask keeps: a softmax ignores what every key of a row gets alike,
so each row's terms are taken about their mean over the keys it sees; the head's own weights
a_ij count the keys it reads most (each query row weighs 1); absolute values, because a
source that pushes one key up and another down shapes the map as much as one that only
pushes up. V: share_g = sum_i ||sum_j a_ij v_g(j) W_O^h|| / sum_s sum_i ||...||. Shares of
every source (heads, embeddings, MLPs, bias) sum to 1.

In the weights (weight_composition; Elhage et al.'s definition, as TransformerLens computes
it): with W_QK^h = W_Q^h^T W_K^h and W_OV^g = W_O^g W_V^g (d x d, column vectors),

    Q-comp(h, g) = ||W_QK^h^T W_OV^g||_F / (||W_QK^h||_F ||W_OV^g||_F)
    K-comp(h, g) = ||W_QK^h W_OV^g||_F / (...),   V-comp(h, g) = ||W_OV^h W_OV^g||_F / (...)

The weight of the norm each head reads through is folded into W_Q, W_K, W_V (TransformerLens's
fold_ln), a QK-norm's weight into W_Q and W_K, a norm on the attention's output (Gemma 2)
into W_O; biases, norms' scales and rotary positions are left out: the weights alone. Under
grouped-query attention a head's W_K and W_V are those of the key/value head it reads. Every
Frobenius norm is computed through d_k x d_k matrices (||P M R||_F = ||U^T M V||_F with
U U^T = P^T P, V V^T = R R^T), never a d x d product. The baseline is the mean score of
random Gaussian matrices of the same shapes: what composition by chance gives. An
encoder-decoder's scores are its encoder's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import torch

from ...core.errors import InputError
from ...engine.wiring import ATTENTION, input_norm, output_norm
from .scores import POSITION_BIAS, hidden_of, projected
from .stream import WORK, check_head, encoded_ids, stack_of, stream_parts

KINDS = ("q", "k", "v")
BASELINE_SAMPLES = 8  # random heads on each side: 64 pairs


@dataclass
class CompositionScores:
    """Composition into head (layer, head), or between every pair of heads.

    On a text (kind "text"): q, k, v [L, H] each earlier head's share (NaN at and above
    the layer); other[kind] {source: share} for the embeddings, MLPs, bias and position
    bias. In the weights (kind "weights"): q, k, v [L, H] the receiving head's scores with
    each sending head (NaN at and above its layer) or, with no head given, [L, H, L, H]
    indexed (receiving layer, head, sending layer, head); baseline: random matrices' mean."""
    kind: str
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    layer: int | None = None
    head: int | None = None
    other: dict = field(default_factory=dict)
    baseline: float | None = None
    tokens: list[str] = field(default_factory=list)

    def of(self, kind: str) -> np.ndarray:
        if kind not in KINDS:
            raise InputError(f"composition is one of {', '.join(KINDS)}, got {kind!r}")
        return getattr(self, kind)


def composition_scores(model, text=None, layer: int | None = None, head: int | None = None,
                       text_pair: str | None = None) -> CompositionScores:
    """Composition into head (layer, head) on a text (text_composition), or Elhage et al.'s
    weight-based scores without one (weight_composition: of that head, or of every pair
    when no head is given)."""
    if text is None:
        if (layer is None) != (head is None):
            raise InputError("give both a layer and a head, or neither (every pair)")
        return weight_composition(model, layer, head)
    if layer is None or head is None:
        raise InputError("composition on a text is of one head: give its layer and head")
    return text_composition(model, text, layer, head, text_pair)


def _centred(contributions: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
    """[n, T, T] each row's terms minus their mean over the keys the row sees."""
    count = seen.sum(-1).clamp(min=1)
    mean = (contributions * seen).sum(-1, keepdim=True) / count[:, None]
    return contributions - mean


def _shares(mass: torch.Tensor) -> np.ndarray:
    total = float(mass.sum())
    return (mass / total).cpu().numpy() if total > 0 else np.zeros(mass.shape[0])


def text_composition(model, text, layer: int, head: int,
                     text_pair: str | None = None) -> CompositionScores:
    """Each source's share of head (layer, head)'s scores through the query side and the
    key side, and of its output through the values, on one text (the module docstring)."""
    layer, head = check_head(model, layer, head)
    ids, types, tokens = encoded_ids(model, text, text_pair)
    stream = stream_parts(model, ids, types, layer)
    attn = stream.block.attn
    with torch.inference_mode():
        q, k, v = projected(stream, head, "qkv")  # [n, T, d_k] each
        scale = attn.scale
        by_query = scale * torch.einsum("sik,jk->sij", q, k.sum(0))
        by_key = scale * torch.einsum("ik,sjk->sij", q.sum(0), k)
        n = stream.n_tokens
        seen = ~hidden_of(stream, torch.arange(n, device="cpu")).to(q.device)
        weights = stream.captured["pattern"][head].to(WORK) * seen
        names = list(stream.names)
        masses = {}
        for kind, split in (("q", by_query), ("k", by_key)):
            if stream.position_bias is not None:  # a source of its own on both sides
                split = torch.cat([split, stream.position_bias[head][None]])
            masses[kind] = (weights * _centred(split, seen).abs()).sum((1, 2))
        w_out = attn.out.weight.to(WORK).view(attn.d_model, attn.n_head, attn.d_head)[:, head]
        read = torch.einsum("ij,sjk->sik", weights, v)  # [n, T, d_k]: before W_O^h
        # ||read W_O^h^T|| through the d_k x d_k Gram matrix of W_O^h
        masses["v"] = torch.einsum("sik,kl,sil->si", read, w_out.T @ w_out, read).clamp(
            min=0).sqrt().sum(-1)
        if stream.position_bias is not None:
            masses["v"] = torch.cat([masses["v"], masses["v"].new_zeros(1)])
    if stream.position_bias is not None:
        names.append(POSITION_BIAS)
    config = stream.stack.config
    maps, other = {}, {}
    for kind in KINDS:
        shares = _shares(masses[kind])
        maps[kind] = np.full((config.n_layer, config.n_head), np.nan)
        maps[kind][:layer] = shares[_head_rows(names, layer, config.n_head)].reshape(
            layer, config.n_head)
        other[kind] = {name: float(share) for name, share in zip(names, shares)
                       if not name.startswith("L") or name.endswith(".mlp")}
    return CompositionScores("text", maps["q"], maps["k"], maps["v"], layer, head, other,
                             tokens=tokens)


def _head_rows(names: list[str], layer: int, n_head: int) -> list[int]:
    """The rows of the heads L0.H0 .. L{layer-1}.H{n_head-1} among the source names."""
    where = {name: i for i, name in enumerate(names)}
    return [where[f"L{m}.H{h}"] for m in range(layer) for h in range(n_head)]


# --- in the weights ----------------------------------------------------------------------


def head_matrices(stack) -> dict[str, torch.Tensor]:
    """Every head's W_Q, W_K, W_V [L, H, d_k, d] (key/value heads repeated for the query
    heads that read them) and W_O [L, H, d, d_k], the norms' weights folded in (the module
    docstring), float64."""
    found = {name: [] for name in ("W_Q", "W_K", "W_V", "W_O")}
    for block in stack.blocks:
        attn = block.attn
        w_q, w_k, w_v = (w.to(WORK) for w in attn.qkv_weights()[:3])
        index = attn.kv_index
        w_k, w_v = w_k[index], w_v[index]
        reading = _norm_weight(block, input_norm(block.wiring, ATTENTION))
        if reading is not None:
            w_q, w_k, w_v = (w * reading.to(WORK) for w in (w_q, w_k, w_v))
        if attn.qk_norm:
            w_q = w_q * _qk_norm_weight(attn.q_norm, attn.qk_norm, attn.n_head, attn.d_head)
            w_k = w_k * _qk_norm_weight(attn.k_norm, attn.qk_norm, attn.n_kv_head,
                                        attn.d_head)[index]
        w_out = attn.out.weight.to(WORK)
        writing = _norm_weight(block, output_norm(block.wiring, ATTENTION))
        if writing is not None:
            w_out = writing.to(WORK)[:, None] * w_out
        found["W_Q"].append(w_q)
        found["W_K"].append(w_k)
        found["W_V"].append(w_v)
        found["W_O"].append(w_out.view(attn.d_model, attn.n_head, attn.d_head)
                            .permute(1, 0, 2))
    return {name: torch.stack(values) for name, values in found.items()}


def _norm_weight(block, step) -> torch.Tensor | None:
    """The weight of a norm step of the block's wiring (None: no step, or no weight)."""
    return None if step is None else getattr(block.module_of(step), "weight", None)


def _qk_norm_weight(norm, kind: str, n_head: int, d_head: int) -> torch.Tensor:
    """[heads, d_k, 1] the QK-norm's weight on each head's rows of W_Q or W_K."""
    weight = norm.weight.to(WORK)
    if kind == "head":
        return weight[None, :, None].expand(n_head, d_head, 1)
    return weight.view(n_head, d_head, 1)


def _gram(a: torch.Tensor) -> torch.Tensor:
    """[..., d_k, d] -> [..., d_k, d_k]: a a^T."""
    return a @ a.transpose(-1, -2)


def _root(gram: torch.Tensor) -> torch.Tensor:
    """[..., d_k, d_k] a symmetric positive semi-definite G -> U with U U^T = G."""
    values, vectors = torch.linalg.eigh(gram)
    return vectors * values.clamp(min=0).sqrt()[..., None, :]


def _scores_into(receiving: dict, sending: dict, dtype) -> dict[str, torch.Tensor]:
    """Q-, K- and V-composition [A, B] of A receiving heads with B sending heads, each given
    as W_Q, W_K, W_V [*, d_k, d] and W_O [*, d, d_k]. ||P M R||_F with M = W_X^h W_O^g is
    ||U^T W_X^h W_O^g V||_F for U U^T = P^T P and V V^T = R R^T (d_k x d_k roots): one
    product of every receiving head's U^T W_X^h with every sending head's W_O^g V."""
    w_q, w_k, w_v, w_o = (receiving[n].to(WORK) for n in ("W_Q", "W_K", "W_V", "W_O"))
    s_v, s_o = sending["W_V"].to(WORK), sending["W_O"].to(WORK)
    g_q, g_k, g_v = _gram(w_q), _gram(w_k), _gram(w_v)
    g_o = w_o.transpose(-1, -2) @ w_o  # W_O^T W_O [A, d_k, d_k]
    s_gv = _gram(s_v)
    qk_norm = torch.einsum("aij,aji->a", g_q, g_k).clamp(min=0).sqrt()
    ov_norm = torch.einsum("aij,aji->a", g_o, g_v).clamp(min=0).sqrt()
    s_ov_norm = torch.einsum("bij,bji->b", s_o.transpose(-1, -2) @ s_o, s_gv).clamp(
        min=0).sqrt()
    written = (s_o @ _root(s_gv)).to(dtype)  # W_O^g V_g [B, d, d_k]
    into = {"q": (g_k, w_q, qk_norm), "k": (g_q, w_k, qk_norm), "v": (g_o, w_v, ov_norm)}
    out = {}
    for kind, (left_gram, reading, norm) in into.items():
        read = (_root(left_gram).transpose(-1, -2) @ reading).to(dtype)  # U^T W_X^h
        pairs = torch.einsum("akd,bde->abke", read, written)  # [A, B, d_k, d_k]
        out[kind] = pairs.to(WORK).pow(2).sum((-1, -2)).sqrt() / (norm[:, None]
                                                                  * s_ov_norm[None])
    return out


@functools.lru_cache(maxsize=16)
def random_baseline(d_model: int, d_head: int, samples: int = BASELINE_SAMPLES,
                    seed: int = 0) -> float:
    """The mean K-composition score of `samples` random Gaussian heads (W_Q, W_K, W_V, W_O
    of one head's shapes) with as many others, every pair (Q- and V-composition have the
    same distribution): composition by chance."""
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape):
        return torch.randn(samples, *shape, generator=generator, dtype=WORK, device="cpu")

    receiving = {"W_Q": draw(d_head, d_model), "W_K": draw(d_head, d_model),
                 "W_V": draw(d_head, d_model), "W_O": draw(d_model, d_head)}
    sending = {"W_V": draw(d_head, d_model), "W_O": draw(d_model, d_head)}
    return float(_scores_into(receiving, sending, WORK)["k"].mean())


def weight_composition(model, layer: int | None = None, head: int | None = None
                       ) -> CompositionScores:
    """Elhage et al.'s Q-, K- and V-composition scores in the weights (the module
    docstring): of head (layer, head) with every earlier head ([L, H]), or of every pair
    ([L, H, L, H], receiving head first) when no head is given."""
    stack = stack_of(model)
    config = stack.config
    if layer is not None:
        layer, head = check_head(model, layer, head)
    matrices = head_matrices(stack)
    n_layer, n_head = config.n_layer, config.n_head
    # float32 for the pairs' products (every pair of a 30-layer model is ~1e11 of them)
    dtype = torch.float32 if n_layer * n_head > 64 else WORK
    receivers = range(n_layer) if layer is None else [layer]
    shape = (n_layer, n_head) if layer is None else ()
    maps = {kind: np.full(shape + (n_layer, n_head), np.nan) for kind in KINDS}
    with torch.inference_mode():
        for receiving_layer in receivers:
            if receiving_layer == 0:
                continue
            heads = slice(None) if layer is None else slice(head, head + 1)
            receiving = {n: m[receiving_layer, heads] for n, m in matrices.items()}
            sending = {n: m[:receiving_layer].reshape(-1, *m.shape[2:])
                       for n, m in matrices.items()}
            found = _scores_into(receiving, sending, dtype)
            for kind in KINDS:
                values = found[kind].to(WORK).cpu().numpy().reshape(-1, receiving_layer, n_head)
                if layer is None:
                    maps[kind][receiving_layer, :, :receiving_layer] = values
                else:
                    maps[kind][:receiving_layer] = values[0]
    return CompositionScores("weights", maps["q"], maps["k"], maps["v"], layer, head,
                             baseline=random_baseline(config.d_model, config.d_head))
