"""Edge attribution patching and circuits (Syed et al. 2023; docs/analyses.md, "Causal
interventions").

In a pre-norm model every component reads the residual stream, a sum of what the components
below it wrote: the embeddings, each head's result (its output through its slice of W_O) and
each MLP's output. An edge u -> d is one term of that sum as one reader sees it; readers are
each head's query, key and value inputs, each MLP's input and the logits. Its score is the
first-order change of the metric when only that term takes its clean value in the corrupted
run:

    score(u -> d) = sum over positions of (a_u,clean - a_u,corrupted) . dm / d(input of d)

with the gradient taken at the corrupted run, each reader given its own copy of the stream
(so the gradient is of that reader alone). One clean forward, one corrupted forward and one
backward pass score every edge.

circuit() keeps the strongest edges and measures, exactly, what they do: a run in which every
reader's input is the corrupted stream plus, for each kept edge, the difference its upstream
component makes in this very run (everything outside the circuit is corrupted). Its
faithfulness is (m_circuit - m_corrupted) / (m_clean - m_corrupted): 1 when the circuit alone
does what the whole model does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..core.errors import InputError
from ..engine.interventions import Interventions, run_with_hooks
from .attribution import check_attributable
from .patching.common import (CAPTURE_BYTES, DEGENERATE, PairBatch, _over_batches, metric_of,
                              prepare_pairs)
from .patching.metrics import check_differentiable

__all__ = ["Edge", "EdgeScores", "Circuit", "edge_attribution_patching", "circuit"]

INPUTS = ("q", "k", "v")


@dataclass(frozen=True)
class Edge:
    upstream: str  # "embed", "L3.H1", "MLP3"
    downstream: str  # "L5.H0.q", "MLP5", "logits"
    score: float


@dataclass
class EdgeScores:
    """Scores of every edge, [U, D] (NaN where u cannot reach d: d reads below u)."""
    upstream: list[str]
    downstream: list[str]
    scores: np.ndarray  # mean over pairs
    per_pair: np.ndarray  # [P, U, D]
    metric: str
    clean: np.ndarray  # [P]
    corrupted: np.ndarray  # [P]

    def ranked(self) -> list[Edge]:
        """Every edge, strongest |score| first."""
        flat = np.nan_to_num(np.abs(self.scores), nan=-1.0).ravel()
        order = np.argsort(flat)[::-1]
        edges = []
        for index in order:
            if flat[index] < 0:
                break
            u, d = np.unravel_index(index, self.scores.shape)
            edges.append(Edge(self.upstream[u], self.downstream[d], float(self.scores[u, d])))
        return edges

    @property
    def n_edges(self) -> int:
        return int(np.isfinite(self.scores).sum())


@dataclass
class Circuit:
    edges: list[Edge]
    nodes: list[str]  # every component an edge of the circuit touches
    faithfulness: float  # mean over pairs of the normalized circuit metric
    per_pair_faithfulness: np.ndarray
    circuit_metric: np.ndarray  # [P]
    clean: np.ndarray  # [P]
    corrupted: np.ndarray  # [P]
    scores: EdgeScores
    notes: list[str] = field(default_factory=list)

    @property
    def n_edges(self) -> int:
        return len(self.edges)


# --- the graph ------------------------------------------------------------------------------


def graph_nodes(model) -> tuple[list[str], list[str], np.ndarray]:
    """Upstream and downstream node names, and which edges exist [U, D] (bool)."""
    n_layer, n_head = model.info.n_layer, model.info.n_head
    upstream = ["embed"]
    up_layer = [-1]  # the layer a node writes in; MLPs after the heads of their layer
    up_kind = ["embed"]
    for layer in range(n_layer):
        for head in range(n_head):
            upstream.append(f"L{layer}.H{head}")
            up_layer.append(layer)
            up_kind.append("head")
        upstream.append(f"MLP{layer}")
        up_layer.append(layer)
        up_kind.append("mlp")
    downstream, down_layer, down_kind = [], [], []
    for layer in range(n_layer):
        for part in INPUTS:
            for head in range(n_head):
                downstream.append(f"L{layer}.H{head}.{part}")
                down_layer.append(layer)
                down_kind.append("head")
        downstream.append(f"MLP{layer}")
        down_layer.append(layer)
        down_kind.append("mlp")
    downstream.append("logits")
    down_layer.append(n_layer)
    down_kind.append("logits")
    ul, dl = np.array(up_layer)[:, None], np.array(down_layer)[None, :]
    uk, dk = np.array(up_kind)[:, None], np.array(down_kind)[None, :]
    # a head reads the layers below it; an MLP also its own layer's heads
    valid = (ul < dl) | ((ul == dl) & (uk == "head") & (dk == "mlp"))
    return upstream, downstream, valid


# --- scoring ----------------------------------------------------------------------------------


def _writes(model, hooks: Interventions, size: int) -> torch.Tensor:
    """[B, U, T, d]: what each upstream node wrote in a run captured with embed/result/mlp."""
    parts = [hooks.captured[("resid_pre", 0)][:, None]]
    for layer in range(model.info.n_layer):
        parts.append(hooks.captured[("result", layer)].transpose(1, 2))  # [B, H, T, d]
        parts.append(hooks.captured[("mlp_out", layer)][:, None])
    return torch.cat(parts, dim=1)


def _split_streams(n_head: int):
    """attn_in -> one copy of the stream per head and per q/k/v input, [B, 3, H, T, d]."""
    return lambda h: h[:, None, None].expand(h.shape[0], 3, n_head, *h.shape[1:])


def _score_batch(model, batch: PairBatch, kind: str):
    n_layer, n_head = model.info.n_layer, model.info.n_head
    writes = [("resid_pre", 0), "result", "mlp_out"]  # the embeddings, heads, MLPs
    with torch.inference_mode():
        clean = Interventions(capture=writes)
        m_clean = metric_of(model, run_with_hooks(model.network, batch.clean, clean), batch, kind)
    readers = Interventions(capture=writes + ["attn_in", "mlp_in", ("resid_post", n_layer - 1)],
                            keep_graph=True)
    for layer in range(n_layer):
        readers.apply("attn_in", layer, _split_streams(n_head))
        readers.apply("mlp_in", layer, lambda h: h * 1.0)  # the MLP's own copy
    readers.apply("resid_post", n_layer - 1, lambda h: h * 1.0)  # the logits' own copy
    with torch.enable_grad():
        stream = model.network.embed(batch.corrupted).detach().requires_grad_(True)
        final = run_with_hooks(model.network, batch.corrupted, readers, 0, stream)
        m_corr = metric_of(model, final, batch, kind)
        check_differentiable(m_corr, kind, "edge attribution patching")
        inputs = [readers.captured[("attn_in", l)] for l in range(n_layer)]
        inputs += [readers.captured[("mlp_in", l)] for l in range(n_layer)]
        inputs.append(readers.captured[("resid_post", n_layer - 1)])
        grads = torch.autograd.grad(m_corr.sum(), inputs)
    size = batch.size
    per_reader = []
    for layer in range(n_layer):
        g = grads[layer]  # [B, 3, H, T, d]
        per_reader.append(g.reshape(size, 3 * n_head, *g.shape[3:]))
        per_reader.append(grads[n_layer + layer][:, None])
    per_reader.append(grads[-1][:, None])
    gradient = torch.cat(per_reader, dim=1).flatten(2).double()  # [B, D, T*d]
    with torch.no_grad():
        delta = (_writes(model, clean, size) - _writes(model, readers, size).detach())
        delta = delta.flatten(2).double()  # [B, U, T*d]
        scores = torch.einsum("bux,bdx->bud", delta, gradient)
    return (scores.cpu().numpy(), m_clean.double().cpu().numpy(),
            m_corr.detach().double().cpu().numpy())


def edge_attribution_patching(model, clean, corrupted=None, metric=None,
                              progress=None) -> EdgeScores:
    """Scores of every edge between components (docstring of this module); the same pairs
    and metrics as activation_patching. The mean over pairs, and each pair's."""
    check_attributable(model)
    return _edge_scores(model, prepare_pairs(model, clean, corrupted, metric), progress)


