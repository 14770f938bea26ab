"""What every result of the Circuits page reads (``Patched``): the pairs to patch (one pair
typed here, generated indirect-object pairs or a file of them), the metric and the
direction, what runs by itself and the result chosen; built by ``patched``, which draws the
fields above the results."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from .... import ui
from ....analysis import patching, prompts
from ....core.errors import MhaVizError
from ...words import circuits as words
from . import prompts as pair
from .shown import runs_by_itself

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
TARGET, CONTRAST = " Mary", " John"
MAX_IOI = 256


@dataclass(frozen=True)
class Patched:
    """The pairs and the choices every result view reads."""
    selection: ui.Selection
    pairs: list  # prompts.PromptPair
    metric: str  # the metric's kind: "logit_diff", "logit" or "logprob"
    direction: str  # "denoise" or "noise"
    view: str  # the result shown (words.VIEWS)
    auto: bool  # whether that result computes by itself on opening

    @property
    def model(self):
        return self.selection.model


def patched(selection: ui.Selection) -> Patched | None:
    """The pairs and choices, or None (said on the page) when there is nothing to patch."""
    model = selection.model
    st.caption(words.OWN_PROMPTS)
    pairs, metric, direction = pair_inputs(model)
    if pairs is None:
        return None
    try:  # tokenization only: says what is wrong with which pair before anything runs
        patching.prepare_pairs(model, pairs, None, metric)
    except MhaVizError as error:
        ui.show_error(error)
        return None
    auto = runs_by_itself(model, pairs)
    st.divider()
    view = ui.synced(st.radio, "c_view", "Result", "heads", options=list(words.VIEWS),
                     format_func=words.VIEWS.get, horizontal=True)
    st.caption(words.COLOURS)
    return Patched(selection, pairs, metric, direction, view, auto[view])


def pair_inputs(model):
    """The pairs to patch and their metric kind and direction, from the widgets (pairs None:
    nothing to run)."""
    source = ui.synced(st.radio, "c_pairs", "Patch over", "one", options=list(words.SOURCES),
                       format_func=words.SOURCES.get, horizontal=True,
                       help="Results are the mean over the pairs; each pair's values are one "
                            "click away in the Heads view.")
    clean, corrupted, target, contrast, comparison, stale = one_pair(model, source)
    metric_col, direction_col = st.columns(2)
    metric = ui.synced(metric_col.radio, "c_metric", "Metric", "logit_diff",
                       options=list(ui.METRIC_LABELS), format_func=ui.METRIC_LABELS.get,
                       horizontal=True, help=" ".join(words.METRIC_HELP.values()))
    metric_col.caption(words.METRIC_HELP[metric])
    direction = ui.synced(direction_col.radio, "c_dir", "Direction", "denoise",
                          options=list(patching.DIRECTIONS), horizontal=True,
                          help=words.DIRECTION_HELP)
    direction_col.caption(words.DIRECTION_CAPTIONS[direction])
    if source == "one":
        if comparison is None or stale or not clean.strip() or not corrupted.strip():
            return None, metric, direction
        return [prompts.PromptPair(clean, corrupted, target,
                                   contrast if metric == "logit_diff" else None)], metric, \
            direction
    if source == "ioi":
        return ioi_pairs_input(model), metric, direction
    return pairs_file_input(), metric, direction


def one_pair(model, source: str):
    """The clean and corrupted prompts, the target and contrast, their tokens compared, and
    which fields were set for another clean prompt (said, with the helpers that fix them).
    -> (clean, corrupted, target, contrast, comparison or None, stale fields)."""
    clean = ui.synced(st.text_input, "clean", "Clean prompt", CLEAN,
                      help="The prompt on which the model does the behaviour.")
    corrupted = ui.synced(st.text_input, "corrupted", "Corrupted prompt", CORRUPTED,
                          help="The same prompt with the information that matters changed "
                               "(here the repeated name), with the same number of tokens.")
    stale_place = st.empty()  # filled below, once every field that depends on it is read
    comparison = None
    try:
        comparison = prompts.compare_prompts(model, clean, corrupted)
    except MhaVizError as error:
        ui.show_error(error)
    if comparison is not None:
        pair.show_tokens(comparison)
    target_col, contrast_col = st.columns(2)
    target = ui.synced(target_col.text_input, "c_target", "Target token", TARGET,
                       help="The answer on the clean prompt, one token. A word after a space "
                            "is its own token with the space: ' Mary', not 'Mary'.")
    contrast = ui.synced(contrast_col.text_input, "c_contrast", "Contrast token", CONTRAST,
                         help="The answer the corrupted prompt pushes towards (used by the "
                              "logit difference).")
    st.caption(words.LEADING_SPACE)
    stale, made_for = pair.stale_fields(clean, {"corrupted": corrupted, "c_target": target,
                                                 "c_contrast": contrast})
    if source == "one" and stale:
        pair.stale_warning(stale_place, stale, made_for, clean)
    fresh = comparison is not None and "corrupted" not in stale
    if clean.strip():
        pair.swap_helper(model, clean, memo_tokens(model, clean),
                         comparison.differing[0] if fresh and comparison.differing else None,
                         expanded="corrupted" in stale)
        pair.prediction_pills(model, clean, corrupted if fresh else None)
    return clean, corrupted, target, contrast, comparison, stale


def memo_tokens(model, text: str) -> list[str]:
    """The text's tokens as shown (one prompt compared with itself)."""
    return ui.memo(prompts.compare_prompts, model, text, text).clean_tokens


def ioi_pairs_input(model) -> list[prompts.PromptPair]:
    """N generated indirect-object pairs, from a number and a seed."""
    n_col, seed_col = st.columns(2)
    n = ui.synced(n_col.number_input, "c_n", "Pairs", 16, min_value=1, max_value=MAX_IOI,
                  valid=lambda v: 1 <= int(v) <= MAX_IOI)
    seed = ui.synced(seed_col.number_input, "c_seed", "Seed", 0, min_value=0,
                     max_value=2**31 - 1, valid=lambda v: 0 <= int(v) < 2**31)
    pairs = ui.memo(prompts.ioi_pairs, model, n=int(n), seed=int(seed))
    st.caption(words.ioi_pairs(len(pairs), ui.md_escape(pairs[0].clean)))
    return pairs


def pairs_file_input() -> list[prompts.PromptPair] | None:
    """The pairs of an uploaded file (None until one is uploaded)."""
    upload = st.file_uploader("Pairs file (.csv or .jsonl: clean, corrupted, target, contrast)",
                              type=["csv", "jsonl"], key="_mv_pairs_file")
    if upload is None:
        st.info("Upload a file of prompt pairs to patch over them.")
        return None
    pairs = ui.memo(prompts.read_pairs, upload.getvalue(), name=upload.name)
    st.caption(f"{len(pairs)} pairs from the file.")
    return pairs
