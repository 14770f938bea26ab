"""Path patching (Wang et al. 2023): a sender head's effect through chosen receivers only."""

from __future__ import annotations

import torch

from ...core.errors import InputError
from ...engine.interventions import Interventions, run_with_hooks
from .activation import _base_and_source
from .common import (PairBatch, PatchingResult, _check_direction, _chunks, _over_batches,
                     _pairs_per_chunk, _summarise, _unit_masks, metric_of, prepare_pairs,
                     rows_per_batch)


def _check_receivers(model, receivers) -> list[tuple[int, int, str]] | None:
    if isinstance(receivers, str):
        if receivers != "logits":
            raise InputError("receivers must be 'logits' or a list of (layer, head, 'q'|'k'|'v')")
        return None
    checked = []
    for item in receivers:
        try:
            layer, head, part = item
            layer, head = int(layer), int(head)
        except (TypeError, ValueError):
            raise InputError(f"a receiver is (layer, head, 'q'|'k'|'v'), got {item!r}") from None
        if part not in ("q", "k", "v"):
            raise InputError(f"a receiver reads 'q', 'k' or 'v', got {part!r}")
        if not (0 <= layer < model.info.n_layer and 0 <= head < model.info.n_head):
            raise InputError(f"receiver L{layer}.H{head} is not a head of this model")
        checked.append((layer, head, part))
    if not checked:
        raise InputError("give at least one receiver head")
    return sorted(set(checked))


def path_patching(model, clean, corrupted=None, metric=None, receivers="logits",
                  direction: str = "noise", progress=None) -> PatchingResult:
    """Path patching (Wang et al. 2023): for every sender head, its output takes the other
    prompt's value while every other attention head is frozen at the base run's output
    (MLPs and norms recompute). receivers="logits": the metric of that run (the direct path
    and the paths through MLPs). receivers = [(layer, head, "q"|"k"|"v"), ...]: those inputs
    are read from that run and patched into a fresh base run, whose metric is the value.
    direction "noise" (Wang et al.'s): the clean run, senders corrupted; "denoise": the
    reverse. -> values [L, H], normalized as activation patching's."""
    _check_direction(direction)
    targets = _check_receivers(model, receivers)
    prepared = prepare_pairs(model, clean, corrupted, metric)
    n_layer = model.info.n_layer
    chunk = _pairs_per_chunk(model, max(p.n_tokens for p in prepared.pairs),
                             {"z": 2, "resid_pre": 1, "attn_out": 1})
    with torch.inference_mode():
        per_pair, clean_m, corrupted_m = _over_batches(
            prepared, chunk, n_layer, progress,
            lambda batch: _path_batch(model, batch, prepared.metric, targets, direction))
    described = "logits" if targets is None else ", ".join(
        f"L{l}.H{h}.{part}" for l, h, part in targets)
    return _summarise(prepared, "head", direction, "path", per_pair, clean_m, corrupted_m,
                      "head", receivers=described)


def _path_batch(model, batch: PairBatch, kind: str, targets, direction: str):
    net, info = model.network, model.info
    n_layer, n_head = info.n_layer, info.n_head
    size = batch.size
    base_ids, source_ids = _base_and_source(direction, batch)
    base = Interventions(capture=["z", "resid_pre", "attn_out"])
    m_base = metric_of(model, run_with_hooks(net, base_ids, base), batch, kind)
    source = Interventions(capture=["z"])
    m_source = metric_of(model, run_with_hooks(net, source_ids, source), batch, kind)
    m_clean, m_corr = (m_source, m_base) if direction == "denoise" else (m_base, m_source)
    values = m_base[:, None, None].repeat(1, n_layer, n_head)
    # senders run up to the last receiver's layer (the logits: every layer)
    last = n_layer if targets is None else max(l for l, _, _ in targets)
    stop = n_layer if targets is None else last + 1
    first_receiver = None if targets is None else min(l for l, _, _ in targets)
    head_masks = _unit_masks(model, "head", base.captured[("z", 0)].shape)  # [H, H, 1, 1]
    step = rows_per_batch(model, batch.n_tokens)
    for layer in range(last):
        pair_of = torch.arange(size, device=base_ids.device).repeat_interleave(n_head)
        head_of = torch.arange(n_head, device=base_ids.device).repeat(size)
        for rows in _chunks(len(pair_of), step, pair_of.device):
            pairs, heads = pair_of[rows], head_of[rows]
            sender = Interventions(capture=[(p, l) for l, _, p in targets or []],
                                   ungroup_kv=True)
            sender.replace("z", layer, source.captured[("z", layer)][pairs], head_masks[heads])
            for later in range(layer + 1, stop):  # every other head frozen at the base run
                sender.replace("attn_out", later, base.captured[("attn_out", later)][pairs])
            stream = base.captured[("resid_pre", layer)][pairs]
            final = run_with_hooks(net, base_ids[pairs], sender, layer, stream, stop)
            if targets is not None:  # the receivers read what the senders' paths changed
                receiver = Interventions(ungroup_kv=True)
                for l, h, part in targets:
                    if l > layer:  # a sender at or above its receiver's layer cannot reach it
                        receiver.replace(part, l, sender.captured[(part, l)], head_masks[h])
                start = base.captured[("resid_pre", first_receiver)][pairs]
                final = run_with_hooks(net, base_ids[pairs], receiver, first_receiver, start)
            values[pairs, layer, heads] = metric_of(model, final, batch.rows(pairs), kind)
    return (values.double().cpu().numpy(), m_clean.double().cpu().numpy(),
            m_corr.double().cpu().numpy())
