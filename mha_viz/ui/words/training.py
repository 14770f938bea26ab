"""The words of the Training page's composition figure: what each source of a head's keys
is called, the curves' labels, and the sentence that says what the figure shows (Olsson et
al. 2022: the induction head reads the previous-token head through its keys)."""

from __future__ import annotations

from ...analysis.heads import head_name

BEFORE_HEADS = {"embed": "the token embeddings", "pos_embed": "the position embeddings",
                "type_embed": "the segment embeddings", "bias": "the biases",
                "position_bias": "the relative position bias"}
SHOWN_SOURCE = 0.15  # a source that is not a head is drawn when its share reaches this


def source_words(n_layer: int) -> dict[str, str]:
    """Each source of a head's input that is not a head, by its name in
    CompositionOverTraining.other, in words."""
    return {**BEFORE_HEADS, **{f"L{m}.mlp": f"the layer-{m} MLP" for m in range(n_layer)}}


def score_label(layer: int, head: int) -> str:
    return f"induction score of {head_name(layer, head)} (on the probe)"


def share_label(source: str, reader: str, previous: bool = False) -> str:
    return (f"share of {reader}'s keys from {source}"
            + (",\nthe previous-token head" if previous else ""))


def share_labels(sources: list[str], not_heads, reader: tuple[int, int],
                 previous: tuple[int, int] | None, n_layer: int
                 ) -> tuple[dict[str, str], list[str]]:
    """Each source's curve label ({source: label}), and the labels drawn in colour: the
    previous-token head's first, then every source that is not a head (`not_heads`)."""
    said_as, reading = source_words(n_layer), head_name(*reader)
    previous_name = None if previous is None else head_name(*previous)
    labels = {source: share_label(said_as.get(source, source), reading,
                                  source == previous_name) for source in sources}
    named = [labels[s] for s in sources if s == previous_name]
    named += [labels[s] for s in sources if s in not_heads]
    return labels, named


def composition_caption(found, reader: tuple[int, int], previous: tuple[int, int] | None,
                        largest: tuple[str, float], phase: int | None) -> str:
    """What the figure shows, with the numbers read off it: the previous-token head's share
    of the reader's key side at the first step, around the phase change and at the last,
    and which source is largest at the end (a head, or a part that is not one)."""
    steps = [int(s) for s in found.steps]
    name = head_name(*reader)
    said = (f"**Why the induction head forms when it does.** Olsson et al. (2022): an "
            f"induction head finds the token after an earlier copy of the current one by "
            f"reading, through its **keys**, what a **previous-token head** wrote at each "
            f"position (K-composition). Each coloured line is one source's share of what "
            f"shapes {name}'s scores through its keys (docs/analyses.md, \"Why a head "
            f"attends\"), on the probe's first sequence; the dotted black line is {name}'s "
            f"induction score. ")
    if previous is None:
        return said
    share = found.share("k", *previous)
    points = [(steps[0], share[0])]
    if phase is not None and phase in steps and 0 < steps.index(phase):
        k = steps.index(phase)
        points += [(steps[k - 1], share[k - 1]), (phase, share[k])]
    points.append((steps[-1], share[-1]))
    values = ", ".join(f"{v:.2f} at step {s:,}" + (" (the phase change)" if s == phase else "")
                       for s, v in dict(points).items())
    said += f"The share of {head_name(*previous)}, the previous-token head: {values}. "
    source, value = largest
    if source == head_name(*previous):
        return said + f"At the last step it is the largest of every source ({value:.2f})."
    return said + (f"At the last step the largest share is {source}'s ({value:.2f}), not the "
                   f"previous-token head's: the split credits each part of the stream to the "
                   f"layer that wrote it, so a layer that rewrites what a head wrote takes "
                   f"that credit.")


PROBE_MAP = ("Right: the chosen head on the probe's first sequence (BOS, then R, then R again). "
             "An induction head lights the stripe one above the diagonal of the second copy's "
             "block: from each token to the token after its first occurrence.")


def probe_caption(phase: int | None, probe: str, texts: str) -> str:
    """Under the loss curves: the phase change, and what the probe and the texts are
    (probe, texts: escaped)."""
    return ((f"Marked: the phase change, where the loss on the probe's repeated copy falls "
             f"fastest (per log-step), at step {phase:,}. " if phase else "")
            + f"Probe: {probe} (BOS R R): its first copy of R is random tokens, which no model "
              f"can predict (at best its loss stays near a uniform guess's, and it may rise as "
              f"the model fits its training text); the repeated copy can be copied from the "
              f"first. Texts: {texts}.")


def named_caption(named: str) -> str:
    return (f"Named: {named} (the highest at any step; for entropy the most focused at the last "
            f"step). Layers and heads count from 0.")
