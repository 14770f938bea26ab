"""Heads across training: curves against the training step (log-scaled), with the phase
change marked, and every head's score over steps with the strongest heads named.

The step axis always spans the whole run, whatever step is marked, and is labelled at 1 and 3
times the powers of ten only: Plotly's own log axis writes its minor labels (2, 5) at 3/4
of the font size, under 14 px on a projector, and they crowd a phone's width."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from ..analysis.heads import head_name
from ..core.errors import InputError
from ._style import HEAD_COLOURS, _base_layout, _esc, _title

PHASE_COLOUR = "#d62728"


def _lines(label: str) -> str:
    """A curve's label, escaped, its lines ("\\n") broken in the legend."""
    return "<br>".join(_esc(line) for line in str(label).split("\n"))


def _log_steps(steps) -> tuple[np.ndarray, bool]:
    x = np.asarray(steps, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise InputError("the steps must be a non-empty list")
    return x, bool(x.min() > 0)  # a log axis cannot show step 0


def _step_axis(x: np.ndarray, log_x: bool) -> dict:
    """The x axis: the run's whole range, with padding, and labelled ticks (see above)."""
    title = dict(text="training step" + (" (log scale)" if log_x else ""))
    if not log_x:
        pad = 0.02 * max(float(x.max() - x.min()), 1.0)
        return dict(title=title, type="linear", range=[float(x.min()) - pad,
                                                       float(x.max()) + pad])
    low, high = float(np.log10(x.min())), float(np.log10(x.max()))
    pad = 0.03 * max(high - low, 0.5)
    ticks = [m * 10 ** k for k in range(int(np.floor(low)), int(np.ceil(high)) + 1)
             for m in (1, 3) if low - pad <= np.log10(m * 10 ** k) <= high + pad]
    return dict(title=title, type="log", range=[low - pad, high + pad], tickvals=ticks,
                ticktext=[f"{t:,}" for t in ticks])


def _mark(fig: go.Figure, step: float | None, label: str, x: np.ndarray, log_x: bool,
          phase: bool = True) -> None:
    """A vertical line at a step: dashed red for the phase change, its label above the plot;
    dotted grey for the step under the slider, its label inside the top, on the side with
    more room. The labels are annotations of their own: one that add_vline places reads its
    x on a log axis as a power of ten (step 10 sent the axis to 10^10)."""
    if step is None:
        return
    position = (lambda v: float(np.log10(v))) if log_x else float
    fig.add_vline(x=float(step), line=dict(color=PHASE_COLOUR if phase else "#555",
                                           dash="dash" if phase else "dot", width=2))
    middle = (position(x.min()) + position(x.max())) / 2
    fig.add_annotation(x=position(step), xref="x", y=1.0, yref="paper",
                       yanchor="bottom" if phase else "top", showarrow=False,
                       xanchor="center" if phase else
                       ("left" if position(step) <= middle else "right"),
                       text=_esc(label), font=dict(color=PHASE_COLOUR if phase else "#555"))


def _marks(fig: go.Figure, phase_step: int | None, current_step: int | None, x: np.ndarray,
           log_x: bool) -> None:
    """The phase change and the step under the slider, marked."""
    _mark(fig, phase_step, f"phase change (step {phase_step:,})" if phase_step else "",
          x, log_x)
    _mark(fig, current_step, f"step {current_step:,}" if current_step else "", x, log_x,
          phase=False)


def _curve(fig: go.Figure, x: np.ndarray, label: str, values, line: dict, fmt: str = ".3f",
           mode: str = "lines+markers", showlegend: bool = True) -> None:
    """One curve against the steps, its label's lines broken in the legend and the hover."""
    y = np.asarray(values, dtype=float)
    if y.shape != x.shape:
        raise InputError(f"{label}: {y.shape[0]} values for {x.shape[0]} steps")
    fig.add_trace(go.Scatter(
        x=x, y=y, mode=mode, name=_lines(label), line=line, showlegend=showlegend,
        hovertemplate=f"{_lines(label)}<br>step %{{x:,}}: %{{y:{fmt}}}<extra></extra>"))


def training_curves(steps: Sequence[int], curves: Mapping[str, np.ndarray],
                    phase_step: int | None = None, current_step: int | None = None,
                    training: tuple[Sequence[int], Sequence[float]] | None = None,
                    title: str = "Loss over training", y_title: str = "nats / token"
                    ) -> go.Figure:
    """Each curve (label -> [S] values at the checkpoints' steps; a label's "\\n" breaks its
    line in the legend) against the step on a log axis; training: the run's own (steps, loss) log drawn thin beneath; phase_step marks the
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
        _curve(fig, x, label, values, dict(color=HEAD_COLOURS[k % len(HEAD_COLOURS)], width=2))
    _marks(fig, phase_step, current_step, x, log_x)
    return _base_layout(
        fig, _title(title), height=400, xaxis=_step_axis(x, log_x),
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
    _marks(fig, phase_step, current_step, x, log_x)
    return _base_layout(
        fig, _title(title or f"{score_name} of every head over training"), height=400,
        xaxis=_step_axis(x, log_x), yaxis=dict(title=dict(text=name)), hovermode="closest",
        legend=dict(orientation="h", y=-0.25))


def composition_over_steps(steps: Sequence[int], score: np.ndarray, score_label: str,
                           shares: Mapping[str, np.ndarray], named: Sequence[str] = (),
                           phase_step: int | None = None, current_step: int | None = None,
                           title: str = "", y_title: str = "0 to 1") -> go.Figure:
    """A head's score [S] (black, thick) beside the shares [S] of the sources it reads
    (label -> values; the labels in `named` in colour, the others thin and grey), all
    between 0 and 1, against the step on a log axis, with the phase change and the step
    under the slider marked."""
    x, log_x = _log_steps(steps)
    fig = go.Figure()
    named = list(named)
    colours = [c for c in HEAD_COLOURS if c != PHASE_COLOUR]  # red marks the phase change
    # the grey ones first: the coloured ones are drawn over them
    for label, values in sorted(shares.items(), key=lambda item: item[0] in named):
        drawn = label in named
        _curve(fig, x, label, values, dict(
            color=colours[named.index(label) % len(colours)] if drawn else "#bbbbbb",
            width=3 if drawn else 1), ".2f", "lines+markers" if drawn else "lines", drawn)
    _curve(fig, x, score_label, score, dict(color="#222222", width=3, dash="dot"), ".2f")
    _marks(fig, phase_step, current_step, x, log_x)
    return _base_layout(
        fig, _title(title), height=420, xaxis=_step_axis(x, log_x),
        yaxis=dict(title=dict(text=_esc(y_title)), range=[-0.02, 1.05]),
        hovermode="closest", legend=dict(orientation="h", y=-0.25))
