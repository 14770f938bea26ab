"""What every patching method shares: the result, prompt pairs in batches, the metric,
the components and their units, and the batching that keeps memory bounded."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn import functional as F

from ...core.errors import InputError
from ...engine.interventions import point_width, run_with_hooks
from ...models.scoring import TargetMetric
from ..prompts import EncodedPair, as_pairs, encode_pairs
from .metrics import Metric, as_metric, checked_values

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
    "resid_mid": ("resid_mid", "position", False),
    "resid_post": ("resid_post", "position", False),
}
# One vocabulary: run_with_cache's point names and TransformerLens's hook names (without the
# layer) name the same components; "head" is run_with_cache's "z".
COMPONENT_ALIASES = {"z": "head", "hook_z": "head", "attn.hook_z": "head",
                     "hook_q": "q", "attn.hook_q": "q", "hook_k": "k", "attn.hook_k": "k",
                     "hook_v": "v", "attn.hook_v": "v", "hook_pattern": "pattern",
                     "attn.hook_pattern": "pattern", "hook_resid_pre": "resid_pre",
                     "hook_attn_out": "attn_out", "hook_mlp_out": "mlp_out",
                     "hook_resid_mid": "resid_mid", "hook_resid_post": "resid_post"}
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
    "resid_mid": "the residual stream between each layer's attention and MLP, at one position",
    "resid_post": "the residual stream leaving each layer, at one position",
}
DIRECTIONS = {
    "denoise": "denoising: the corrupted run with one clean activation (what suffices)",
    "noise": "noising: the clean run with one corrupted activation (what is necessary)",
}
MAX_FORWARDS = 250_000  # patched runs of one call, in whole-forward equivalents
CAPTURE_BYTES = 256 << 20  # what one chunk of pairs may hold of cached activations
BATCH_BYTES = 192 << 20  # what one batch of patched copies may take in flight
MAX_BATCH = 512
DEGENERATE = 1e-6  # |clean - corrupted| below this: the normalized effect is undefined


@dataclass
class PatchingResult:
    """Patched metric values for every component, with what they are normalized against.

    values: the mean over pairs of the patched metric, shaped by the component: [L, H]
    (heads), [L, H, T] (head_position), [L, T] (positions), [L, H_kv] (shared_k/v).
    normalized: the mean over pairs of (value - corrupted) / (clean - corrupted), each pair
    normalized by its own clean and corrupted metric: 0 is the corrupted run's metric, 1 the
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
    std: np.ndarray  # of the normalized values over pairs (0 for one pair)
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
        """The normalized metric of the run being patched: 0 (corrupted) when denoising, 1
        (clean) when noising and in path patching's clean run."""
        return 0.0 if self.direction == "denoise" else 1.0

    @property
    def effect(self) -> np.ndarray:
        """What each patch changed, normalized: normalized − base. 0 = the patch changed
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
    """The k components of a [rows, columns] result with the largest |effect| (the normalized
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
    targets: torch.Tensor | None  # [P]
    contrasts: torch.Tensor | None  # [P]
    # the unpatched runs' logits at each pair's position [P, vocab] (metrics that read them)
    clean_logits: torch.Tensor | None = None
    corrupted_logits: torch.Tensor | None = None

    # what a metric function reads (metrics.Metric): each row's target and contrast ids
    @property
    def target(self) -> torch.Tensor | None:
        return self.targets

    @property
    def contrast(self) -> torch.Tensor | None:
        return self.contrasts

    @staticmethod
    def at(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """[B]: each row's logit (or any [B, vocab] value) at its own id."""
        return logits.gather(-1, ids[:, None])[:, 0]

    @property
    def size(self) -> int:
        return len(self.pairs)

    @property
    def n_tokens(self) -> int:
        return int(self.clean.shape[1])

    def twice(self) -> "PairBatch":
        """The metric spec of two runs of every pair stacked (base rows, then source rows)."""
        def both(t):
            return None if t is None else torch.cat([t, t])
        return PairBatch(self.pairs * 2, both(self.clean), both(self.corrupted),
                         both(self.positions), both(self.targets), both(self.contrasts),
                         both(self.clean_logits), both(self.corrupted_logits))

    def rows(self, index: torch.Tensor) -> "PairBatch":
        def take(t):
            return None if t is None else t[index]
        return PairBatch([self.pairs[i] for i in index.tolist()], self.clean[index],
                         self.corrupted[index], self.positions[index], take(self.targets),
                         take(self.contrasts), take(self.clean_logits),
                         take(self.corrupted_logits))


@dataclass
class PreparedPairs:
    model: object
    pairs: list[EncodedPair]
    metric: Metric
    description: str
    tokens: list[str]  # the first pair's clean tokens (position labels)

    @property
    def kind(self) -> str:
        """The built-in metric kind, or "function" for a metric of the user's own."""
        return self.metric.kind or "function"

    def batches(self, chunk_pairs: int):
        """PairBatches of equal token length, at most chunk_pairs pairs each (with the
        unpatched runs' logits when the metric reads them)."""
        by_length: dict[int, list[EncodedPair]] = {}
        for pair in self.pairs:
            by_length.setdefault(pair.n_tokens, []).append(pair)
        mask_id = None if self.model.info.causal else self.model.tokenizer.mask_token_id
        device = self.model.network.device
        for group in by_length.values():
            for start in range(0, len(group), chunk_pairs):
                batch = _batch_of(group[start:start + chunk_pairs], mask_id, device)
                if self.metric.needs_reference:
                    batch.clean_logits = logits_at(self.model, batch.clean, batch.positions)
                    batch.corrupted_logits = logits_at(self.model, batch.corrupted,
                                                       batch.positions)
                yield batch


def logits_at(model, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """[B, vocab] the unpatched logits of ids [B, T] at each row's position (float32)."""
    net = model.network
    with torch.no_grad():
        final = run_with_hooks(net, ids)
        hidden = net.finish(final[torch.arange(ids.shape[0], device=ids.device), positions])
        return net.lm_logits(hidden).float().detach().clone()


def _batch_of(pairs: list[EncodedPair], mask_id: int | None, device) -> PairBatch:
    def ids(values):  # on the model's device, as everything a run reads
        return torch.tensor(values, dtype=torch.long, device=device)

    clean = ids([p.clean_ids for p in pairs])
    corrupted = ids([p.corrupted_ids for p in pairs])
    positions = ids([p.position for p in pairs])
    if mask_id is not None:  # a masked-LM metric reads a masked position
        rows = torch.arange(len(pairs), device=device)
        clean, corrupted = clean.clone(), corrupted.clone()
        clean[rows, positions] = mask_id
        corrupted[rows, positions] = mask_id
    contrasts = None if pairs[0].contrast is None else ids([p.contrast for p in pairs])
    targets = None if pairs[0].target is None else ids([p.target for p in pairs])
    return PairBatch(pairs, clean, corrupted, positions, targets, contrasts)


def prepare_pairs(model, clean, corrupted=None, metric=None) -> PreparedPairs:
    """Check and tokenize the pairs, in any spelling prompts.as_pairs reads (two texts, two
    lists of token ids, PromptPair(s), (clean, corrupted) tuples, two lists), with the metric
    in any spelling metrics.as_metric reads: a TargetMetric (its target, contrast and position
    for pairs that do not name their own; its kind a built-in kind, a Metric or a function), a
    kind's name, a Metric or a function of the logits. The same spellings for one pair and
    for many."""
    if not model.info.has_lm_head:
        raise InputError(f"'{model.info.name}' has no language-model head, so it has no metric "
                         f"to patch: load a causal model or a BERT with its masked-LM head")
    spec = as_metric(metric)
    if isinstance(metric, TargetMetric):
        pairs = as_pairs(clean, corrupted, metric.target, metric.contrast, metric.position,
                         needs_target=spec.needs_target)
    else:
        pairs = as_pairs(clean, corrupted, needs_target=spec.needs_target)
    encoded = encode_pairs(model, pairs, needs_contrast=spec.needs_contrast)
    if not model.info.causal and model.tokenizer.mask_token_id is None:
        raise InputError("this masked-LM model has no [MASK] token to predict at")
    first = encoded[0]
    if spec.kind is not None:
        resolved = model.resolve_metric(TargetMetric(first.position, first.target,
                                                     first.contrast, spec.kind), first.n_tokens)
        description = resolved.description if len(encoded) == 1 else (
            resolved.description.split(" at position")[0] + " at each pair's position"
            if len({(p.target, p.contrast) for p in encoded}) == 1 else
            spec.name + " of each pair")
    else:
        description = (spec.name + f" at position {first.position}" if len(encoded) == 1
                       else spec.name + " at each pair's position")
    return PreparedPairs(model, encoded, spec, description,
                         model.display_tokens(list(first.clean_ids)))


# --- the pieces every sweep uses ----------------------------------------------------------


def metric_of(model, final: torch.Tensor, batch: PairBatch, metric) -> torch.Tensor:
    """[B] the metric of each row from the final residual stream [B, T, d]: the final norm
    and the unembedding at the row's position only (metric: any spelling as_metric reads;
    the built-in kinds read only the target's and contrast's rows of the unembedding)."""
    net = model.network
    spec = as_metric(metric)
    kind = spec.kind
    rows = torch.arange(final.shape[0], device=final.device)
    hidden = net.finish(final[rows, batch.positions])  # [B, d]
    if kind is None:  # float32 logits whatever the weights (engine/placement.py)
        values = checked_values(spec(net.lm_logits(hidden).float(), batch), final.shape[0], spec)
        return values.to(final.device)  # a list a function returned is made on the CPU
    if kind == "logprob":
        return F.log_softmax(net.lm_logits(hidden).float(), dim=-1)[rows, batch.targets]
    target = net.row_logits(hidden, batch.targets).float()
    if kind == "logit":
        return target
    return target - net.row_logits(hidden, batch.contrasts).float()


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


def _chunks(n: int, size: int, device="cpu"):
    for start in range(0, n, size):
        yield torch.arange(start, min(start + size, n), device=device)


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise InputError(f"direction must be 'denoise' or 'noise', got {direction!r}")


def component_name(component: str) -> str:
    """The component a name means: patching's own names, run_with_cache's point names (z,
    q, k, v, pattern, resid_pre, ...) and TransformerLens's hook names (hook_z,
    attn.hook_z, hook_resid_pre, ...), with or without a "blocks.N." prefix."""
    if not isinstance(component, str):
        raise InputError(f"a component is named by a string, got a {type(component).__name__}")
    name = component
    if name.startswith("blocks."):  # a hook name of one layer: the component it names
        name = name.split(".", 2)[-1] if name.count(".") >= 2 else name
    name = COMPONENT_ALIASES.get(name, name)
    if name not in COMPONENTS:
        raise InputError(f"component must be one of {', '.join(COMPONENTS)} (or run_with_cache's "
                         f"and TransformerLens's names for them: z, hook_z, hook_resid_pre, "
                         f"...), got {component!r}")
    return name


def _check_component(model, component: str) -> tuple[str, str, bool]:
    return COMPONENTS[component_name(component)]


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
    return torch.eye(units, dtype=torch.bool, device=model.network.device).view(
        units, *shape, *([1] * rest))


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
    """Means, each pair normalized by its own clean and corrupted metric, and the spread."""
    from scipy import stats

    model = prepared.model
    gap = clean - corrupted
    notes = []
    degenerate = np.abs(gap) < DEGENERATE
    if degenerate.any():
        where = ", ".join(str(i) for i in np.flatnonzero(degenerate)[:8])
        notes.append(f"the clean and corrupted metric are equal (within {DEGENERATE:g}) for "
                     f"pair(s) {where}: their normalized effect is undefined and left out")
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
        notes.append("no pair has a defined normalized effect: read the raw values")
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
