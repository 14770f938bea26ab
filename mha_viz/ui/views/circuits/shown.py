"""What the Circuits page shows for each choice, computed from the library's results (no
drawing): the pairs' short name, what runs by itself, the Heads view's "Show" choices and the
map each one gives, the texts of a result's map, path patching's receivers, the tables of
heads and edges, and how a deep model's head map lies on the screen."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....analysis import patching
from ....analysis.encoder_decoder_ablation import total_heads
from ....analysis.heads import head_name, parse_head_name
from ....models.seq2seq import KIND_NAMES
from ...output import STACKED_BELOW_PX, viewport
from ...settings import runs_on_open
from ...traces import figure_tag
from ...words import circuits as words
from ...words.circuits import VIEWS

FIXED_SPAN = 1.0  # every patching map: -1 (the whole way to corrupted) to +1 (to clean)
KIND_TITLES = {kind: label[:1].upper() + label[1:] for kind, label in KIND_NAMES.items()}


# --- keys and what runs by itself ------------------------------------------------------------


def pairs_digest(pairs) -> str:
    """A short name of the pairs a figure shows (its meta "pairs", for tests and benchmarks)."""
    return figure_tag(pairs)


def runs_by_itself(model, pairs) -> dict[str, bool]:
    """Which of the page's views (VIEWS) computes on opening, without waiting for a button:
    every view but path patching (one run per sender head), for one pair as short as
    settings.RUNS_ON_OPEN["circuits.patching"] says."""
    short = len(pairs) == 1 and runs_on_open("circuits.patching",
                                             model.n_tokens(pairs[0].clean))
    return {view: short and view != "paths" for view in VIEWS}


def seq2seq_runs_by_itself(model) -> bool:
    """An encoder-decoder is patched on opening when it has at most as many heads of every
    kind together (one run per head) as RUNS_ON_OPEN["circuits.seq2seq_patching"] says."""
    return runs_on_open("circuits.seq2seq_patching", total_heads(model))


# --- what a choice shows ---------------------------------------------------------------------


def effect_choices(n_pairs: int, pairs) -> dict:
    """The Heads view's "Show" options over several pairs, each with how it reads: "mean",
    "std" and each pair by its index (an int)."""
    labels = {"mean": f"mean over {n_pairs} pairs", "std": "spread: standard deviation over pairs"}
    labels.update({number: f"pair {number}: {pair.clean}" for number, pair in enumerate(pairs)})
    return labels


def effect_label(labels: dict, choice) -> str:
    """How the "Show" box reads ``choice``. The browser hands the box back an option's
    position; AppTest may name a pair as its label starts, "pair 2": both read alike."""
    named = {f"pair {number}": number for number in labels if isinstance(number, int)}
    return labels[named.get(choice, choice)]


@dataclass(frozen=True)
class ShownEffect:
    """What the head map shows for one "Show" choice."""
    values: np.ndarray  # the colours
    raw: np.ndarray  # the patched metric under each cell
    what: str
    unit: str  # the colour bar's title
    span: float | None = FIXED_SPAN  # the colour scale's half-width (None: the largest value)


def shown_effect(result: patching.PatchingResult, choice) -> ShownEffect:
    """The head map of ``choice``: "mean" (the effect over pairs), "std" (its spread) or a
    pair's index."""
    if choice == "mean":
        return ShownEffect(result.effect, result.values, "mean normalized effect",
                           words.SCALE_TITLE)
    if choice == "std":
        return ShownEffect(result.std, result.values, "std of the normalized effect", "std",
                           None)
    return ShownEffect(result.per_pair_effect[choice], result.per_pair[choice],
                       f"normalized effect on pair {choice}", words.SCALE_TITLE)


def heads_caption(result: patching.PatchingResult) -> str:
    """What a cell of the head map is, in the result's direction, with both runs' metrics."""
    runs = (f"The corrupted run's metric is {result.corrupted:.3f} (0 on the scale), the "
            f"clean run's {result.clean:.3f} (1).")
    if result.direction == "denoise":
        return (f"Each cell: the corrupted run with that head's output (before W_O) restored "
                f"from the clean run, and how far that moved the metric. {runs} A head that "
                f"brings the clean answer back by itself is sufficient. Click a head to trace "
                f"the paths into it.")
    return (f"Each cell: the clean run with that head's output (before W_O) taken from the "
            f"corrupted run, and how far that moved the metric. {runs} A head whose "
            f"corruption moves it toward the corrupted run is necessary. Click a head to "
            f"trace the paths into it.")


def heads_title(direction: str, what: str) -> str:
    return f"{'Denoising' if direction == 'denoise' else 'Noising'}: {what}"


def receiver_names(n_layer: int, n_head: int) -> list[str]:
    """Path patching's receivers: the logits, then every head above layer 0 (a head of
    layer 0 has no sender below it)."""
    return ["logits"] + [head_name(layer, head) for layer in range(1, n_layer)
                         for head in range(n_head)]


def path_receivers(receiver: str, part: str):
    """path_patching's receivers for a receiver name: "logits", or [(layer, head, part)]."""
    if receiver == "logits":
        return "logits"
    return [(*parse_head_name(receiver), part)]


def strongest_table(ranked) -> dict[str, list[str]]:
    """patching.strongest_components' (name, effect, patched metric) rows as table columns."""
    return {"head": [name for name, _, _ in ranked],
            "normalized effect": [f"{effect:+.3f}" for _, effect, _ in ranked],
            "patched metric": [f"{value:.3f}" for _, _, value in ranked]}


def edge_table(edges, n: int = 10) -> dict[str, list[str]]:
    """The first ``n`` edges of a circuit, as shown."""
    return {"edge": [f"{e.upstream} → {e.downstream}" for e in edges[:n]],
            "score": [f"{e.score:+.4f}" for e in edges[:n]]}


def edge_columns(edges) -> dict[str, list]:
    """Every edge of a circuit as the CSV's columns."""
    return {"upstream": [e.upstream for e in edges],
            "downstream": [e.downstream for e in edges],
            "score": [e.score for e in edges]}


def seq2seq_table(ranked, direction: str) -> dict[str, list]:
    """Seq2SeqPatching.strongest's (kind, layer, head, share) rows as table columns."""
    return {"head": [head_name(layer, head) for _, layer, head, _ in ranked],
            "kind": [KIND_TITLES[kind] for kind, _, _, _ in ranked],
            "share restored" if direction == "denoise" else "share lost":
                [round(value, 3) for _, _, _, value in ranked]}


def layers_across() -> bool | None:
    """Head maps of a deep model run their layers across a wide screen, down a phone's."""
    size = viewport()
    return False if size is not None and size["width"] < STACKED_BELOW_PX else None
