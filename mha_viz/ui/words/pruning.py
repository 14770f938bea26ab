"""The words of head importance (the Pruning impact page): what each choice is called, how a
score is shown, what a gradient importance measures and costs, and the curve's button."""

from __future__ import annotations

from ...analysis.heads import head_name

ABLATION_MODES = {"zero": "zero (remove the head's output)",
                  "mean": "mean (replace it by its mean over positions)"}
CURVE_RANKINGS = {"gradient": "gradient importance", "ablation": "ablation effect"}
CURVE_STEP_COSTS = {"gradient": "gradient", "ablation": "ablation sweep"}  # one step's work


def format_score(value: float) -> str:
    """A score as the pruning page shows it (and its tests read it): 6 significant digits;
    float noise around 0 (1 − cos of an embedding with itself is ~1e-8, not 0) shows as 0."""
    return "0" if abs(value) < 5e-7 else f"{value:.6g}"


def gradient_symbol(metric=None, score: str = "score", second_order: bool = False) -> str:
    """What a gradient importance measures, as a label: |∂ score/∂ξ| (ξ a head's gate), with
    the metric's name for a target metric, or the second-order ½‖∂e/∂ξ‖²."""
    if second_order:
        return "½‖∂e/∂ξ‖²"
    return f"|∂ {score}/∂ξ|" if metric is None else "|∂ metric/∂ξ|"


def gradient_cost(second_order: bool, total_heads: int) -> str:
    """What computing gradient_importance takes, in words."""
    if second_order:
        return f"{total_heads} forward-mode passes, slower than the sweep"
    return "one backward pass"


def effect_table(effects, picked, column: str) -> dict[str, list]:
    """The rows of a table of ablation effects: each picked head's name and its effect to 4
    significant digits under ``column``."""
    return {"head": [head_name(l, h) for l, h in picked],
            column: [float(f"{effects[l, h]:.4g}") for l, h in picked]}


def curve_button(per_step: int, steps: int, cost: str | None = None) -> str:
    """The button that runs a pruning curve: its steps and, with ``cost``, each step's
    work."""
    if cost is None:
        return f"Run the pruning curve ({steps} steps of {per_step} heads)"
    return (f"Run the pruning curve ({steps} steps of {per_step} "
            f"head{'s' if per_step > 1 else ''}, one {cost} each)")


def colours(target_metric: bool) -> str:
    """The one meaning of red and blue on the page (issue 51: red = helps the target /
    raises the metric), stated once above the first map."""
    if target_metric:
        return ("**Colours on this page:** **red** = the head helps the target (switching it "
                "off lowers the metric), **blue** = it works against the target (switching "
                "it off raises the metric).")
    return ("**Colours on this page:** **red** = the head helps the model (switching it off "
            "makes the score worse), **blue** = the model does better without it.")


def lost_label(target_metric: bool, score_unit: str) -> str:
    """What the ablation map's cells are: for a target metric, the metric lost when a head
    is switched off (red when the head helps); for a score, its change (red when worse)."""
    return "metric lost" if target_metric else f"Δ {score_unit}"
