"""Circuit tests the papers run (docs/analyses.md, "Faithfulness and necessity"): a circuit's
heads checked by ablating every head outside it (faithfulness: does the circuit alone do the
task?) and by ablating the circuit's heads alone (necessity: does the model need them?), with
mean, resample or zero ablation over a reference distribution, on every pair, with the spread.

    from mha_viz.analysis import circuit_test
    t = circuit_test(model, pairs, ["L9.H9", "L10.H0"], "logit_diff", ablation="mean",
                     reference=abc_prompts)
    t.faithfulness, t.necessity             # Wang et al.'s F(C) / F(M), 1 - F(M \\ C) / F(M)

F(M) is the metric of the model (each pair's clean prompt, nothing ablated), F(C) the metric
with every attention head outside the circuit ablated (MLPs, embeddings and norms run as
they are: Wang et al. 2023's convention), F(M \\ C) with the circuit's heads ablated, F(∅)
with every head ablated. The figures are ratios of the means over pairs, as Wang et al. report
them (their faithfulness for GPT-2 small's indirect-object circuit: 87%); each pair's own
ratio and its spread are there too. Every run goes through run_with_interventions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.errors import InputError
from .heads import parse_head_name
from .patching.interventions import _spread, heads_replaced, run_with_interventions

__all__ = ["CircuitTest", "circuit_test", "circuit_heads", "ABLATIONS"]

# a head's output replaced by its mean over the reference prompts (position by position), by
# one reference prompt's (per pair), or removed
ABLATIONS = ("mean", "resample", "zero")


@dataclass
class CircuitTest:
    heads: list[tuple[int, int]]
    ablation: str
    metric: str
    model_metric: np.ndarray  # F(M) per pair
    circuit_metric: np.ndarray  # F(C): every head outside the circuit ablated
    without_circuit: np.ndarray  # F(M \ C): the circuit's heads ablated
    nothing_metric: np.ndarray  # F(∅): every head ablated
    notes: list[str] = field(default_factory=list)

    @property
    def n_pairs(self) -> int:
        return len(self.model_metric)

    @property
    def faithfulness(self) -> float:
        """F(C) / F(M), means over pairs: 1 when the circuit alone gives the model's metric."""
        return float(self.circuit_metric.mean() / self.model_metric.mean())

    @property
    def necessity(self) -> float:
        """1 - F(M \\ C) / F(M), means over pairs: the share of the metric lost without it."""
        return float(1 - self.without_circuit.mean() / self.model_metric.mean())

    @property
    def per_pair_faithfulness(self) -> np.ndarray:
        return _ratio(self.circuit_metric, self.model_metric)

    @property
    def per_pair_necessity(self) -> np.ndarray:
        return 1 - _ratio(self.without_circuit, self.model_metric)

    def spread(self, which: str = "faithfulness") -> dict:
        """Over pairs: mean, standard deviation and 95% interval of each pair's own ratio."""
        values = (self.per_pair_faithfulness if which == "faithfulness"
                  else self.per_pair_necessity)
        std, (low, high) = _spread(values)
        finite = values[np.isfinite(values)]
        return {"mean": float(finite.mean()) if len(finite) else float("nan"), "std": std,
                "ci95_low": low, "ci95_high": high, "n": int(len(finite))}


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.abs(b) > 1e-6, a / np.where(np.abs(b) > 1e-6, b, 1.0), np.nan)


def circuit_heads(model, circuit) -> list[tuple[int, int]]:
    """The heads of a circuit: (layer, head) pairs, names ("L9.H9"), or a circuits.Circuit
    (the heads among its nodes)."""
    nodes = getattr(circuit, "nodes", circuit)
    if isinstance(nodes, str):
        nodes = [nodes]
    heads = set()
    info = model.info
    for node in nodes:
        if isinstance(node, str):
            if not node.startswith("L") or ".H" not in node:
                continue  # embed, MLPs, logits: not heads
            layer, head = parse_head_name(node)
        else:
            try:
                layer, head = (int(x) for x in node)
            except (TypeError, ValueError):
                raise InputError(f"a circuit's head is (layer, head) or a name such as "
                                 f"'L9.H9', got {node!r}") from None
        if not (0 <= layer < info.n_layer and 0 <= head < info.n_head):
            raise InputError(f"L{layer}.H{head} is not a head of this model")
        heads.add((layer, head))
    return sorted(heads)


def circuit_test(model, prompts, circuit, metric=None, ablation: str = "mean", reference=None,
                 seed: int = 0, corrupted=None) -> CircuitTest:
    """Faithfulness and necessity of a circuit's heads (docstring of this module) on every pair
    (any spelling activation_patching reads), each pair's clean prompt running. reference:
    the prompts mean and resample ablation read (default: every pair's corrupted prompt);
    ablation "mean", "resample" or "zero"."""
    if ablation not in ABLATIONS:
        raise InputError(f"ablation must be one of {', '.join(ABLATIONS)}, got {ablation!r}")
    heads = circuit_heads(model, circuit)
    info = model.info
    every = [(l, h) for l in range(info.n_layer) for h in range(info.n_head)]
    outside = [head for head in every if head not in set(heads)]

    def ablated(chosen):
        if not chosen:
            return None
        return run_with_interventions(model, prompts, heads_replaced(chosen, ablation), metric,
                                      corrupted=corrupted, reference=reference, seed=seed)
    inside_run = ablated(heads)
    outside_run = ablated(outside)
    nothing = ablated(every)
    model_metric = nothing.clean
    notes = []
    if abs(model_metric.mean()) < 1e-6:
        notes.append("the model's mean metric is 0: the ratios are undefined")
    if (model_metric <= 0).any():
        notes.append(f"{int((model_metric <= 0).sum())} pair(s) have a metric <= 0 on the "
                     f"clean prompt: their own ratios read the other way")
    return CircuitTest(
        heads, ablation, metric=nothing.metric, model_metric=model_metric,
        circuit_metric=model_metric.copy() if outside_run is None else outside_run.values,
        without_circuit=model_metric.copy() if inside_run is None else inside_run.values,
        nothing_metric=nothing.values, notes=notes)
