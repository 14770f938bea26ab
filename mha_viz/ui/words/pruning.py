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


# ------------------------------------------------------------------ the page's sentences

ABLATION_MODE_HELP = ("Zero ablation removes the head's output (Michel et al. 2019). Mean "
                      "ablation replaces it by its average over the text's positions, which "
                      "keeps the typical offset the head adds and so disturbs the layers above "
                      "less.")
LOG_COLOURS_HELP = ("Colour the ablation and gradient maps by the size of each value on a log "
                    "scale (three decades), so one or two large heads do not wash out the "
                    "rest. A cell's label (point at it, or tap it) gives the plain value.")
TARGET_METRIC_EXAMPLE = ("A target metric asks which heads make one prediction, e.g. "
                         "logit(' Mary') − logit(' John') at the last token of an "
                         "indirect-object sentence (Wang et al. 2023).")
SEQ2SEQ_METRIC_EXAMPLE = ("A target metric asks which heads make one token of the output, "
                          "e.g. logit('voiture') − logit('chien') at its position.")
SWITCH_OFF = ("Pick heads to remove together. The score and every later layer's attention maps "
              "are recomputed with those heads switched off. A switched-off head's own map is "
              "unchanged (the gate sits after its softmax); the layers above it read a "
              "different input, so their maps move.")
PUBLISHED = (
    "**Published results.** Michel, Levy & Neubig (2019, *Are Sixteen Heads Really Better "
    "than One?*) pruned heads by this gradient importance: BERT fine-tuned on MNLI kept its "
    "accuracy with about 40% of its heads removed (WMT translation: about 20%), and many "
    "layers could be cut to a single head. Voita et al. (2019, *Analyzing Multi-Head "
    "Self-Attention: Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned*) removed "
    "38 of the 48 encoder heads of an English-Russian translation model for a drop of 0.15 "
    "BLEU. Those are task accuracies averaged over a test set; here the score is measured on "
    "one text, so expect a noisier curve.")
KIND_GOES_FIRST = ("Which kind goes first: Michel et al. (2019) found the encoder-decoder "
                   "attention of a translation model far more sensitive to pruning than its "
                   "self-attention. A kind whose line stays high is one the ranking keeps.")


def measured_on_this_page(described: str) -> str:
    """What a target metric measures, said above the page's maps (described: escaped)."""
    return (f"**Measured on this page:** {described}. Higher means the target is more "
            f"likely: a head that helps it makes the metric fall when it is switched off.")


def ablation_cells(target_metric: bool, baseline: str) -> str:
    """What a cell of the ablation map is, with the score with every head on."""
    if not target_metric:
        return (f"Each cell: score with that head switched off − score with every head on "
                f"({baseline}). Exact: one forward pass per head, reusing the layers below "
                f"each head.")
    return (f"Each cell: the metric with every head on ({baseline}) − the metric with that "
            f"head switched off: what the head adds to the target. Exact: one forward pass per "
            f"head.")


def map_change(n_off: int, lowest: int) -> str:
    return (f"**How much each head's map moved** with {n_off} head(s) off: the mean over query "
            f"tokens of the total-variation distance between the two maps (0 = unchanged, 1 = "
            f"no overlap). Layers up to L{lowest} cannot change.")


def compared_head(picked: tuple[int, int], lowest: int, n_layer: int, name: str,
                  switched_off: bool) -> str:
    """Why the head compared before and after is not the one picked (its map cannot move),
    and whether it is switched off itself; "" when there is nothing to say."""
    note = ""
    if picked[0] <= lowest and lowest == n_layer - 1:
        note = (f"Every switched-off head is in the last layer (L{lowest}): no attention map "
                f"can change, only the score. ")
    elif picked[0] <= lowest:
        note = (f"{head_name(*picked)} sits at or below the lowest switched-off layer "
                f"(L{lowest}), so its map cannot change: showing {name}, the head whose map "
                f"moved most. Pick a layer above L{lowest} to choose another. ")
    if switched_off:
        note += ("This head is switched off itself: its map is what its softmax computed, but "
                 "its output no longer reaches the layers above.")
    return note


def gradient_caption(metric, second_order: bool, total_heads: int) -> str:
    """What the gradient importance is, or why its second-order form costs more than the
    sweep it estimates."""
    if second_order:
        return ("The embedding shift is at its minimum (0) with every head on, so its gradient "
                "there is exactly 0, and no single backward pass estimates it. The "
                "second-order estimate ½‖∂e/∂ξ‖² (e = the normalized embedding, ξ the head's "
                f"gate) needs one forward-mode pass per head, {total_heads} of them, each "
                "dearer than a forward pass: **it costs more than the exact ablation sweep "
                "above, which measures the same thing exactly; use the sweep.** The estimate is "
                "here to compare with it.")
    return (f"I = |∂ {'score' if metric is None else 'metric'} / ∂ξ| for each head's gate ξ at "
            "ξ = 1: one backward pass estimates every head's importance at once (a first-order "
            "estimate of the ablation effect).")


def seq2seq_ablation_cells(target_metric: bool, scored: str, base: float,
                           described: str) -> str:
    """An encoder-decoder's score with every head on, and what a cell of its maps is."""
    if not target_metric:
        return (f"The score is the cross-entropy of {scored}, teacher-forced: {base:.3f} "
                f"nats/token with every head. Each cell is that loss with one head switched "
                f"off (its output multiplied by 0 before W_O) minus the loss with every head: "
                f"positive = the model needs the head here. Every head of the encoder, the "
                f"decoder and the cross-attention is measured (one forward each, in a batch).")
    return (f"**Measured:** {described}, teacher-forced on {scored}: {base:.3f} with every "
            f"head. Each cell is that minus the metric with one head switched off: what the "
            f"head adds to this token.")


def seq2seq_gradient(r: float | None) -> str:
    return ("One backward pass gives every head's derivative at once: a first-order estimate "
            "of the ablation effect above. "
            + (f"Over the heads of all three kinds it correlates with the size of the exact "
               f"effect at r = {r:.2f}." if r is not None else ""))


def saturated(base: float) -> str:
    return (f"The loss is nearly 0 ({base:.3f}): the model is almost certain of every token, "
            f"its softmax is saturated, and derivatives there are tiny even for heads whose "
            f"removal costs nats. Rank by the ablation effect instead, or give a target the "
            f"model finds harder.")


# while a sweep nobody prepared runs (issue 57 item 9: 39 s to the first figure in class)
NOT_PREPARED = ("Not prepared for this text yet: **Prepare every page**, on Home, runs this "
                "ahead for your text, so that in class the page opens at once.")
