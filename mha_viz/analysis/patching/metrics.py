"""Metrics: what a patched (or ablated) run is measured by, as functions of the logits.

A metric is any callable ``metric(logits, rows) -> [B]``: logits [B, vocab] are the logits at
each pair's read position (its ``position``: the prediction made there), one row per run, and
``rows`` says what each row reads (a PairBatch): ``rows.target`` and ``rows.contrast`` [B]
(token ids, when the pairs name them), ``rows.clean_logits`` and ``rows.corrupted_logits``
[B, vocab] (the unpatched runs' logits at the same position, when the metric asks for them
with ``Metric(..., needs_reference=True)``), ``rows.at(logits, ids)`` -> [B] (each row's
entry). It returns one number per row, as a tensor (attribution patching and circuits
differentiate it: it must be computed with torch operations on ``logits``).

    from mha_viz.analysis.patching import Metric, kl_divergence, logit_diff
    activation_patching(model, pairs, metric=kl_divergence)
    margin = Metric(lambda logits, rows: logits.gather(1, rows.target[:, None])[:, 0]
                    - logits.max(-1).values, "margin over the top logit", needs_target=True)

The built-in kinds (``"logit_diff"``, ``"logit"``, ``"logprob"``) are ready-made metrics; a
TargetMetric's ``kind`` may be any of them, a Metric or a plain callable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch.nn import functional as F

from ...core.errors import InputError
from ...models.scoring import METRIC_KINDS, TargetMetric

__all__ = ["Metric", "as_metric", "logit_diff", "logit", "logprob", "probability",
           "kl_divergence", "BUILT_IN_METRICS"]


@dataclass(frozen=True)
class Metric:
    """A function of the logits at the read positions: fn(logits [B, vocab], rows) -> [B].
    needs_target / needs_contrast: it reads rows.target / rows.contrast (the pairs must name
    them); needs_reference: it reads rows.clean_logits / rows.corrupted_logits (one more
    unpatched forward of each pair). kind: the built-in kind it is (its fast path)."""
    fn: Callable
    name: str = "metric"
    needs_target: bool = False
    needs_contrast: bool = False
    needs_reference: bool = False
    kind: str | None = None

    def __call__(self, logits: torch.Tensor, rows) -> torch.Tensor:
        return self.fn(logits, rows)


def _at(logits, ids):
    return logits.gather(-1, ids[:, None])[:, 0]


def _kl(logits, rows):
    """KL(clean || this run) in nats: 0 on the clean run."""
    clean = F.log_softmax(rows.clean_logits.float(), dim=-1)
    return (clean.exp() * (clean - F.log_softmax(logits, dim=-1))).sum(-1)


logit_diff = Metric(lambda logits, rows: _at(logits, rows.target) - _at(logits, rows.contrast),
                    "logit(target) − logit(contrast)", True, True, kind="logit_diff")
logit = Metric(lambda logits, rows: _at(logits, rows.target), "logit(target)", True,
               kind="logit")
logprob = Metric(lambda logits, rows: _at(F.log_softmax(logits, dim=-1), rows.target),
                 "log p(target)", True, kind="logprob")
probability = Metric(lambda logits, rows: _at(F.softmax(logits, dim=-1), rows.target),
                     "p(target)", True)
kl_divergence = Metric(_kl, "KL(clean ‖ run) (nats)", needs_reference=True)
BUILT_IN_METRICS = {"logit_diff": logit_diff, "logit": logit, "logprob": logprob}


def as_metric(metric) -> Metric:
    """A Metric from any spelling: a Metric, a built-in kind's name, a TargetMetric (its kind),
    a plain callable (logits, rows) -> [B], or None (the logit difference)."""
    if isinstance(metric, TargetMetric):
        metric = metric.kind
    if metric is None:
        return logit_diff
    if isinstance(metric, Metric):
        return metric
    if isinstance(metric, str):
        if metric not in BUILT_IN_METRICS:
            raise InputError(f"metric kind must be one of {', '.join(METRIC_KINDS)} (or a "
                             f"function of the logits), got {metric!r}")
        return BUILT_IN_METRICS[metric]
    if callable(metric):
        return Metric(metric, getattr(metric, "__name__", "metric").replace("<lambda>",
                                                                             "metric"))
    raise InputError(f"a metric is a kind ({', '.join(METRIC_KINDS)}), a TargetMetric, a Metric "
                     f"or a function (logits, rows) -> one number per row; got a "
                     f"{type(metric).__name__}")


def checked_values(values, n_rows: int, metric: Metric) -> torch.Tensor:
    """A metric's output as a [B] float tensor, or a clear message saying what it returned."""
    if not isinstance(values, torch.Tensor):
        try:
            values = torch.as_tensor(values, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError):
            raise InputError(f"the metric '{metric.name}' returned a {type(values).__name__}; "
                             f"it must return one number per row (a tensor of {n_rows})") from None
    if values.dim() == 0 and n_rows == 1:
        values = values.reshape(1)
    if tuple(values.shape) != (n_rows,):
        raise InputError(f"the metric '{metric.name}' returned shape {tuple(values.shape)} for "
                         f"{n_rows} rows of logits: it must return one number per row, [{n_rows}]")
    return values.float()


def check_differentiable(values: torch.Tensor, metric, method: str) -> None:
    """A gradient method's metric must carry the graph from the logits: say so when not."""
    if not values.requires_grad:
        name = as_metric(metric).name
        raise InputError(f"{method} differentiates the metric, but '{name}' is not "
                         f"differentiable (its value does not depend on the logits through "
                         f"torch operations: no .item(), numpy or argmax): use exact patching "
                         f"(activation_patching), or write the metric with torch")