def _edge_scores(model, prepared, progress=None) -> EdgeScores:
    upstream, downstream, valid = graph_nodes(model)
    per_token = 4 * model.info.d_model * (len(upstream) + len(downstream)) * 3
    chunk = max(1, min(16, CAPTURE_BYTES // (per_token * max(p.n_tokens for p in prepared.pairs))))

    def work(batch):
        scores, m_clean, m_corr = _score_batch(model, batch, prepared.metric)
        return np.where(valid, scores, np.nan), m_clean, m_corr
    per_pair, clean_m, corr_m = _over_batches(prepared, chunk, 1, progress, work)
    return EdgeScores(upstream, downstream, per_pair.mean(0), per_pair, prepared.description,
                      clean_m, corr_m)


# --- the circuit, measured exactly ----------------------------------------------------------------


def circuit_metric(model, batch: PairBatch, kind: str, kept: np.ndarray) -> np.ndarray:
    """[P] the metric of runs in which every reader's input is the corrupted stream plus the
    difference each kept edge's upstream node makes in this run (kept: [U, D] bool)."""
    n_layer, n_head = model.info.n_layer, model.info.n_head
    net = model.network
    kept_t = torch.as_tensor(kept, dtype=torch.float32, device=net.device)
    with torch.inference_mode():
        corrupted = Interventions(capture=["resid_pre", "resid_mid", "result", "mlp_out",
                                           ("resid_post", n_layer - 1)])
        run_with_hooks(net, batch.corrupted, corrupted)
        corrupted_writes = _writes(model, corrupted, batch.size)  # [B, U, T, d]
        # the embeddings are the run's input: the clean prompt's
        deltas = [net.embed(batch.clean) - corrupted_writes[:, 0]]
        run = Interventions()

        def reading(rows: slice, base: torch.Tensor) -> torch.Tensor:
            """base + sum over kept edges of the deltas known so far, for readers `rows`."""
            known = torch.stack(deltas, dim=1)  # [B, U_known, T, d]
            weights = kept_t[: known.shape[1], rows]  # [U_known, D_rows]
            return base[:, None] + torch.einsum("bu...,ud->bd...", known, weights)

        position = 0
        for layer in range(n_layer):
            heads = slice(position, position + 3 * n_head)
            mlp = position + 3 * n_head
            base_pre = corrupted.captured[("resid_pre", layer)]
            base_mid = corrupted.captured[("resid_mid", layer)]
            run.apply("attn_in", layer, lambda h, heads=heads, base=base_pre: reading(
                heads, base).view(h.shape[0], 3, n_head, *h.shape[1:]))

            def after_heads(result, layer=layer):
                deltas.extend((result - corrupted.captured[("result", layer)]).unbind(2))
                return result

            def after_mlp(out, layer=layer):
                deltas.append(out - corrupted.captured[("mlp_out", layer)])
                return out
            run.apply("result", layer, after_heads)
            run.apply("mlp_in", layer, lambda h, mlp=mlp, base=base_mid: reading(
                slice(mlp, mlp + 1), base)[:, 0])
            run.apply("mlp_out", layer, after_mlp)
            position = mlp + 1
        final_base = corrupted.captured[("resid_post", n_layer - 1)]
        run.apply("resid_post", n_layer - 1, lambda h: reading(
            slice(position, position + 1), final_base)[:, 0])
        final = run_with_hooks(net, batch.clean, run)
        return metric_of(model, final, batch, kind).double().cpu().numpy()


def circuit(model, clean, corrupted=None, metric=None, top_k: int | None = 50,
            threshold: float | None = None, scores: EdgeScores | None = None,
            progress=None) -> Circuit:
    """The strongest edges by |score| (top_k of them, or every edge with |score| >=
    threshold) and their faithfulness, measured exactly on every pair. scores: edge scores
    already computed for the same pairs and metric (else edge_attribution_patching runs)."""
    check_attributable(model)
    if (top_k is None) == (threshold is None):
        raise InputError("give either top_k or threshold")
    if top_k is not None and int(top_k) < 1:
        raise InputError("top_k must be at least 1")
    prepared = prepare_pairs(model, clean, corrupted, metric)
    if scores is None:
        scores = _edge_scores(model, prepared)
    ranked = scores.ranked()
    if top_k is not None:
        edges = ranked[:int(top_k)]
    else:
        edges = [e for e in ranked if abs(e.score) >= float(threshold)]
    up_index = {name: i for i, name in enumerate(scores.upstream)}
    down_index = {name: i for i, name in enumerate(scores.downstream)}
    kept = np.zeros(scores.scores.shape, dtype=bool)
    for edge in edges:
        kept[up_index[edge.upstream], down_index[edge.downstream]] = True
    measured = {}
    for batch in prepared.batches(8):
        values = circuit_metric(model, batch, prepared.metric, kept)
        for row, pair in enumerate(batch.pairs):
            measured[pair.index] = values[row]
        if progress is not None:
            progress(len(measured), len(prepared.pairs))
    order = sorted(measured)
    circuit_m = np.array([measured[i] for i in order])
    clean_m, corr_m = scores.clean, scores.corrupted
    gap = clean_m - corr_m
    notes = []
    defined = np.abs(gap) >= DEGENERATE
    if not defined.all():
        notes.append("pairs whose clean and corrupted metric are equal are left out of the "
                     "faithfulness (it divides by their difference)")
    per_pair = np.where(defined, (circuit_m - corr_m) / np.where(defined, gap, 1.0), np.nan)
    nodes = sorted({e.upstream for e in edges} | {_node_of(e.downstream) for e in edges},
                   key=_node_order)
    return Circuit(edges, nodes, float(np.nanmean(per_pair)) if defined.any() else float("nan"),
                   per_pair, circuit_m, clean_m, corr_m, scores, notes)


def _node_of(reader: str) -> str:
    """"L3.H1.q" -> "L3.H1"; MLPs and the logits are their own nodes."""
    return reader.rsplit(".", 1)[0] if reader.count(".") == 2 else reader


def _node_order(name: str):
    if name == "embed":
        return (-1, 0, 0)
    if name == "logits":
        return (10**9, 0, 0)
    if name.startswith("MLP"):
        return (int(name[3:]), 1, 0)
    layer, head = name[1:].split(".H")
    return (int(layer), 0, int(head))
