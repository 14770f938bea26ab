"""Training a dictionary on a model's activations: a short loop of our own (TopK by default,
Gao et al. 2024, "Scaling and evaluating sparse autoencoders"; or ReLU with an L1 penalty),
written in SAELens's format so SAELens loads it.

The activations stream from texts cut as the corpus cuts them (activations.activation_rows):
a shuffle buffer of `buffer_tokens` rows is filled, shuffled, and its first half trained on
(`passes` times) while the second half waits for the next rows, so memory does not grow with
the corpus. Several sites of one model train from the same forward (train_saes). Each step:
Adam on the mean squared error (plus, for TopK, the AuxK loss of the dead features on the
error, coefficient 1/32; for ReLU, L1 times each decoder row's norm), decoder rows kept at
unit norm with the gradient along them removed; b_dec starts at the first buffer's mean.
Seeded: the same texts, settings and seed give the same dictionary. A checkpoint folder
keeps the weights, the optimizer and the count of segments used every `checkpoint_every`
steps; a run given the same folder resumes after them (rows waiting in the buffer at the
checkpoint are not replayed).

Quality, on held-out texts (docs/analyses.md, "Features at the head"): the variance left
unexplained FVU = sum ||x - x^||^2 / sum ||x - mean x||^2, L0 (active features per token)
and the share of features never active, computed in the dtype the dictionary is saved in.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch

from ...core.errors import InputError
from ...dictionaries import SparseDictionary, hook_name_of, site_width, write_dictionary
from ...dictionaries.sae import DTYPES
from .activations import SKIPPED_POSITIONS, RowCache, activation_rows, check_model_site

TRAINED = ("topk", "standard")
STATE_FILE = "trainer_state.pt"


@dataclass
class TrainProgress:
    """Where a run is: steps done, tokens read (of max_tokens, when given), and the last
    step's FVU on its batch for each dictionary (by hook name)."""
    step: int
    tokens: int
    seconds: float
    fvu: dict[str, float]
    max_tokens: int | None = None


@dataclass
class Quality:
    """A dictionary's figures on held-out text."""
    fvu: float
    l0: float
    dead_fraction: float
    tokens: int


@dataclass
class TrainedDictionary:
    sae: SparseDictionary
    quality: Quality | None
    folder: Path | None
    steps: int
    tokens: int
    seconds: float
    settings: dict = field(default_factory=dict)


