"""Causal interventions between a clean and a corrupted prompt: activation patching, path
patching and attribution patching (docs/analyses.md, "Causal interventions"; Meng et al.
2022, Wang et al. 2023, Heimersheim & Nanda 2024, Nanda 2023, Syed et al. 2023).

    from mha_viz.analysis import activation_patching
    r = activation_patching(model, clean, corrupted, TargetMetric(-1, " Mary", " John"))
    r.values        # [L, H]: the metric with each head's output patched
    r.normalized    # (values - corrupted) / (clean - corrupted): 0 corrupted, 1 clean

How it is fast, exactly: patching a component of layer l changes nothing below l, so each
patched run starts from the residual stream entering layer l, cached from the unpatched run,
and the patched copies of one layer (every head, every position, every pair of one token
length) run as one batch; the metric reads the final norm and the unembedding at its one
position only. A patch that puts back the value already there (a position before the first
token where the prompts differ, in a causal model) changes nothing and is not run.

Every intervention goes through the engine's named points (mha_viz.interventions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn import functional as F

from ..errors import InputError
from ..attention import causal_rows_bias
from ..interventions import Interventions, point_width, run_with_hooks
from ..prompts import EncodedPair, as_pairs, encode_pairs

__all__ = ["COMPONENTS", "DIRECTIONS", "PatchingResult", "activation_patching",
           "attribution_patching", "path_patching", "prepare_pairs", "strongest_components"]

# component -> (engine point, what one patch covers, key/value per query head)
COMPONENTS = {
    "head": ("z", "head", False),  # a head's output before W_O, every position
    "head_position": ("z", "head_position", False),
    "resid_pre": ("resid_pre", "position", False),
    "attn_out": ("attn_out", "position", False),
    "mlp_out": ("mlp_out", "position", False),
    "q": ("q", "head", False),
    "k": ("k", "head", True),  # the key as this query head reads it; its peers keep theirs
    "v": ("v", "head", True),
    "pattern": ("pattern", "head", False),
    "shared_k": ("k", "kv_head", False),  # a key/value head's key, for its whole group
    "shared_v": ("v", "kv_head", False),
}
COMPONENT_HELP = {
    "head": "each head's output (before W_O) at every position",
    "head_position": "each head's output at one position",
    "resid_pre": "the residual stream entering each layer, at one position",
    "attn_out": "each attention layer's output, at one position",
    "mlp_out": "each MLP's output, at one position",
    "q": "each head's queries",
    "k": "the keys each head reads (its group's peers unchanged)",
    "v": "the values each head reads (its group's peers unchanged)",
    "pattern": "each head's attention pattern",
    "shared_k": "each key/value head's keys (every query head of its group)",
    "shared_v": "each key/value head's values (every query head of its group)",
}
DIRECTIONS = {
    "denoise": "denoising: the corrupted run with one clean activation (what suffices)",
    "noise": "noising: the clean run with one corrupted activation (what is necessary)",
}
MAX_FORWARDS = 250_000  # patched runs of one call, in whole-forward equivalents
CAPTURE_BYTES = 256 << 20  # what one chunk of pairs may hold of cached activations
BATCH_BYTES = 192 << 20  # what one batch of patched copies may take in flight
MAX_BATCH = 512
DEGENERATE = 1e-6  # |clean - corrupted| below this: the normalised effect is undefined


@dataclass
class PatchingResult:
    """Patched metric values for every component, with what they are normalised against.

    values: the mean over pairs of the patched metric, shaped by the component: [L, H]
    (heads), [L, H, T] (head_position), [L, T] (positions), [L, H_kv] (shared_k/v).
    normalized: the mean over pairs of (value - corrupted) / (clean - corrupted), each pair
    normalised by its own clean and corrupted metric: 0 is the corrupted run's metric, 1 the
    clean run's, in both directions. std and ci95_low/high: their spread over pairs."""
    component: str
    direction: str
    method: str  # "exact" | "attribution" | "path"
    metric: str  # in words
    values: np.ndarray
    normalized: np.ndarray
    clean: float  # mean over pairs
    corrupted: float
    per_pair: np.ndarray  # [P, ...]
    per_pair_normalized: np.ndarray  # [P, ...]
    clean_per_pair: np.ndarray  # [P]
    corrupted_per_pair: np.ndarray  # [P]
    std: np.ndarray  # of the normalised values over pairs (0 for one pair)
    ci95_low: np.ndarray
    ci95_high: np.ndarray
    row_labels: list[str]
    col_labels: list[str]
    kv_heads: tuple[int, ...] = ()
    receivers: str = ""  # path patching: "logits" or the receivers in words
    notes: list[str] = field(default_factory=list)
    exact: "PatchingResult | None" = None  # attribution patching: the exact result compared
    error: dict | None = None  # attribution vs exact: r, max_abs, worst components

    @property
    def n_pairs(self) -> int:
        return int(self.per_pair.shape[0])

    @property
    def base(self) -> float:
        """The normalised metric of the run being patched: 0 (corrupted) when denoising, 1
        (clean) when noising and in path patching's clean run."""
        return 0.0 if self.direction == "denoise" else 1.0

    @property
    def effect(self) -> np.ndarray:
        """What each patch changed, normalised: normalized − base. 0 = the patch changed
        nothing; +1 moved the metric the whole way from corrupted to clean, −1 the reverse."""
        return self.normalized - self.base

    @property
    def per_pair_effect(self) -> np.ndarray:
        return self.per_pair_normalized - self.base

    def to_npz_dict(self) -> dict:
        out = {k: getattr(self, k) for k in (
            "values", "normalized", "per_pair", "per_pair_normalized", "clean_per_pair",
            "corrupted_per_pair", "std", "ci95_low", "ci95_high")}
        out.update(component=np.asarray(self.component), direction=np.asarray(self.direction),
                   method=np.asarray(self.method), metric=np.asarray(self.metric),
                   row_labels=np.asarray(self.row_labels), col_labels=np.asarray(self.col_labels),
                   clean=np.asarray(self.clean), corrupted=np.asarray(self.corrupted))
        return out


