"""Activation patching, exact: each patched run starts from the unpatched stream below the
patch, and a causal model's copies compute only the positions from the first that differs."""

from __future__ import annotations

import math

import torch

from ...engine.attention import causal_rows_bias
from ...engine.interventions import Interventions, run_with_hooks
from .common import (PairBatch, PatchingResult, _check_component, _check_direction,
                     _check_positions, _check_work, _chunks, _over_batches, _pairs_per_chunk,
                     _summarise, _unit_masks, _unit_shape, metric_of, prepare_pairs, rows_per_batch)


def activation_patching(model, clean, corrupted=None, metric=None, component: str = "head",
                        direction: str = "denoise", progress=None) -> PatchingResult:
    """The metric with one component patched, for every component (exact: one patched run
    each, started from the cached stream entering its layer, batched).

    clean, corrupted: two texts (metric: a TargetMetric with position, target, contrast and
    kind), or clean a PromptPair or a list of them (metric: the kind, as a string or a
    TargetMetric; each pair has its own target and contrast). direction "denoise" runs the
    corrupted prompt with one clean activation; "noise" the clean prompt with one corrupted
    activation. progress(done, total) counts patches (one component of one layer of one pair)
    as batches of them finish."""
    _check_direction(direction)
    point, axis, ungroup = _check_component(model, component)
    prepared = prepare_pairs(model, clean, corrupted, metric)
    _check_positions(prepared, axis)
    _check_work(model, prepared, axis)
    n_layer = model.info.n_layer
    chunk = _pairs_per_chunk(model, max(p.n_tokens for p in prepared.pairs),
                             {point: 1, "resid_pre": 1, "rot_k": 1, "v": 1})
    # progress counts patches (a head at a layer of a pair), reported as batches of them end
    total = sum(n_layer * math.prod(_unit_shape(model, axis, pair.n_tokens))
                for pair in prepared.pairs)
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)
    with torch.inference_mode():
        per_pair, clean_m, corrupted_m = _over_batches(
            prepared, chunk, n_layer, None,
            lambda batch: _patch_batch(model, batch, prepared.metric, point, axis, ungroup,
                                       direction, advance))
    return _summarise(prepared, component, direction, "exact", per_pair, clean_m, corrupted_m,
                      axis)


def _base_and_source(direction: str, batch: PairBatch):
    if direction == "denoise":
        return batch.corrupted, batch.clean
    return batch.clean, batch.corrupted


def _patch_batch(model, batch: PairBatch, kind: str, point: str, axis: str, ungroup: bool,
                 direction: str, advance=None):
    """[P, *unit shape] patched metrics, and the clean and corrupted metrics [P].
    advance(n) is told as n more patches are done."""
    advance = advance or (lambda n: None)
    n_layer = model.info.n_layer
    size, length = batch.size, batch.n_tokens
    base_ids, source_ids = _base_and_source(direction, batch)
    # the keys and values of the unchanged prefix, for patched runs that start after it
    capture = Interventions(capture=[point, "resid_pre", "rot_k", "v"], ungroup_kv=ungroup)
    both = torch.cat([base_ids, source_ids])
    metrics = metric_of(model, run_with_hooks(model.network, both, capture), batch.twice(), kind)
    m_base, m_source = metrics[:size], metrics[size:]
    m_clean, m_corr = (m_source, m_base) if direction == "denoise" else (m_base, m_source)
    shape = _unit_shape(model, axis, length)
    n_units = math.prod(shape)
    device = base_ids.device
    values = torch.empty(size, n_layer, n_units, device=device)
    prefix = _unchanged_prefix(model, batch)
    # Every patch that changes something, as (layer, pair, unit) rows in layer order; a
    # patch that puts back the value already there leaves the base metric.
    pending = []  # per layer: (pairs, units, masks, sources)
    for layer in range(n_layer):
        activation = capture.captured[(point, layer)]
        base_act, source_act = activation[:size], activation[size:]
        pair_of = torch.arange(size, device=device).repeat_interleave(n_units)
        unit_of = torch.arange(n_units, device=device).repeat(size)
        mask = _unit_masks(model, axis, base_act.shape)[unit_of]
        changed = ((source_act[pair_of] != base_act[pair_of]) & mask).flatten(1).any(1)
        changed &= _suffix(point, mask, prefix).flatten(1).any(1)  # the prefix is unchanged
        values[pair_of[~changed], layer, unit_of[~changed]] = m_base[pair_of[~changed]]
        pending.append((pair_of[changed], unit_of[changed], mask[changed],
                        source_act[pair_of[changed]]))
    rows = [(layer, i) for layer, (pairs, _, _, _) in enumerate(pending)
            for i in range(len(pairs))]
    advance(size * n_layer * n_units - len(rows))  # the patches that change nothing
    for chunk in _chunks(len(rows), rows_per_batch(model, length)):
        _staggered_run(model, batch, kind, point, ungroup, capture, pending,
                       [rows[i] for i in chunk.tolist()], values, prefix)
        advance(len(chunk))
    return (values.view(size, n_layer, *shape).double().cpu().numpy(),
            m_clean.double().cpu().numpy(), m_corr.double().cpu().numpy())