class _Learner:
    """One dictionary's parameters, optimizer and step (see the module docstring)."""

    def __init__(self, d_in: int, d_sae: int, k: int, architecture: str, lr: float,
                 l1: float, generator: torch.Generator):
        self.architecture, self.k, self.l1 = architecture, k, l1
        rows = torch.randn(d_sae, d_in, generator=generator)
        rows /= rows.norm(dim=-1, keepdim=True)
        self.params = {"W_dec": rows.clone().requires_grad_(),
                       "W_enc": rows.T.clone().contiguous().requires_grad_(),
                       "b_enc": torch.zeros(d_sae, requires_grad=True),
                       "b_dec": torch.zeros(d_in, requires_grad=True)}
        self.optimizer = torch.optim.Adam(self.params.values(), lr=lr, betas=(0.9, 0.999),
                                          eps=6.25e-10)
        self.since_fired = torch.zeros(d_sae, dtype=torch.long)  # tokens since last active
        self.started = False
        self.aux_k = min(d_sae, max(1, d_in // 2))

    def start(self, rows: torch.Tensor) -> None:
        with torch.no_grad():
            self.params["b_dec"].copy_(rows.mean(0))
        self.started = True

    def step(self, x: torch.Tensor, dead_after: int) -> float:
        p = self.params
        pre = (x - p["b_dec"]) @ p["W_enc"] + p["b_enc"]
        if self.architecture == "topk":
            values, indices = torch.topk(pre, self.k, dim=-1, sorted=False)
            values = values.relu()
            out = torch.nn.functional.embedding_bag(indices, p["W_dec"], mode="sum",
                                                    per_sample_weights=values) + p["b_dec"]
            fired = indices[values > 0]
        else:
            acts = pre.relu()
            out = acts @ p["W_dec"] + p["b_dec"]
            fired = acts.gt(0).any(0).nonzero().flatten()
        error = x - out
        mse = error.pow(2).sum(-1).mean()
        loss = mse
        dead = self.since_fired >= dead_after
        if self.architecture == "topk" and dead.any():
            # AuxK: the dead features' top pre-activations reconstruct the error
            masked = pre.masked_fill(~dead, float("-inf"))
            k_aux = min(self.aux_k, int(dead.sum()))
            values, indices = torch.topk(masked, k_aux, dim=-1, sorted=False)
            guess = torch.nn.functional.embedding_bag(indices, p["W_dec"], mode="sum",
                                                      per_sample_weights=values.relu())
            aux = (error.detach() - guess).pow(2).sum(-1).mean()
            loss = loss + aux / 32 * torch.nan_to_num(mse.detach() / aux.detach().clamp_min(
                1e-12)).clamp(max=1.0)
        elif self.architecture == "standard":
            loss = loss + self.l1 * (acts * p["W_dec"].norm(dim=-1)).sum(-1).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
            rows, grad = p["W_dec"], p["W_dec"].grad
            grad -= (grad * rows).sum(-1, keepdim=True) * rows  # along the unit sphere
            self.optimizer.step()
            rows /= rows.norm(dim=-1, keepdim=True).clamp_min(1e-12)
            self.since_fired += x.shape[0]
            self.since_fired[fired] = 0
            centred = (x - x.mean(0)).pow(2).sum()
        return float(error.detach().pow(2).sum() / centred.clamp_min(1e-12))

    def dictionary(self, hook_name: str, site: str, layer: int, dtype: torch.dtype,
                   metadata: dict) -> SparseDictionary:
        p = {name: value.detach().to(dtype).clone() for name, value in self.params.items()}
        return SparseDictionary(
            architecture=self.architecture, W_enc=p["W_enc"], W_dec=p["W_dec"],
            b_dec=p["b_dec"], b_enc=p["b_enc"], hook_name=hook_name, site=site, layer=layer,
            k=self.k if self.architecture == "topk" else None,
            reshape_activations="hook_z" if site == "hook_z" else "none", metadata=metadata)

    def state(self) -> dict:
        return {"params": {n: v.detach() for n, v in self.params.items()},
                "optimizer": self.optimizer.state_dict(), "since_fired": self.since_fired,
                "started": self.started}

    def load(self, state: dict) -> None:
        with torch.no_grad():
            for name, value in state["params"].items():
                self.params[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        self.since_fired = state["since_fired"]
        self.started = bool(state["started"])


def train_sae(model, site: str = "hook_z", layer: int = 0, texts: Iterable[str] = (),
              **settings) -> TrainedDictionary:
    """Train one dictionary at `site` of `layer` on `texts` (any iterable of strings: a
    list, corpus.open_texts(...)); see train_saes for the settings."""
    return train_saes(model, [(site, layer)], texts, **settings)[0]


def train_saes(model, sites: Sequence[tuple[str, int]], texts: Iterable[str], *,
               d_sae: int | None = None, k: int = 32, architecture: str = "topk",
               held_out_texts: Iterable[str] | None = None, out=None, seed: int = 0,
               seg_len: int = 128, batch_tokens: int = 4096, buffer_tokens: int = 65536,
               passes: int = 1, max_tokens: int | None = None, lr: float | None = None,
               l1: float = 5.0, dead_after_tokens: int = 200_000,
               save_dtype: str = "float32", checkpoint=None, checkpoint_every: int = 200,
               batch_segments: int = 16, epochs: int = 1, cache=None, held_out_cache=None,
               progress: Callable[[TrainProgress], None] | None = None
               ) -> list[TrainedDictionary]:
    """Dictionaries at several (site, layer) of one model, trained from one forward per
    batch of segments (see the module docstring). d_sae: features (default 8 x d_in); k:
    active features per token (TopK); lr: Adam's rate (default 2e-4 / sqrt(d_sae / 16384),
    Gao et al.'s scaling); out: a folder to write into (one sub-folder per site, named
    "L<layer>.<site>", in SAELens's format); save_dtype: the dtype written (bfloat16 halves
    the files); held_out_texts: the texts the quality figures are measured on; cache: a
    folder keeping the first epoch's activations (float16) for the next `epochs` - 1 (and
    for a later run with the same settings, which then runs no model)."""
    for site, layer in sites:
        check_model_site(model, site, layer)
    if architecture not in TRAINED:
        raise InputError(f"train_sae trains {' or '.join(TRAINED)} dictionaries, not "
                         f"{architecture!r}")
    if save_dtype not in DTYPES:
        raise InputError(f"save_dtype must be one of {', '.join(DTYPES)}, got {save_dtype!r}")
    widths = [site_width(model.info, site) for site, _ in sites]
    d_sae = int(d_sae or 8 * widths[0])
    k = int(k)
    if not 1 <= k <= d_sae:
        raise InputError(f"k must be 1..d_sae ({d_sae}), got {k}")
    for name, value in (("batch_tokens", batch_tokens), ("buffer_tokens", buffer_tokens),
                        ("passes", passes)):
        if int(value) < 1:
            raise InputError(f"{name} must be at least 1, got {value}")
    buffer_tokens = max(int(buffer_tokens), 2 * int(batch_tokens))
    lr = float(lr) if lr is not None else 2e-4 / math.sqrt(d_sae / 16384)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    learners = [_Learner(width, d_sae, k, architecture, lr, l1, generator) for width in widths]
    state = {"step": 0, "segments": 0, "tokens": 0, "epoch": 0}
    if int(epochs) < 1 or (int(epochs) > 1 and cache is None):
        raise InputError("epochs must be at least 1, and more than one reads the first "
                         "epoch's activations again from disk: give cache= a folder")
    rows_cache = (None if cache is None else
                  RowCache(cache, model.info.name, sites, seg_len, max_tokens))
    store = Path(checkpoint) if checkpoint is not None else None
    if store is not None and (store / STATE_FILE).is_file():
        saved = torch.load(store / STATE_FILE, weights_only=True)
        if saved["sites"] != [list(s) for s in sites] or saved["d_sae"] != d_sae:
            raise InputError(f"the checkpoint in '{store.name}' trains other sites or widths")
        for learner, learner_state in zip(learners, saved["learners"]):
            learner.load(learner_state)
        generator.set_state(saved["generator"])
        state.update(step=saved["step"], segments=saved["segments"], tokens=saved["tokens"],
                     epoch=saved["epoch"])
    started = time.perf_counter()
    counter = {"tokens": state["tokens"], "segments": state["segments"]}
    buffers = [torch.empty(0, width) for width in widths]

    def train_on(rows_by_site: list[torch.Tensor]) -> None:
        n = rows_by_site[0].shape[0]
        for _ in range(int(passes)):
            order = torch.randperm(n, generator=generator)
            for start in range(0, n - int(batch_tokens) + 1, int(batch_tokens)):
                chosen = order[start:start + int(batch_tokens)]
                fvu = {hook_name_of(site, layer): learner.step(rows[chosen], dead_after_tokens)
                       for (site, layer), learner, rows in zip(sites, learners, rows_by_site)}
                state["step"] += 1
                if store is not None and state["step"] % int(checkpoint_every) == 0:
                    _save_state(store, sites, d_sae, learners, generator, state)
                if progress is not None:
                    progress(TrainProgress(state["step"], counter["tokens"],
                                           time.perf_counter() - started, fvu, max_tokens))

    for epoch in range(state["epoch"], int(epochs)):
        state["epoch"] = epoch
        for rows_by_site in _source(rows_cache, epoch, model, texts, sites, seg_len,
                                    batch_segments, max_tokens, state, counter):
            if epoch == 0:
                state["segments"], state["tokens"] = counter["segments"], counter["tokens"]
            for learner, rows in zip(learners, rows_by_site):
                if not learner.started:
                    learner.start(rows)
            buffers = [torch.cat([b, r]) for b, r in zip(buffers, rows_by_site)]
            if buffers[0].shape[0] >= buffer_tokens:
                order = torch.randperm(buffers[0].shape[0], generator=generator)
                half = buffers[0].shape[0] // 2
                train_on([b[order[:half]] for b in buffers])
                buffers = [b[order[half:]] for b in buffers]
    if buffers[0].shape[0] >= int(batch_tokens):
        train_on(buffers)
    if state["step"] == 0:
        raise InputError(f"the texts gave {counter['tokens']:,} tokens, fewer than one batch "
                         f"of {int(batch_tokens):,}: give more text or a smaller batch_tokens")
    if store is not None:
        _save_state(store, sites, d_sae, learners, generator, state)
    seconds = time.perf_counter() - started
    meta = {"model_name": model.info.name, "context_size": int(seg_len),
            "mha_viz_training": {"architecture": architecture, "k": k, "seed": int(seed),
                                 "tokens": state["tokens"], "steps": state["step"],
                                 "epochs": int(epochs), "passes": int(passes), "lr": lr,
                                 "skipped_positions": SKIPPED_POSITIONS}}
    trained = []
    for (site, layer), learner in zip(sites, learners):
        heads = {"n_head": model.info.n_head} if site == "hook_z" else {}
        sae = learner.dictionary(hook_name_of(site, layer), site, layer, DTYPES[save_dtype],
                                 {**meta, "mha_viz_training": dict(meta["mha_viz_training"]),
                                  "hook_name": hook_name_of(site, layer), **heads})
        trained.append(TrainedDictionary(sae, None, None, state["step"], state["tokens"],
                                         seconds, dict(site=site, layer=layer)))
    if held_out_texts is not None:
        qualities = dictionary_quality(model, [t.sae for t in trained], held_out_texts,
                                       seg_len=seg_len, cache=held_out_cache)
        for result, quality in zip(trained, qualities):
            result.quality = quality
            result.sae.metadata["mha_viz_training"]["held_out"] = {
                "fvu": round(quality.fvu, 4), "l0": round(quality.l0, 2),
                "dead_fraction": round(quality.dead_fraction, 4), "tokens": quality.tokens}
    if out is not None:
        for result in trained:
            result.folder = write_dictionary(
                result.sae, Path(out) / f"L{result.sae.layer}.{result.sae.site}")
    return trained


def _source(rows_cache, epoch, model, texts, sites, seg_len, batch_segments, max_tokens,
            state, counter):
    """One epoch's rows: from the model (kept in the cache, if any), or from a cache that an
    earlier epoch or run completed. Without a cache a resumed run skips the segments it
    used; with one, an interrupted first epoch starts again."""
    if rows_cache is not None and (epoch > 0 or rows_cache.complete):
        if not rows_cache.complete:
            raise InputError(f"the activations kept in '{rows_cache.folder.name}' are not "
                             f"complete: remove the folder and run again")
        if epoch == 0:
            counter["tokens"] = 0
        return rows_cache.read({} if epoch > 0 else counter)
    skip = state["segments"] if rows_cache is None else 0
    if rows_cache is not None:
        counter.update(segments=0, tokens=0)
    stream = activation_rows(model, texts, sites, seg_len, batch_segments, max_tokens, skip,
                             counter)
    return stream if rows_cache is None else rows_cache.write(stream)


def _save_state(store: Path, sites, d_sae, learners, generator, state) -> None:
    store.mkdir(parents=True, exist_ok=True)
    partial = store / (STATE_FILE + ".partial")
    torch.save({"sites": [list(s) for s in sites], "d_sae": d_sae,
                "learners": [learner.state() for learner in learners],
                "generator": generator.get_state(), **state}, partial)
    partial.replace(store / STATE_FILE)


def dictionary_quality(model, saes: Sequence[SparseDictionary], texts: Iterable[str],
                       seg_len: int = 128, max_tokens: int | None = None, cache=None
                       ) -> list[Quality]:
    """FVU, L0 and the share of features never active of each dictionary (all at sites of
    this model) on texts, streamed (position 0 of every segment left out). cache: a folder
    keeping the texts' activations (float16) for the next measure with the same settings."""
    sites = [(sae.site, sae.layer) for sae in saes]
    counter: dict = {}
    sums = [dict(err=0.0, sq=None, total=None, n=0, l0=0.0,
                 fired=torch.zeros(sae.d_sae, dtype=torch.bool)) for sae in saes]
    rows_cache = None if cache is None else RowCache(cache, model.info.name, sites, seg_len,
                                                     max_tokens)
    for rows_by_site in _source(rows_cache, 0, model, texts, sites, seg_len, 16, max_tokens,
                                {"segments": 0}, counter):
        for sae, rows, acc in zip(saes, rows_by_site, sums):
            x = rows.double()
            acts = sae.encode(rows)
            out = sae.decode(acts, rows).double()
            acc["err"] += float((x - out).pow(2).sum())
            acc["sq"] = x.pow(2).sum(0) if acc["sq"] is None else acc["sq"] + x.pow(2).sum(0)
            acc["total"] = x.sum(0) if acc["total"] is None else acc["total"] + x.sum(0)
            acc["n"] += x.shape[0]
            active = acts != 0
            acc["l0"] += float(active.sum())
            acc["fired"] |= active.any(0)
    if not sums or not sums[0]["n"]:
        raise InputError("the held-out texts gave no tokens to measure on")
    qualities = []
    for acc in sums:
        n = acc["n"]
        variance = float((acc["sq"] - acc["total"].pow(2) / n).sum())
        qualities.append(Quality(acc["err"] / max(variance, 1e-300), acc["l0"] / n,
                                 1.0 - float(acc["fired"].float().mean()), n))
    return qualities