def strongest_components(result: PatchingResult, k: int = 8) -> list[tuple[str, float, float]]:
    """The k components of a [rows, columns] result with the largest |effect| (the normalised
    change the patch made, PatchingResult.effect), as (name, effect, patched metric); a head
    is named "L3.H1", a position "L3 @ 5"."""
    normalized = np.asarray(result.effect, dtype=float)
    if normalized.ndim != 2:
        raise InputError("strongest_components takes a [rows, columns] result")
    order = np.argsort(np.nan_to_num(np.abs(normalized), nan=-1.0).ravel())[::-1][:int(k)]
    found = []
    for flat in order:
        r, c = np.unravel_index(flat, normalized.shape)
        name = (f"{result.row_labels[r]}.{result.col_labels[c]}" if result.col_labels[c][:1] in "HK"
                else f"{result.row_labels[r]} @ {c}")
        found.append((name, float(normalized[r, c]), float(result.values[r, c])))
    return found


# --- pairs as batches -----------------------------------------------------------------------


@dataclass
class PairBatch:
    """Pairs of one token length, as tensors: what every sweep runs on."""
    pairs: list[EncodedPair]
    clean: torch.Tensor  # [P, T]
    corrupted: torch.Tensor  # [P, T]
    positions: torch.Tensor  # [P]
    targets: torch.Tensor  # [P]
    contrasts: torch.Tensor | None  # [P]

    @property
    def size(self) -> int:
        return len(self.pairs)

    @property
    def n_tokens(self) -> int:
        return int(self.clean.shape[1])

    def twice(self) -> "PairBatch":
        """The metric spec of two runs of every pair stacked (base rows, then source rows)."""
        return PairBatch(self.pairs * 2, torch.cat([self.clean, self.clean]),
                         torch.cat([self.corrupted, self.corrupted]), self.positions.repeat(2),
                         self.targets.repeat(2),
                         None if self.contrasts is None else self.contrasts.repeat(2))

    def rows(self, index: torch.Tensor) -> "PairBatch":
        return PairBatch([self.pairs[i] for i in index.tolist()], self.clean[index],
                         self.corrupted[index], self.positions[index], self.targets[index],
                         None if self.contrasts is None else self.contrasts[index])


@dataclass
class PreparedPairs:
    model: object
    pairs: list[EncodedPair]
    kind: str  # metric kind
    description: str
    tokens: list[str]  # the first pair's clean tokens (position labels)

    def batches(self, chunk_pairs: int):
        """PairBatches of equal token length, at most chunk_pairs pairs each."""
        by_length: dict[int, list[EncodedPair]] = {}
        for pair in self.pairs:
            by_length.setdefault(pair.n_tokens, []).append(pair)
        mask_id = None if self.model.info.causal else self.model.tokenizer.mask_token_id
        for group in by_length.values():
            for start in range(0, len(group), chunk_pairs):
                yield _batch_of(group[start:start + chunk_pairs], mask_id)