def _unchanged_prefix(model, batch: PairBatch) -> int:
    """Positions before the first token where any pair's prompts differ (and before every
    metric position): in a causal model nothing there changes in either run, so patched runs
    compute only the positions after it, reading the prefix's keys and values from the base
    run. 0 for a bidirectional model."""
    if not model.info.causal:
        return 0
    return min(min(pair.first_difference, pair.position) for pair in batch.pairs)


_STREAMS = ("resid_pre", "attn_in", "attn_out", "resid_mid", "mlp_in", "mlp_out", "resid_post")


def _suffix(point: str, value: torch.Tensor, prefix: int,
            count: int | None = None) -> torch.Tensor:
    """A point's value, source or mask [R, ...] from position `prefix` on (`count` positions,
    default all the rest; positions are dimension 1 of a stream, 2 of a head's q, k, v, z or
    pattern rows; a mask that spans every position with size 1 there is left whole)."""
    dim = 1 if point in _STREAMS else 2
    if value.shape[dim] == 1:
        return value
    return value.narrow(dim, prefix, value.shape[dim] - prefix if count is None else count)


def _staggered_run(model, batch: PairBatch, kind: str, point: str, ungroup: bool, capture,
                   pending, rows, values, prefix: int = 0) -> None:
    """Run patched copies of several layers as one batch that grows as it climbs: at layer
    l the copies patched at l join, started from the base run's stream entering l, beside
    those patched below it; each layer runs once for all of them (few, large matrix
    products instead of a pass per layer's patches). Only positions from `prefix` on are
    computed: the prefix's keys and values come from the base run. The last layer computes
    only the row the metric reads, when it can (_read_row)."""
    net = model.network
    size, length = batch.size, batch.n_tokens
    last = model.info.n_layer - 1
    bias = causal_rows_bias(prefix, length, device=net.device) if net.config.causal else None
    read = _read_row(model, batch, point, prefix)
    h = None
    pairs_in, units_in, layers_in = [], [], []
    first = rows[0][0]
    for layer in range(first, last + 1):
        row_only = layer == last and read is not None
        joining = [i for l, i in rows if l == layer]
        hooks = None
        if joining:
            pairs, units, masks, sources = pending[layer]
            index = torch.tensor(joining, device=pairs.device)
            new_pairs = pairs[index]
            stream = capture.captured[("resid_pre", layer)][:size][new_pairs, prefix:]
            old = 0 if h is None else h.shape[0]
            h = stream if h is None else torch.cat([h, stream])
            mask = _suffix(point, masks[index], prefix)
            source = _suffix(point, sources[index], prefix)
            if row_only:  # the patch at the read row alone, as the layer computes it
                mask, source = _suffix(point, mask, read, 1), _suffix(point, source, read, 1)
            if old:
                mask = torch.cat([mask.new_zeros(old, *mask.shape[1:]), mask])
                source = torch.cat([source.new_zeros(old, *source.shape[1:]), source])
            hooks = Interventions(ungroup_kv=ungroup).replace(point, layer, source, mask)
            pairs_in.append(new_pairs)
            units_in.append(units[index])
            layers_in.append(torch.full((len(joining),), layer, device=pairs.device))
        past = None
        if prefix:
            running = torch.cat(pairs_in)
            past = tuple(capture.captured[(name, layer)][:size][running, :, :prefix]
                         for name in ("rot_k", "v"))
        if row_only:
            h = _read_row_of_layer(net, h, layer, read, prefix, past, hooks)
        else:
            h, _ = net.run_layers(h, layer, layer + 1, bias, hooks=hooks, offset=prefix,
                                  past_kv=None if past is None else {layer: past})
    pairs, units, layers = torch.cat(pairs_in), torch.cat(units_in), torch.cat(layers_in)
    rows_batch = batch.rows(pairs)
    # h holds positions prefix.. of the text, or the read position alone
    rows_batch.positions = rows_batch.positions - (prefix + read if read is not None else prefix)
    values[pairs, layers, units] = metric_of(model, h, rows_batch, kind)


# points whose patch at a layer changes none of the keys or values that layer computes
_AFTER_KEYS = ("z", "attn_out", "resid_mid", "mlp_in", "mlp_out", "resid_post")


def _read_row(model, batch: PairBatch, point: str, prefix: int) -> int | None:
    """The one position every pair's metric reads, counted from `prefix`, when the last layer
    may compute that row alone (nothing else of it reaches the metric): a causal model, one
    read position for the batch, and a patched point that changes no key or value of the
    rows before it. Else None."""
    if not model.network.config.causal or point not in _AFTER_KEYS:
        return None
    positions = batch.positions
    if not bool((positions == positions[0]).all()):
        return None
    return int(positions[0]) - prefix


def _read_row_of_layer(net, h, layer: int, read: int, prefix: int, past, hooks):
    """Layer `layer` at the read row alone -> [R, 1, d]. The keys and values of the rows
    before it (h holds positions prefix..) are computed from h and read as its past, after
    the prefix's (past: those of positions 0..prefix-1, or None)."""
    kv = past
    if read:
        before = net.keys_and_values(h[:, :read], layer, offset=prefix)
        kv = before if kv is None else tuple(torch.cat(two, dim=2) for two in zip(kv, before))
    row, _ = net.run_layers(h[:, read:read + 1], layer, layer + 1, None, hooks=hooks,
                            offset=prefix + read, past_kv=None if kv is None else {layer: kv})
    return row


# --- attribution patching -------------------------------------------------------------------
