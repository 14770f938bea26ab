"""Attribution patching (Nanda 2023): the first-order estimate from one forward and one
backward pass, and how far it is from exact patching."""

from __future__ import annotations

import math

import numpy as np
import torch

from ...engine.interventions import Interventions, run_with_hooks
from .activation import _base_and_source, activation_patching
from .common import (PairBatch, PatchingResult, _check_component, _check_direction,
                     _check_positions, _over_batches, _pairs_per_chunk, _summarise, _unit_shape,
                     metric_of, prepare_pairs)
from .metrics import check_differentiable


def attribution_patching(model, clean, corrupted=None, metric=None, component: str = "head",
                         direction: str = "denoise", compare_exact: bool = False,
                         progress=None) -> PatchingResult:
    """The first-order estimate of activation_patching from one forward and one backward
    pass of the run being patched (and a forward of the other prompt): m_base + sum over
    the component's entries of (a_source - a_base) * dm/da at the base run (Nanda 2023;
    Syed et al. 2023). Same components, directions and result type; compare_exact=True also
    runs exact patching and reports the estimate's error (result.exact, result.error)."""
    _check_direction(direction)
    point, axis, ungroup = _check_component(model, component)
    prepared = prepare_pairs(model, clean, corrupted, metric)
    _check_positions(prepared, axis)
    chunk = _pairs_per_chunk(model, max(p.n_tokens for p in prepared.pairs), {point: 3})
    per_pair, clean_m, corrupted_m = _over_batches(
        prepared, chunk, 1, progress,
        lambda batch: _attribute_batch(model, batch, prepared.metric, point, axis, ungroup,
                                       direction))
    result = _summarise(prepared, component, direction, "attribution", per_pair, clean_m,
                        corrupted_m, axis)
    if compare_exact:
        exact = activation_patching(model, clean, corrupted, metric, component, direction)
        result.exact = exact
        result.error = estimate_error(result, exact)
    return result


def _attribute_batch(model, batch: PairBatch, kind: str, point: str, axis: str,
                     ungroup: bool, direction: str):
    n_layer = model.info.n_layer
    size, length = batch.size, batch.n_tokens
    base_ids, source_ids = _base_and_source(direction, batch)
    with torch.inference_mode():
        source = Interventions(capture=[point], ungroup_kv=ungroup)
        m_source = metric_of(model, run_with_hooks(model.network, source_ids, source), batch, kind)
    with torch.enable_grad():
        base = Interventions(capture=[point], ungroup_kv=ungroup, keep_graph=True)
        # the weights need no gradient: the stream carries the graph from the embeddings up
        stream = model.network.embed(base_ids).detach().requires_grad_(True)
        final = run_with_hooks(model.network, base_ids, base, 0, stream)
        m_base = metric_of(model, final, batch, kind)
        check_differentiable(m_base, kind, "attribution patching")
        activations = [base.captured[(point, layer)] for layer in range(n_layer)]
        grads = torch.autograd.grad(m_base.sum(), activations)
    shape = _unit_shape(model, axis, length)
    values = torch.empty(size, n_layer, math.prod(shape), dtype=torch.float64,
                         device=base_ids.device)
    for layer, (act, grad) in enumerate(zip(activations, grads)):
        delta = (source.captured[(point, layer)] - act.detach()).double() * grad.double()
        values[:, layer] = _sum_per_unit(delta, axis).reshape(size, -1)
    values += m_base.detach().double()[:, None, None]
    m_base, m_source = m_base.detach().double().cpu().numpy(), m_source.double().cpu().numpy()
    m_clean, m_corr = (m_source, m_base) if direction == "denoise" else (m_base, m_source)
    return values.view(size, n_layer, *shape).cpu().numpy(), m_clean, m_corr


def _sum_per_unit(delta: torch.Tensor, axis: str) -> torch.Tensor:
    """Sum a [B, ...] first-order term over everything one unit covers."""
    if axis in ("head", "kv_head"):
        return delta.flatten(2).sum(-1)  # [B, H]
    if axis == "head_position":
        return delta.flatten(3).sum(-1) if delta.dim() > 3 else delta  # [B, H, T]
    return delta.sum(-1)  # streams [B, T, d] -> [B, T]


def estimate_error(estimate: PatchingResult, exact: PatchingResult) -> dict:
    """How far the first-order estimate is from exact patching: correlation r over every
    component and pair, the largest absolute error (normalized), and the worst components."""
    a = np.nan_to_num(estimate.per_pair_normalized).ravel()
    b = np.nan_to_num(exact.per_pair_normalized).ravel()
    r = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else float("nan")
    gap = np.abs(np.nan_to_num(estimate.normalized) - np.nan_to_num(exact.normalized))
    worst = np.argsort(gap.ravel())[::-1][:5]
    names = []
    for flat in worst:
        index = np.unravel_index(flat, gap.shape)
        if gap.ndim == 2:
            names.append(f"{exact.row_labels[index[0]]}.{exact.col_labels[index[1]]}")
        else:
            names.append(str(tuple(int(i) for i in index)))
    return {"r": r, "max_abs": float(gap.max()), "worst": names,
            "worst_gaps": [float(gap.ravel()[i]) for i in worst]}


# --- path patching --------------------------------------------------------------------------