def _batch_of(pairs: list[EncodedPair], mask_id: int | None) -> PairBatch:
    clean = torch.tensor([p.clean_ids for p in pairs], dtype=torch.long)
    corrupted = torch.tensor([p.corrupted_ids for p in pairs], dtype=torch.long)
    positions = torch.tensor([p.position for p in pairs], dtype=torch.long)
    if mask_id is not None:  # a masked-LM metric reads a masked position
        rows = torch.arange(len(pairs))
        clean, corrupted = clean.clone(), corrupted.clone()
        clean[rows, positions] = mask_id
        corrupted[rows, positions] = mask_id
    contrasts = None if pairs[0].contrast is None else torch.tensor(
        [p.contrast for p in pairs], dtype=torch.long)
    return PairBatch(pairs, clean, corrupted, positions,
                     torch.tensor([p.target for p in pairs], dtype=torch.long), contrasts)


def prepare_pairs(model, clean, corrupted=None, metric=None) -> PreparedPairs:
    """Check and tokenize the pairs: two texts with a TargetMetric, or PromptPair(s) whose
    own target/contrast/position are used (metric then gives only the kind, as a
    TargetMetric or a string)."""
    from ..model import METRIC_KINDS, TargetMetric

    if not model.info.has_lm_head:
        raise InputError(f"'{model.info.name}' has no language-model head, so it has no metric "
                         f"to patch: load a causal model or a BERT with its masked-LM head")
    if isinstance(metric, TargetMetric):
        kind = metric.kind
        pairs = as_pairs(clean, corrupted, metric.target, metric.contrast, metric.position)
    else:
        kind = metric or "logit_diff"
        if isinstance(clean, str):
            raise InputError("two prompts need a TargetMetric (position, target, contrast)")
        pairs = as_pairs(clean, corrupted)
    if kind not in METRIC_KINDS:
        raise InputError(f"metric kind must be one of {', '.join(METRIC_KINDS)}, got {kind!r}")
    encoded = encode_pairs(model, pairs, needs_contrast=kind == "logit_diff")
    if not model.info.causal and model.tokenizer.mask_token_id is None:
        raise InputError("this masked-LM model has no [MASK] token to predict at")
    first = encoded[0]
    resolved = model.resolve_metric(TargetMetric(first.position, first.target, first.contrast,
                                                 kind), first.n_tokens)
    description = resolved.description if len(encoded) == 1 else (
        resolved.description.split(" at position")[0] + " at each pair's position"
        if len({(p.target, p.contrast) for p in encoded}) == 1 else
        {"logit_diff": "logit(target) − logit(contrast)", "logit": "logit(target)",
         "logprob": "log p(target)"}[kind] + " of each pair")
    return PreparedPairs(model, encoded, kind, description,
                         model.display_tokens(list(first.clean_ids)))


# --- the pieces every sweep uses ----------------------------------------------------------


def metric_of(model, final: torch.Tensor, batch: PairBatch, kind: str) -> torch.Tensor:
    """[B] the metric of each row from the final residual stream [B, T, d]: the final norm
    and the unembedding at the row's position only."""
    net = model.network
    rows = torch.arange(final.shape[0])
    hidden = net.finish(final[rows, batch.positions])  # [B, d]
    if kind == "logprob":
        return F.log_softmax(net.lm_logits(hidden), dim=-1)[rows, batch.targets]
    target = _token_logits(net, hidden, batch.targets)
    if kind == "logit":
        return target
    return target - _token_logits(net, hidden, batch.contrasts)


