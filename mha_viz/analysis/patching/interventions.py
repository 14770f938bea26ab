"""An intervention as data: a set of entries (component, layer, head or position), each with
what replaces it, applied together in one run of each prompt, and the metric read from it
(docs/analyses.md, "Interventions a researcher composes").

    from mha_viz.analysis.patching import Intervention, run_with_interventions
    heads = [Intervention("z", 9, 9, value="mean"), Intervention("z", 10, 0, value="mean")]
    r = run_with_interventions(model, pairs, heads, "logit_diff", reference=abc_prompts)
    r.values, r.normalized, r.mean, r.std      # per pair, then over pairs

What replaces an entry (its ``value``):
- "other": the activation of the pair's other prompt (the corrupted one when the clean prompt
  runs): activation patching;
- "mean": the mean of the activation over the reference prompts of the same token count,
  position by position (mean ablation: Wang et al. 2023);
- "resample": the activation of one reference prompt of the same token count, drawn for each
  pair with ``seed`` (resample ablation: Chan et al. 2022, causal scrubbing);
- "zero": zeros;
- a number, or a tensor broadcastable to the point's value in the engine's layout (z and q
  [B, H, T, d_head], k and v [B, H, T, d_head] per query head (shared_k/v: [B, H_kv, ...]),
  pattern [B, H, T, T], streams [B, T, d_model]).

Every entry's source is read from unintervened runs (of the other prompt, of the reference
prompts), then all entries replace their slices of the run together. The same masks and the
engine's one mechanism (engine.interventions.Interventions.replace: where(mask, source,
value)) serve the sweeps of activation and path patching.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np
import torch

from ...core.errors import InputError
from ...engine.interventions import Interventions, run_with_hooks
from ...models.activation_cache import DEFAULT_POINTS, ActivationCache
from ..prompts import token_ids
from .common import (COMPONENTS, DEGENERATE, _pairs_per_chunk, component_name, metric_of,
                     prepare_pairs)

__all__ = ["Intervention", "InterventionRun", "REPLACEMENTS", "run_with_interventions",
           "heads_replaced"]

REPLACEMENTS = {
    "other": "the pair's other prompt's activation",
    "mean": "the mean over the reference prompts (of the same token count), position by position",
    "resample": "one reference prompt's activation, drawn for each pair",
    "zero": "zeros",
}
_HEAD_AXES = ("head", "kv_head", "head_position")


@dataclass(frozen=True)
class Intervention:
    """One entry: a component (any name patching accepts: z, q, k, v, pattern, resid_pre,
    attn_out, mlp_out, shared_k, ...) at a layer, for one head (None: every head of the
    layer; for shared_k/v a key/value head) and one position (None: every position), and
    what replaces it (REPLACEMENTS, a number or a tensor)."""
    component: str
    layer: int
    head: int | None = None
    position: int | None = None
    value: object = "other"


def heads_replaced(heads, value="mean", component: str = "z") -> list[Intervention]:
    """Entries replacing each (layer, head) of heads (pairs, or names "L9.H9") by value."""
    from ..heads import parse_head_name

    out = []
    for head in heads:
        layer, index = parse_head_name(head) if isinstance(head, str) else head
        out.append(Intervention(component, int(layer), int(index), None, value))
    return out


@dataclass
class InterventionRun:
    """The metric of each pair's run with every entry applied, beside its unintervened clean
    and corrupted metric. normalized: (value - corrupted) / (clean - corrupted) per pair (NaN
    where the two are equal); mean, std, ci95: of the normalized values over pairs."""
    values: np.ndarray  # [P]
    clean: np.ndarray  # [P]
    corrupted: np.ndarray  # [P]
    normalized: np.ndarray  # [P]
    run: str  # which prompt of each pair ran: "clean" | "corrupted"
    metric: str
    caches: list | None = None  # one ActivationCache per pair, when asked
    notes: list[str] = field(default_factory=list)

    @property
    def n_pairs(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return _mean(self.normalized)

    @property
    def std(self) -> float:
        return _spread(self.normalized)[0]

    @property
    def ci95(self) -> tuple[float, float]:
        return _spread(self.normalized)[1]


def _mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if len(finite) else float("nan")


def _spread(values: np.ndarray) -> tuple[float, tuple[float, float]]:
    """Standard deviation (ddof 1) and the t interval of the mean, over finite values."""
    from scipy import stats

    finite = values[np.isfinite(values)]
    mean = _mean(values)
    if len(finite) < 2:
        return 0.0, (mean, mean)
    std = float(finite.std(ddof=1))
    half = float(stats.t.ppf(0.975, len(finite) - 1)) * std / math.sqrt(len(finite))
    return std, (mean - half, mean + half)


# --- checking and compiling entries ----------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    point: str  # the engine's point
    axis: str
    ungroup: bool
    layer: int
    head: int | None
    position: int | None
    value: object


def _checked(model, entries) -> list[_Entry]:
    if isinstance(entries, Intervention):
        entries = [entries]
    entries = list(entries)
    if not entries:
        raise InputError("give at least one Intervention")
    info = model.info
    out = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Intervention):
            raise InputError(f"entry {index} is a {type(entry).__name__}, not an Intervention")
        name = component_name(entry.component)
        point, axis, ungroup = COMPONENTS[name]
        layer = int(entry.layer)
        if not 0 <= layer < info.n_layer:
            raise InputError(f"entry {index}: layer {entry.layer} is not a layer of this model "
                             f"(0-{info.n_layer - 1})")
        heads = info.n_kv_head if axis == "kv_head" else info.n_head
        if entry.head is not None and axis not in _HEAD_AXES:
            raise InputError(f"entry {index}: '{entry.component}' is a layer's vector, not a "
                             f"head's: give no head")
        if entry.head is not None and not 0 <= int(entry.head) < heads:
            raise InputError(f"entry {index}: head {entry.head} is not one of layer {layer}'s "
                             f"{heads} {'key/value ' if axis == 'kv_head' else ''}heads")
        value = entry.value
        if isinstance(value, str) and value not in REPLACEMENTS:
            raise InputError(f"entry {index}: value must be one of {', '.join(REPLACEMENTS)}, a "
                             f"number or a tensor, got {value!r}")
        if not isinstance(value, str):
            try:
                value = torch.as_tensor(np.asarray(value, dtype=np.float32))
            except (TypeError, ValueError):
                raise InputError(f"entry {index}: value must be one of "
                                 f"{', '.join(REPLACEMENTS)}, a number or a tensor") from None
        out.append(_Entry(point, axis, ungroup, layer,
                          None if entry.head is None else int(entry.head),
                          None if entry.position is None else int(entry.position), value))
    if len({e.ungroup for e in out if e.point in ("k", "v")}) > 1:
        raise InputError("the set mixes a query head's k/v with a key/value head's shared_k/v: "
                         "one run reads keys one way; split them into two sets")
    return out


def _entry_mask(entry: _Entry, shape: torch.Size, device=None) -> torch.Tensor | None:
    """The slice an entry replaces, as a boolean mask broadcastable to the point's value
    [B, ...] (heads are its dimension 1; positions dimension 1 of a stream, 2 of a head's q,
    k, v, z or pattern rows, as in patching's unit masks); None: all of it."""
    head_point = entry.axis in _HEAD_AXES
    n_tokens = shape[2] if head_point else shape[1]
    position = entry.position
    if position is not None:
        position = position + n_tokens if position < 0 else position
        if not 0 <= position < n_tokens:
            raise InputError(f"position {entry.position} is outside the prompt's {n_tokens} "
                             f"tokens")
    if position is None and (entry.head is None or not head_point):
        return None
    everywhere = slice(None)
    rows = everywhere if position is None else position
    if head_point:
        mask = torch.zeros(shape[1], n_tokens, 1, dtype=torch.bool, device=device)
        mask[everywhere if entry.head is None else entry.head, rows] = True
    else:
        mask = torch.zeros(n_tokens, 1, dtype=torch.bool, device=device)
        mask[rows] = True
    return mask


# --- the run ---------------------------------------------------------------------------------


def _reference_ids(model, reference) -> dict[int, torch.Tensor]:
    """Reference prompts (texts or token ids) grouped by token count: length -> [R, T]."""
    if reference is None:
        return {}
    items = [reference] if isinstance(reference, str) or token_ids(reference) else list(
        reference)
    if not items:
        raise InputError("the reference set is empty")
    by_length: dict[int, list[list[int]]] = {}
    for index, item in enumerate(items):
        ids = token_ids(item)
        if ids is None and not isinstance(item, str):
            raise InputError(f"reference prompt {index} is a {type(item).__name__}: give texts "
                             f"or token ids")
        ids = model.encode(item).input_ids if ids is None else model._check_ids(list(ids))
        by_length.setdefault(len(ids), []).append(list(ids))
    return {n: torch.tensor(rows, dtype=torch.long, device=model.network.device)
            for n, rows in by_length.items()}


def _sources_of(model, entries, ids: torch.Tensor, ungroup: bool) -> dict:
    """(point, layer) -> the unintervened activations of ids [R, T] at every entry's point."""
    hooks = Interventions(capture=sorted({(e.point, e.layer) for e in entries}),
                          ungroup_kv=ungroup)
    run_with_hooks(model.network, ids, hooks)
    return hooks.captured


def run_with_interventions(model, prompts, interventions, metric=None, corrupted=None,
                           run: str = "clean", reference=None, seed: int = 0,
                           cache: bool | list[str] = False) -> InterventionRun:
    """Each pair's ``run`` prompt ("clean" or "corrupted") with every entry of
    ``interventions`` applied together, and the metric of that run (docstring of this module).

    prompts: pairs in any spelling activation_patching reads (with ``corrupted`` for two
    texts or two lists); metric: any metric spelling (a kind, a Metric, a function, a
    TargetMetric). reference: the prompts "mean" and "resample" read (texts or token ids);
    by default the other prompt of every pair (the corrupted prompts when the clean ones run).
    cache: True (run_with_cache's default points) or a list of point names: each pair's
    ActivationCache of the intervened run, in result.caches."""
    if run not in ("clean", "corrupted"):
        raise InputError(f"run must be 'clean' or 'corrupted', got {run!r}")
    if corrupted is None and isinstance(prompts, tuple) and len(prompts) == 2 and (
            all(isinstance(p, str) for p in prompts)
            or all(token_ids(p) is not None for p in prompts)):
        prompts, corrupted = prompts  # one pair, as (clean, corrupted)
    prepared = prepare_pairs(model, prompts, corrupted, metric)
    entries = _checked(model, interventions)
    ungroup = any(e.ungroup for e in entries)
    wants = {e.value for e in entries if isinstance(e.value, str)}
    if reference is None and wants & {"mean", "resample"}:
        reference = [p.corrupted_ids if run == "clean" else p.clean_ids for p in prepared.pairs]
    references = _reference_ids(model, reference) if wants & {"mean", "resample"} else {}
    names = [] if cache is False else list(DEFAULT_POINTS if cache is True else cache)
    names = [n for n in names if n != "scale"]
    chunk = _pairs_per_chunk(model, max(p.n_tokens for p in prepared.pairs),
                             {e.point: 1 for e in entries})
    values, clean_m, corr_m, caches = {}, {}, {}, {}
    reference_sources: dict[int, dict] = {}
    with torch.inference_mode():
        for batch in prepared.batches(chunk):
            size, length = batch.size, batch.n_tokens
            base_ids = batch.clean if run == "clean" else batch.corrupted
            other_ids = batch.corrupted if run == "clean" else batch.clean
            # the unintervened runs of both prompts: the metrics, and "other"'s sources
            both = Interventions(capture=sorted({(e.point, e.layer) for e in entries}),
                                 ungroup_kv=ungroup)
            metrics = metric_of(model, run_with_hooks(model.network, torch.cat(
                [base_ids, other_ids]), both), batch.twice(), prepared.metric)
            m_base, m_other = metrics[:size], metrics[size:]
            other = {key: value[size:] for key, value in both.captured.items()}
            if wants & {"mean", "resample"}:
                if length not in references:
                    raise InputError(
                        f"no reference prompt has {length} tokens, as pair "
                        f"{batch.pairs[0].index} has: mean and resample ablation replace a "
                        f"position by the same position of prompts of its length (reference "
                        f"lengths: {', '.join(map(str, sorted(references)))})")
                if length not in reference_sources:
                    reference_sources[length] = _sources_of(model, entries, references[length],
                                                            ungroup)
            hooks = Interventions(capture=names, ungroup_kv=ungroup)
            for entry in entries:
                value = other[(entry.point, entry.layer)]
                source = _source(entry, other, reference_sources.get(length), batch, seed)
                hooks.replace(entry.point, entry.layer, source,
                              _entry_mask(entry, value.shape, value.device))
            final = run_with_hooks(model.network, base_ids, hooks)
            intervened = metric_of(model, final, batch, prepared.metric)
            m_clean, m_corr = (m_base, m_other) if run == "clean" else (m_other, m_base)
            for row, pair in enumerate(batch.pairs):
                values[pair.index] = float(intervened[row])
                clean_m[pair.index], corr_m[pair.index] = float(m_clean[row]), float(m_corr[row])
                if names:
                    tokens = model.display_tokens(list(pair.clean_ids if run == "clean"
                                                       else pair.corrupted_ids))
                    caches[pair.index] = ActivationCache.from_captured(hooks.captured, tokens,
                                                                       row)
    order = sorted(values)
    values_a = np.array([values[i] for i in order])
    clean_a, corr_a = np.array([clean_m[i] for i in order]), np.array([corr_m[i] for i in order])
    gap = clean_a - corr_a
    defined = np.abs(gap) >= DEGENERATE
    notes = [] if defined.all() else [
        "pairs whose clean and corrupted metric are equal have no normalized value (NaN)"]
    normalized = np.where(defined, (values_a - corr_a) / np.where(defined, gap, 1.0), np.nan)
    return InterventionRun(values_a, clean_a, corr_a, normalized, run, prepared.description,
                           [caches[i] for i in order] if names else None, notes)


def _source(entry: _Entry, other: dict, reference: dict | None, batch, seed: int):
    """What replaces an entry in each row of the batch, [B or 1, ...]."""
    key = (entry.point, entry.layer)
    value = entry.value
    if isinstance(value, torch.Tensor):
        return value.to(other[key].device, other[key].dtype)
    if value == "other":
        return other[key]
    if value == "zero":
        return torch.zeros_like(other[key][:1])
    if value == "mean":
        return reference[key].mean(0, keepdim=True)
    # resample: one reference prompt per pair, drawn from the pair's own seeded stream (the
    # same draw however the pairs are batched)
    n = reference[key].shape[0]
    picks = [random.Random(f"{seed}:{pair.index}").randrange(n) for pair in batch.pairs]
    return reference[key][torch.tensor(picks, device=reference[key].device)]
