"""The words of the Circuits page: what each direction of patching does, what each ablation
of a circuit test replaces a head's output by, the one scale every patching view shares and
the one meaning of its colours (stated once, above the results), what a map's darkest cells
say, a map of noise, and the circuit's figures with their definitions (one name, one
definition and one format, %, each)."""

from __future__ import annotations

# The direction radio's captions (patching.DIRECTIONS are the command line's own words)
DIRECTION_CAPTIONS = {
    "denoise": "The corrupted run with one clean activation (what suffices).",
    "noise": "The clean run with one corrupted activation (what is necessary).",
}
ABLATIONS = {"mean": "mean ablation (the mean over the reference prompts, position by position)",
             "resample": "resample ablation (one reference prompt's activation per pair)",
             "zero": "zero ablation (the head's output removed)"}

# stated once on the page, above whichever result is shown
COLOURS = ("**Colours on this page:** one scale in every view, from the corrupted run's "
           "metric (0) to the clean run's (1). Each cell is how far its patch moved the "
           "metric along it: **red** toward the clean answer (it helps the target; +1 is the "
           "whole way), **blue** toward the corrupted one (−1), white not at all. Every map "
           "is coloured on the same fixed scale, −1 to +1, so pale cells are small effects. "
           "In the circuit graph, a red edge helps the clean answer and a blue one works "
           "against it.")
SCALE_TITLE = "moved toward clean (+) / corrupted (−)"


def moved(effect: float) -> str:
    """One effect in words: how far, and toward which run."""
    toward = "clean" if effect > 0 else "corrupted"
    return f"{effect:+.2f}: {abs(effect):.0%} of the way toward the {toward} run"


def darkest(ranked, level: float, n: int = 3) -> str:
    """The darkest cells of a map (patching.strongest_components' (name, effect, value)
    rows, strongest first) in words, those above the noise level only."""
    shown = [f"{name} ({moved(effect)})" for name, effect, _ in ranked[:n]
             if abs(effect) >= level]
    if not shown:
        return ""
    return "Darkest: " + "; ".join(shown) + "."


def noise_note(level: float, what: str) -> str:
    """A map whose every cell is within the noise level, in words."""
    return (f"Nothing here stands out from noise: every {what} moved the metric less than "
            f"{level:.0%} of the way between the runs (±{level:.2f} on the scale), so the "
            f"map stays pale on the fixed scale rather than stretching its colours over "
            f"noise.")


# --- the circuit: three figures, one name, one definition and one format each ------------

RECOVERED = "Recovered by the kept edges"
RECOVERED_HELP = ("The metric with only the kept edges carrying the clean run (every other "
                  "edge given its corrupted value), on the same scale as patching: 0% = the "
                  "corrupted run's metric, 100% = the clean run's.")
FAITHFULNESS = "Faithfulness of its heads"
NECESSITY = "Necessity of its heads"


def circuit_caption(recovered: float) -> str:
    return (f"**{RECOVERED}: {recovered:.0%}** of the way from the corrupted run's metric "
            f"(0%) to the clean run's (100%), with only these edges carrying the clean run. "
            f"Click a head to open its attention map on the clean prompt.")


def heads_test_caption(faithfulness: float, necessity: float, without: float,
                       model_metric: float) -> str:
    """The two ratios of the heads test defined where they are shown, and a share over
    100% explained."""
    said = (f"**{FAITHFULNESS}** = F(C) / F(M): the metric with every head outside the "
            f"circuit ablated, as a share of the model's own ({faithfulness:.0%}; Wang et al. "
            f"2023 report 87% for GPT-2 small's indirect-object circuit). **{NECESSITY}** = "
            f"1 − F(M \\ C) / F(M): the share of the model's metric lost when the circuit's "
            f"heads alone are ablated ({necessity:.0%}).")
    if necessity > 1:
        said += (f" Over 100%: with the circuit's heads ablated the metric does not just "
                 f"fall to 0 but past it (F(M \\ C) = {without:.3f} against F(M) = "
                 f"{model_metric:.3f}): the model then prefers the contrast.")
    elif faithfulness > 1:
        said += (" Over 100%: the circuit alone does the task better than the whole model "
                 "(the heads outside it were working against the target, on the whole).")
    return said


# --- fields set for another clean prompt -------------------------------------------------

FIELD_NAMES = {"corrupted": "the corrupted prompt", "c_target": "the target token",
               "c_contrast": "the contrast token"}


def stale_note(stale: list[str], made_for: str) -> str:
    """Fields set for a clean prompt that is no longer the one typed."""
    names = [FIELD_NAMES[name] for name in stale]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return (f"**The clean prompt changed.** {listed[0].upper()}{listed[1:]} "
            f"{'was' if len(names) == 1 else 'were'} set for the previous one "
            f"(“{made_for}”): nothing is patched until they fit the new prompt. Edit them "
            f"(or swap a token below, or click one of the model's predictions for the "
            f"target), or keep them as they are.")


KEEP_BUTTON = "Keep them for the new prompt"