def _token_logits(net, hidden: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    if net.config.lm_head in ("tied", "separate"):
        return (hidden * net.unembedding()[ids]).sum(-1)
    return net.lm_logits(hidden).gather(1, ids[:, None])[:, 0]


def _pairs_per_chunk(model, n_tokens: int, points: dict) -> int:
    """Pairs whose two runs' cached activations fit CAPTURE_BYTES (points: name -> how many
    copies of it are held; keys and values counted per query head)."""
    info = model.info
    width = sum(point_width(info, name, n_tokens, ungroup_kv=True) * count
                for name, count in points.items())
    per_pair = 2 * 4 * info.n_layer * n_tokens * width
    return max(1, min(64, CAPTURE_BYTES // max(per_pair, 1)))


def rows_per_batch(model, n_tokens: int) -> int:
    """Patched copies run at once: their scores, MLP activations and streams in flight."""
    info, config = model.info, model.network.config
    width = info.n_head * n_tokens + 2 * config.d_ff + 6 * info.d_model
    return max(1, min(MAX_BATCH, BATCH_BYTES // (4 * n_tokens * width)))


def _chunks(n: int, size: int):
    for start in range(0, n, size):
        yield torch.arange(start, min(start + size, n))


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise InputError(f"direction must be 'denoise' or 'noise', got {direction!r}")


def _check_component(model, component: str) -> tuple[str, str, bool]:
    if component not in COMPONENTS:
        raise InputError(f"component must be one of {', '.join(COMPONENTS)}, got "
                         f"{component!r}")
    return COMPONENTS[component]


def _unit_shape(model, axis: str, n_tokens: int) -> tuple[int, ...]:
    """The shape of one pair's values at one layer: what the units of a component span."""
    info = model.info
    return {"head": (info.n_head,), "kv_head": (info.n_kv_head,),
            "head_position": (info.n_head, n_tokens), "position": (n_tokens,)}[axis]


def _unit_masks(model, axis: str, value_shape: torch.Size) -> torch.Tensor:
    """[U, ...] boolean masks, one per unit a patch covers, broadcastable to the point's value
    [B, *value_shape[1:]]: heads (or key/value heads) are its dimension 1; positions its
    dimension 1 (streams) or 2 (a head's rows)."""
    shape = _unit_shape(model, axis, value_shape[2 if axis == "head_position" else 1])
    units = math.prod(shape)
    rest = len(value_shape) - 1 - len(shape)
    return torch.eye(units, dtype=torch.bool).view(units, *shape, *([1] * rest))


def _labels(model, axis: str, tokens: list[str]) -> tuple[list[str], list[str]]:
    info = model.info
    rows = [f"L{layer}" for layer in range(info.n_layer)]
    if axis == "head":
        return rows, [f"H{h}" for h in range(info.n_head)]
    if axis == "kv_head":
        group = info.n_head // info.n_kv_head
        return rows, [f"KV{g} (H{g * group}–H{g * group + group - 1})" if group > 1 else
                      f"KV{g}" for g in range(info.n_kv_head)]
    if axis == "head_position":
        return [f"L{l}.H{h}" for l in range(info.n_layer) for h in range(info.n_head)], [
            f"{t}: {tok}" for t, tok in enumerate(tokens)]
    return rows, [f"{t}: {tok}" for t, tok in enumerate(tokens)]


def _summarise(prepared: PreparedPairs, component: str, direction: str, method: str,
               per_pair: np.ndarray, clean: np.ndarray, corrupted: np.ndarray, axis: str,
               receivers: str = "") -> PatchingResult:
    """Means, each pair normalised by its own clean and corrupted metric, and the spread."""
    from scipy import stats

    model = prepared.model
    gap = clean - corrupted
    notes = []
    degenerate = np.abs(gap) < DEGENERATE
    if degenerate.any():
        where = ", ".join(str(i) for i in np.flatnonzero(degenerate)[:8])
        notes.append(f"the clean and corrupted metric are equal (within {DEGENERATE:g}) for "
                     f"pair(s) {where}: their normalised effect is undefined and left out")
    shape = (-1,) + (1,) * (per_pair.ndim - 1)
    safe_gap = np.where(degenerate, np.nan, gap).reshape(shape)
    normalized = (per_pair - corrupted.reshape(shape)) / safe_gap
    counted = int((~degenerate).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_norm = (np.nanmean(normalized, axis=0) if counted else
                     np.full(per_pair.shape[1:], np.nan))
        if counted > 1:
            std = np.nanstd(normalized, axis=0, ddof=1)
            half = stats.t.ppf(0.975, counted - 1) * std / math.sqrt(counted)
        else:
            std = np.zeros(per_pair.shape[1:])
            half = np.zeros(per_pair.shape[1:])
    rows, cols = _labels(model, axis, prepared.tokens)
    if counted == 0:
        notes.append("no pair has a defined normalised effect: read the raw values")
    return PatchingResult(
        component=component, direction=direction, method=method,
        metric=prepared.description, values=per_pair.mean(0), normalized=mean_norm,
        clean=float(clean.mean()), corrupted=float(corrupted.mean()), per_pair=per_pair,
        per_pair_normalized=normalized, clean_per_pair=clean, corrupted_per_pair=corrupted,
        std=std, ci95_low=mean_norm - half, ci95_high=mean_norm + half, row_labels=rows,
        col_labels=cols, kv_heads=tuple(model.info.kv_heads), receivers=receivers,
        notes=notes)


def _over_batches(prepared: PreparedPairs, chunk: int, steps_per_pair: int, progress, work):
    """Run work(batch) -> (values [P, ...], clean [P], corrupted [P]) over every batch of
    pairs; -> the three, in the pairs' own order. progress(done, total) after each batch."""
    values, clean, corrupted = {}, {}, {}
    total, done = len(prepared.pairs) * steps_per_pair, 0
    for batch in prepared.batches(chunk):
        batch_values, batch_clean, batch_corrupted = work(batch)
        for row, pair in enumerate(batch.pairs):
            values[pair.index] = batch_values[row]
            clean[pair.index], corrupted[pair.index] = batch_clean[row], batch_corrupted[row]
        done += batch.size * steps_per_pair
        if progress is not None:
            progress(done, total)
    order = sorted(values)
    return (np.stack([values[i] for i in order]), np.array([clean[i] for i in order]),
            np.array([corrupted[i] for i in order]))


def _check_positions(prepared: PreparedPairs, axis: str) -> None:
    if axis in ("position", "head_position") and len(
            {p.n_tokens for p in prepared.pairs}) > 1:
        lengths = sorted({p.n_tokens for p in prepared.pairs})
        raise InputError(f"the pairs have {len(lengths)} different token counts "
                         f"({', '.join(map(str, lengths[:6]))}); a component at each position "
                         f"needs pairs of one length (patch 'head' instead, or group them)")


def _check_work(model, prepared: PreparedPairs, axis: str) -> None:
    info = model.info
    forwards = 0.0
    for pair in prepared.pairs:
        units = math.prod(_unit_shape(model, axis, pair.n_tokens))
        forwards += units * (info.n_layer + 1) / 2
    if forwards > MAX_FORWARDS:
        raise InputError(f"this run would take about {forwards:,.0f} forward passes, more than "
                         f"one call does ({MAX_FORWARDS:,}): use fewer pairs or a coarser "
                         f"component ('head' rather than 'head_position')")


# --- activation patching --------------------------------------------------------------------


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
            lambda batch: _patch_batch(model, batch, prepared.kind, point, axis, ungroup,
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
    values = torch.empty(size, n_layer, n_units)
    prefix = _unchanged_prefix(model, batch)
    # Every patch that changes something, as (layer, pair, unit) rows in layer order; a
    # patch that puts back the value already there leaves the base metric.
    pending = []  # per layer: (pairs, units, masks, sources)
    for layer in range(n_layer):
        activation = capture.captured[(point, layer)]
        base_act, source_act = activation[:size], activation[size:]
        pair_of = torch.arange(size).repeat_interleave(n_units)
        unit_of = torch.arange(n_units).repeat(size)
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
    return (values.view(size, n_layer, *shape).double().numpy(), m_clean.double().numpy(),
            m_corr.double().numpy())


def _unchanged_prefix(model, batch: PairBatch) -> int:
    """Positions before the first token where any pair's prompts differ (and before every
    metric position): in a causal model nothing there changes in either run, so patched runs
    compute only the positions after it, reading the prefix's keys and values from the base
    run. 0 for a bidirectional model."""
    if not model.info.causal:
        return 0
    return min(min(pair.first_difference, pair.position) for pair in batch.pairs)


_STREAMS = ("resid_pre", "attn_in", "attn_out", "resid_mid", "mlp_in", "mlp_out", "resid_post")


def _suffix(point: str, value: torch.Tensor, prefix: int) -> torch.Tensor:
    """A point's value, source or mask [R, ...] from position `prefix` on (positions are
    dimension 1 of a stream, 2 of a head's q, k, v, z or pattern rows; a mask that spans
    every position with size 1 there is left whole)."""
    dim = 1 if point in _STREAMS else 2
    return value if value.shape[dim] == 1 else value.narrow(dim, prefix,
                                                            value.shape[dim] - prefix)


def _staggered_run(model, batch: PairBatch, kind: str, point: str, ungroup: bool, capture,
                   pending, rows, values, prefix: int = 0) -> None:
    """Run patched copies of several layers as one batch that grows as it climbs: at layer
    l the copies patched at l join, started from the base run's stream entering l, beside
    those patched below it; each layer runs once for all of them (few, large matrix
    products instead of a pass per layer's patches). Only positions from `prefix` on are
    computed: the prefix's keys and values come from the base run."""
    net = model.network
    size, length = batch.size, batch.n_tokens
    bias = causal_rows_bias(prefix, length) if net.config.causal else None
    h = None
    pairs_in, units_in, layers_in = [], [], []
    first = rows[0][0]
    for layer in range(first, model.info.n_layer):
        joining = [i for l, i in rows if l == layer]
        hooks = None
        if joining:
            pairs, units, masks, sources = pending[layer]
            index = torch.tensor(joining)
            new_pairs = pairs[index]
            stream = capture.captured[("resid_pre", layer)][:size][new_pairs, prefix:]
            old = 0 if h is None else h.shape[0]
            h = stream if h is None else torch.cat([h, stream])
            mask = _suffix(point, masks[index], prefix)
            source = _suffix(point, sources[index], prefix)
            if old:
                mask = torch.cat([mask.new_zeros(old, *mask.shape[1:]), mask])
                source = torch.cat([source.new_zeros(old, *source.shape[1:]), source])
            hooks = Interventions(ungroup_kv=ungroup).replace(point, layer, source, mask)
            pairs_in.append(new_pairs)
            units_in.append(units[index])
            layers_in.append(torch.full((len(joining),), layer))
        past = None
        if prefix:
            running = torch.cat(pairs_in)
            past = {layer: tuple(capture.captured[(name, layer)][:size][running, :, :prefix]
                                 for name in ("rot_k", "v"))}
        h, _ = net.run_layers(h, layer, layer + 1, bias, hooks=hooks, offset=prefix,
                              past_kv=past)
    pairs, units, layers = torch.cat(pairs_in), torch.cat(units_in), torch.cat(layers_in)
    rows_batch = batch.rows(pairs)
    rows_batch.positions = rows_batch.positions - prefix  # h holds positions prefix..
    values[pairs, layers, units] = metric_of(model, h, rows_batch, kind)


# --- attribution patching -------------------------------------------------------------------


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
        lambda batch: _attribute_batch(model, batch, prepared.kind, point, axis, ungroup,
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
        activations = [base.captured[(point, layer)] for layer in range(n_layer)]
        grads = torch.autograd.grad(m_base.sum(), activations)
    shape = _unit_shape(model, axis, length)
    values = torch.empty(size, n_layer, math.prod(shape), dtype=torch.float64)
    for layer, (act, grad) in enumerate(zip(activations, grads)):
        delta = (source.captured[(point, layer)] - act.detach()).double() * grad.double()
        values[:, layer] = _sum_per_unit(delta, axis).reshape(size, -1)
    values += m_base.detach().double()[:, None, None]
    m_base, m_source = m_base.detach().double().numpy(), m_source.double().numpy()
    m_clean, m_corr = (m_source, m_base) if direction == "denoise" else (m_base, m_source)
    return values.view(size, n_layer, *shape).numpy(), m_clean, m_corr


def _sum_per_unit(delta: torch.Tensor, axis: str) -> torch.Tensor:
    """Sum a [B, ...] first-order term over everything one unit covers."""
    if axis in ("head", "kv_head"):
        return delta.flatten(2).sum(-1)  # [B, H]
    if axis == "head_position":
        return delta.flatten(3).sum(-1) if delta.dim() > 3 else delta  # [B, H, T]
    return delta.sum(-1)  # streams [B, T, d] -> [B, T]


def estimate_error(estimate: PatchingResult, exact: PatchingResult) -> dict:
    """How far the first-order estimate is from exact patching: correlation r over every
    component and pair, the largest absolute error (normalised), and the worst components."""
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
    reverse. -> values [L, H], normalised as activation patching's."""
    _check_direction(direction)
    targets = _check_receivers(model, receivers)
    prepared = prepare_pairs(model, clean, corrupted, metric)
    n_layer = model.info.n_layer
    chunk = _pairs_per_chunk(model, max(p.n_tokens for p in prepared.pairs),
                             {"z": 2, "resid_pre": 1, "attn_out": 1})
    with torch.inference_mode():
        per_pair, clean_m, corrupted_m = _over_batches(
            prepared, chunk, n_layer, progress,
            lambda batch: _path_batch(model, batch, prepared.kind, targets, direction))
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
        pair_of = torch.arange(size).repeat_interleave(n_head)
        head_of = torch.arange(n_head).repeat(size)
        for rows in _chunks(len(pair_of), step):
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
    return (values.double().numpy(), m_clean.double().numpy(), m_corr.double().numpy())
