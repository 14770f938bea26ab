"""Heads across training: curves against the training step (log-scaled), with the phase
change marked, and every head's score over steps with the strongest heads named."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from ..analysis.heads import head_name
from ..core.errors import InputError
from ._style import HEAD_COLOURS, _base_layout, _esc, _title

PHASE_COLOUR = "#d62728"


def _log_steps(steps) -> tuple[np.ndarray, bool]:
    x = np.asarray(steps, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise InputError("the steps must be a non-empty list")
    return x, bool(x.min() > 0)  # a log axis cannot show step 0


def _mark(fig: go.Figure, step: float | None, label: str, where: float | None = None) -> None:
    """A dashed vertical line at a step (the phase change, the step under the slider)."""
    if step is None:
        return
    fig.add_vline(x=float(step), line=dict(color=PHASE_COLOUR if where is None else "#555",
                                           dash="dash" if where is None else "dot", width=2),
                  annotation_text=_esc(label), annotation_position="top left"
                  if where is None else "top right")


def training_curves(steps: Sequence[int], curves: Mapping[str, np.ndarray],
                    phase_step: int | None = None, current_step: int | None = None,
                    training: tuple[Sequence[int], Sequence[float]] | None = None,
                    title: str = "Loss over training", y_title: str = "nats / token"
                    ) -> go.Figure:
    """Each curve (label -> [S] values at the checkpoints' steps) against the step on a log
    axis; training: the run's own (steps, loss) log drawn thin beneath; phase_step marks the
    phase change, current_step the step under the slider."""
    x, log_x = _log_steps(steps)
    fig = go.Figure()
    if training is not None and len(training[0]):
        t_steps, t_loss = np.asarray(training[0], float), np.asarray(training[1], float)
        fig.add_trace(go.Scatter(
            x=t_steps, y=t_loss, mode="lines", name="training loss (the run's log)",
            line=dict(color="#bbbbbb", width=1),
            hovertemplate="step %{x:,}<br>training loss %{y:.3f}<extra></extra>"))
    for k, (label, values) in enumerate(curves.items()):
        y = np.asarray(values, dtype=float)
        if y.shape != x.shape:
            raise InputError(f"{label}: {y.shape[0]} values for {x.shape[0]} steps")
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="lines+markers", name=_esc(label),
            line=dict(color=HEAD_COLOURS[k % len(HEAD_COLOURS)], width=2),
            hovertemplate=f"{_esc(label)}<br>step %{{x:,}}: %{{y:.3f}}<extra></extra>"))
    _mark(fig, phase_step, f"phase change (step {phase_step:,})" if phase_step else "")
    _mark(fig, current_step, f"step {current_step:,}" if current_step else "", where=1.0)
    return _base_layout(
        fig, _title(title), height=400,
        xaxis=dict(title=dict(text="training step" + (" (log scale)" if log_x else "")),
                   type="log" if log_x else "linear"),
        yaxis=dict(title=dict(text=_esc(y_title))), hovermode="closest",
        legend=dict(orientation="h", y=-0.25))


def head_scores_over_steps(steps: Sequence[int], scores: np.ndarray, score_name: str,
                           named: Sequence[tuple[int, int]] = (),
                           phase_step: int | None = None, current_step: int | None = None,
                           title: str | None = None) -> go.Figure:
    """Every head's score [S, L, H] against the step (log axis): the heads in `named` in
    colour with their names, the others thin and grey."""
    x, log_x = _log_steps(steps)
    values = np.asarray(scores, dtype=float)
    if values.ndim != 3 or values.shape[0] != x.size:
        raise InputError(f"scores must be [steps, layers, heads] for {x.size} steps, got "
                         f"{values.shape}")
    name = _esc(score_name)
    named = [tuple(h) for h in named]
    fig = go.Figure()
    for layer in range(values.shape[1]):
        for head in range(values.shape[2]):
            if (layer, head) in named:
                continue
            fig.add_trace(go.Scatter(
                x=x, y=values[:, layer, head], mode="lines", showlegend=False,
                line=dict(color="#cccccc", width=1), name=head_name(layer, head),
                hovertemplate=f"{head_name(layer, head)}<br>step %{{x:,}}: %{{y:.3f}}"
                              f"<extra></extra>"))
    for k, (layer, head) in enumerate(named):
        fig.add_trace(go.Scatter(
            x=x, y=values[:, layer, head], mode="lines+markers", name=head_name(layer, head),
            line=dict(color=HEAD_COLOURS[k % len(HEAD_COLOURS)], width=3),
            hovertemplate=f"{head_name(layer, head)}<br>step %{{x:,}}: %{{y:.3f}}"
                          f"<extra></extra>"))
    _mark(fig, phase_step, f"phase change (step {phase_step:,})" if phase_step else "")
    _mark(fig, current_step, f"step {current_step:,}" if current_step else "", where=1.0)
    return _base_layout(
        fig, _title(title or f"{score_name} of every head over training"), height=400,
        xaxis=dict(title=dict(text="training step" + (" (log scale)" if log_x else "")),
                   type="log" if log_x else "linear"),
        yaxis=dict(title=dict(text=name)), hovermode="closest",
        legend=dict(orientation="h", y=-0.25))
