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


# --- the page's choices ------------------------------------------------------------------

INTRO = ("Which heads *cause* the model's answer? Type a clean prompt and a corrupted one that "
         "differs in one name, and patch: run one prompt with one component's activation taken "
         "from the other, for every head, position and path. The heads whose activation moves "
         "the answer form the circuit (Wang et al. 2023, the indirect-object circuit).")
METRIC_HELP = {
    "logit_diff": "logit(target) − logit(contrast) at the last position: how much more the "
                  "model prefers the target (Wang et al. 2023's measure for the IOI task).",
    "logit": "The target's logit at the last position (before the softmax).",
    "logprob": "log p(target) at the last position: the logit after the softmax, so every "
               "other token's logit moves it too.",
}
DIRECTION_HELP = ("Denoising runs the corrupted prompt and restores one clean activation: a "
                  "component that alone brings the answer back is sufficient. Noising runs the "
                  "clean prompt and breaks one activation: a component whose loss hurts is "
                  "necessary. Either way a cell is how far the patch moved the metric on one "
                  "scale, 0 = the corrupted run, 1 = the clean run.")
VIEWS = {"heads": "Heads", "positions": "Positions", "attribution": "Attribution vs exact",
         "paths": "Path patching", "circuit": "Circuit graph"}
STREAMS = {"resid_pre": "residual stream entering the layer", "attn_out": "attention output",
           "mlp_out": "MLP output"}
SOURCES = {"one": "this pair", "ioi": "N generated IOI pairs", "file": "pairs from a file"}
LEADING_SPACE = ("Leading-space rule: tokenizers like GPT-2's and SmolLM2's write a word that "
                 "follows a space as one token that starts with the space (shown ␣Mary), so "
                 "type the target as ' Mary'. A target the model would write differently is "
                 "refused with the spelling to use.")
OWN_PROMPTS = "This page takes its own two prompts; the sidebar's text is for the other pages."
POSITIONS = ("Each cell: how far patching that layer's vector at that position moved the "
             "metric (the scale above). Information moves from the differing token (★) to the "
             "last position as the layers climb.")
ATTRIBUTION = ("Attribution patching estimates every head's effect from one backward pass (a "
               "first-order Taylor step from the run being patched). Where the points leave "
               "the diagonal the estimate cannot be trusted: usually heads whose patch moves "
               "the metric far, through a softmax or a norm.")
PATHS_WAIT = ("Path patching runs the clean prompt with one sender head's output taken from the "
              "corrupted run while every other head is frozen at its clean output, so only the "
              "sender's direct path to the receiver changes: one run per sender head.")
RECEIVER_HELP = ("Logits: each sender head's effect through paths that reach the output "
                 "without passing another head. A head: its effect on that head's input (click "
                 "a head in the Heads view).")
PART_HELP = ("Which input of the receiver head takes the senders' paths: queries, keys or "
             "values.")
EDGES_HELP = ("The circuit is the strongest edges by |score|; its faithfulness is measured "
              "exactly with everything else corrupted.")
TESTED = ("**The circuit's heads, tested** (Wang et al. 2023: ablate every head outside the "
          "circuit, then the circuit's heads alone)")
NO_HEADS = ("The drawn circuit holds no attention head (only the embeddings, MLPs and the "
            "logits): there is nothing to ablate.")
SEQ2SEQ_PAIR = ("The sidebar's source is the clean one; type a corrupted source that differs in "
                "one word (or digit). The decoder reads the same target after both: the "
                "sidebar's target, or the model's own output for the clean source.")
SAME_ANSWER = ("The decoder writes the same tokens after both sources (teacher-forced on the "
               "clean target): the corruption changes no answer, so there is nothing to patch. "
               "Change another word.")
SEQ2SEQ_DIRECTIONS = {"denoise": "clean into corrupted (denoising)",
                      "noise": "corrupted into clean (noising)"}


def not_causal(name: str) -> str:
    return (f"**{name}** is not a causal language model (it has no next-token prediction to "
            f"measure), so there is no answer to patch. Pick SmolLM2 or GPT-2 in the sidebar.")


def paths_caption(receivers: str) -> str:
    """What a cell of the path patching map is (receivers: escaped)."""
    return (f"Each cell: the clean run with that sender's path into {receivers} taken from the "
            f"corrupted run, every other head frozen at its clean output: how far that moved the "
            f"metric (the scale above). A sender whose path carries what the answer needs moves "
            f"it toward the corrupted run.")


def ioi_pairs(n: int, first: str) -> str:
    """The generated pairs (first: the first clean prompt, escaped)."""
    return (f"{n} indirect-object pairs (ABBA and BABA templates), each with its own target (the "
            f"indirect object) and contrast (the subject); the first: “{first}”.")


def seq2seq_measured(clean: str, corrupted: str, position: int) -> str:
    """The metric an encoder-decoder is patched on (tokens escaped)."""
    return (f"**Measured:** logit('{clean}') − logit('{corrupted}') at target position "
            f"{position}, the first token the corruption changes.")


def seq2seq_runs(clean: float, corrupted: float) -> str:
    return (f"Clean run: {clean:.3f} (1 on the scale); corrupted run: {corrupted:.3f} (0). Each "
            f"cell: the metric with one head's output (its z, before W_O) taken from the other "
            f"run, and how far that moved it: **red** toward the clean run (+1 the whole way), "
            f"**blue** toward the corrupted one (−1). The three maps share one colour scale, −1 "
            f"to 1.")
