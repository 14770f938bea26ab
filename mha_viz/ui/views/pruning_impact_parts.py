"""The Pruning impact page's parts (views/pruning_impact.py reads them): what a head's removal
is measured by, the pruning curve (one section for every kind of model), and an
encoder-decoder's whole view."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import streamlit as st

from ... import plots
from ...analysis import encoder_decoder_ablation as seq2seq_ablation
from ...analysis import heads, pruning
from ...models.seq2seq import KIND_NAMES, KINDS
from ...server import export
from ..jobs import run_or_wait
from ..stores import memo
from ..traces import get_run
from ..controls import target_metric_picker
from ..output import caveat, download_csv, show_figure
from ..settings import md_escape, runs_on_open
from ..state import synced
from ..words import pruning as words

TOP = 5  # rows of the tables of heads; the model's guesses offered as a target
SATURATED_LOSS = 0.05  # nats/token: below it gradients say little about removal


def curve_controls(default_by: str) -> tuple[str, float]:
    """What the pruning curve ranks heads by, and the share of heads removed per step."""
    left, right = st.columns(2)
    with left:
        by = synced(st.radio, "by", "Remove first the heads with the smallest", default_by,
                    options=list(words.CURVE_RANKINGS), format_func=words.CURVE_RANKINGS.get,
                    horizontal=True, help="After each step the importance of the remaining "
                                          "heads is estimated again (Michel et al.'s iterative "
                                          "pruning).")
    with right:
        step = synced(st.radio, "step", "Heads removed per step", 0.1, options=[0.1, 0.05],
                      format_func=lambda s: f"{s:.0%}", horizontal=True)
    return by, step


def pruning_curve_section(heading: str, default_by: str, total_heads: int,
                          run: Callable, *, baseline: float, score_unit: str, title: str,
                          table: Callable, file_stem: str, refused: str | None = None,
                          after_figure: Callable | None = None) -> None:
    """The pruning curve: its controls, ``run(by, step, per_step, steps)`` (the curve, or None
    while it waits for its button), the figure and its CSV (``table(curve)``). ``refused``: why a
    gradient ranking cannot run here. ``after_figure(curve)`` draws more below the figure."""
    st.subheader(heading)
    by, step = curve_controls(default_by)
    if refused and by == "gradient":
        st.info(refused + " Rank the heads by their ablation effect instead.")
        return
    curve = run(by, step, *pruning.curve_steps(total_heads, step))
    if curve is None:
        st.info("The curve re-estimates importance after every step; press the button to run "
                "it. A bar shows its progress.")
        return
    fig = plots.pruning_curve_figure(
        curve.fractions, curve.scores, baseline=baseline, score_name=score_unit,
        title=f"{title} as heads are removed (by {words.CURVE_RANKINGS[by]})")
    show_figure(fig, key="curve", alt="Pruning curve")
    if after_figure is not None:
        after_figure(curve)
    download_csv(partial(export.table_csv, table(curve)),
                 export.safe_filename(file_stem, "pruning_curve", by, suffix=".csv"),
                 "Pruning curve as CSV", key="dl_curve")


def target_metric(selection, trace):
    """The target-metric controls, with the model's own top two guesses as defaults."""
    model = selection.model
    if model.info.causal:
        run = get_run(selection)  # shared with the Predictions page: one forward for both
        pred = memo(run.predict, k=TOP)
        return target_metric_picker(model, pred.tokens, range(len(pred.tokens)),
                                    lambda p: pred.top_ids[p][:2])

    def fillers(position: int):
        return memo(model.predict, selection.text, k=TOP, masked_positions=[position],
                    max_tokens=selection.max_tokens).top_ids[0][:2]

    ordinary = [i for i in range(trace.n_tokens) if not trace.special_mask[i]]
    return target_metric_picker(model, trace.display_tokens, ordinary, fillers)


def _measure_choice(score: str, example: str) -> str:
    """ "score" (the model's score, labelled ``score``) or "target" (a target metric)."""
    return synced(st.radio, "measure", "Measure each head by", "score",
                  options=["score", "target"], horizontal=True,
                  format_func={"score": score, "target": "one prediction (a target metric)"}.get,
                  help=example)


def measure(selection, trace, score_tokens: int):
    """What a head's removal is measured by: the model's own score, or (models with an LM
    head) one prediction's target metric, chosen as on the Predictions page; said on the page.
    Returns (the metric or None, the score's label)."""
    model, info = selection.model, selection.model.info
    chosen = "score"
    if info.has_lm_head:
        chosen = _measure_choice(f"the model's score ({info.score_short_name})",
                                 "A target metric asks which heads make one prediction, e.g. "
                                 "logit(' Mary') − logit(' John') at the last token of an "
                                 "indirect-object sentence (Wang et al. 2023).")
    if chosen != "target":
        st.markdown(f"**Score used on this page:** {md_escape(info.score_name)}. "
                    f"{info.score_explanation}")
        return None, info.score_short_name
    metric = target_metric(selection, trace)
    described = model.resolve_metric(metric, score_tokens).description
    st.markdown(f"**Measured on this page:** {md_escape(described)}. Higher means the target "
                f"is more likely: a head that helps it makes the metric fall when it is "
                f"switched off.")
    return metric, described


def scored_tokens_notes(trace, score_tokens: int) -> None:
    """Where the scores read other tokens than the maps show: sentence A of a pair only, or
    more tokens than *Max tokens* keeps."""
    if trace.is_pair:
        st.caption("The scores read sentence A only (the model's score takes one text); the "
                   "attention maps below show the sentence pair.")
    elif score_tokens != trace.n_tokens:
        st.caption(f"The scores use {score_tokens} tokens (up to the model's context), the "
                   f"maps the first {trace.n_tokens} (*Max tokens* in the sidebar).")


def encoder_decoder_measure(selection):
    """The score measured on an encoder-decoder: the target's teacher-forced loss (None), or
    one target position's metric (defaults: the decoder's top two guesses there)."""
    chosen = _measure_choice("the target's loss (nats/token)",
                             "A target metric asks which heads make one token of the output, "
                             "e.g. logit('voiture') − logit('chien') at its position.")
    if chosen != "target":
        return None
    pred = memo(selection.model.predict, selection.text, target=selection.target, k=TOP)
    return target_metric_picker(selection.model, pred.tokens, range(len(pred.tokens)),
                                lambda p: pred.top_ids[p][:2], decoder=True)


def encoder_decoder_pruning(selection, seq) -> None:
    """An encoder-decoder: the exact ablation effect and the gradient importance of every head
    of every kind (the sidebar's kind drawn), and the pruning curve over all of them."""
    model, kind, source, target = (selection.model, selection.kind, selection.text,
                                   selection.target)
    metric = encoder_decoder_measure(selection)
    effects = memo(seq2seq_ablation.ablation_effects_seq2seq, model, source=source,
                   target=target, metric=metric)
    scored = "the model's own output" if seq.generated else "the target"
    base = float(effects["base"])
    if metric is None:
        score_unit = "loss (nats/token)"
        st.caption(f"The score is the cross-entropy of {scored}, teacher-forced: {base:.3f} "
                   f"nats/token with every head. Each cell is that loss with one head switched "
                   f"off (its output multiplied by 0 before W_O) minus the loss with every "
                   f"head: positive = the model needs the head here. Every head of the "
                   f"encoder, the decoder and the cross-attention is measured (one forward "
                   f"each, in a batch).")
    else:
        score_unit = seq2seq_ablation.pair_score(model, source, target, metric).description
        st.caption(f"**Measured:** {md_escape(score_unit)}, teacher-forced on {scored}: "
                   f"{base:.3f} with every head. Each cell is that minus the metric with one "
                   f"head switched off: what the head adds to this token.")
    st.caption(words.colours(metric is not None))
    st.markdown(f"**Ablation: each {KIND_NAMES[kind]} head switched off alone**")
    lost = words.lost_label(metric is not None, "loss (nats/token)")
    harm = pruning.harm_sign(metric)  # red: a head that helps (a loss rises without it)
    fig = plots.layer_head_heatmap(
        harm * effects[kind], "Δ loss, head off" if metric is None else
        "Metric lost, head off", lost, fmt=".3f", diverging=True)
    show_figure(fig, key="ablation", alt=f"Ablation effect of every {kind} head")
    ranked = heads.rank_heads_of_kinds({k: harm * effects[k] for k in KINDS}, KINDS)[:TOP * 2]
    st.markdown("**The heads the model needs most**, of every kind")
    st.dataframe({"head": [heads.head_name(l, h) for _, l, h in ranked],
                  "kind": [KIND_NAMES[k] for k, _, _ in ranked],
                  lost: [round(float(harm * effects[k][l, h]), 4) for k, l, h in ranked]},
                 hide_index=True, width="stretch")
    download_csv(partial(export.layer_head_csv, effects[kind],
                         "loss_increase" if metric is None else "delta_target_metric"),
                 export.safe_filename(selection.file_stem, kind, "ablation", suffix=".csv"),
                 "These effects as CSV", key="dl_ablation")

    st.subheader("Gradient importance (Michel, Levy & Neubig 2019)")
    gradient = memo(seq2seq_ablation.gradient_importance_seq2seq, model, source=source,
                    target=target, metric=metric)
    what = words.gradient_symbol(metric, score="loss")
    st.markdown(f"**The {KIND_NAMES[kind]} heads**")
    fig = plots.layer_head_heatmap(gradient[kind], what, what, fmt=".2g", zmin=0.0)
    show_figure(fig, key="gradient", alt=f"Gradient importance of every {kind} head")
    r = seq2seq_ablation.importance_agreement(gradient, effects)
    st.caption("One backward pass gives every head's derivative at once: a first-order "
               "estimate of the ablation effect above. "
               + (f"Over the heads of all three kinds it correlates with the size of the exact "
                  f"effect at r = {r:.2f}." if r is not None else ""))
    if metric is None and base < SATURATED_LOSS:
        st.caption(f"The loss is nearly 0 ({base:.3f}): the model is almost certain of every "
                   f"token, its softmax is saturated, and derivatives there are tiny even for "
                   f"heads whose removal costs nats. Rank by the ablation effect instead, or "
                   f"give a target the model finds harder.")
    download_csv(partial(export.layer_head_csv, gradient[kind], "gradient_importance"),
                 export.safe_filename(selection.file_stem, kind, "gradient_importance",
                                      suffix=".csv"), "Gradient importance as CSV",
                 key="dl_gradient")

    total_heads = seq2seq_ablation.total_heads(model)

    def run(by, step, per_step, steps):
        return run_or_wait(seq2seq_ablation.pruning_curve_seq2seq, model, source, target,
                           step=step, by=by, metric=metric, name="curve_seq2seq",
                           label=f"Pruning curve: one {by} estimate per step",
                           auto=runs_on_open("pruning.seq2seq_curve", total_heads),
                           button=words.curve_button(per_step, steps))

    def kept_heads(curve):
        kept = seq2seq_ablation.kept_fractions(curve, model)
        fig = plots.kept_heads_figure(curve.fractions,
                                      {KIND_NAMES[k]: v for k, v in kept.items()})
        show_figure(fig, key="kept", alt="Share of each kind of head still on")
        st.caption("Which kind goes first: Michel et al. (2019) found the encoder-decoder "
                   "attention of a translation model far more sensitive to pruning than its "
                   "self-attention. A kind whose line stays high is one the ranking keeps.")

    pruning_curve_section(
        "Pruning curve: every kind of head in one ranking", "gradient", total_heads, run,
        baseline=base, score_unit=score_unit, title="Loss" if metric is None else "Metric",
        table=lambda curve: pruning.curve_table(
            curve, "loss" if metric is None else "target_metric",
            seq2seq_ablation.kept_fractions(curve, model)),
        file_stem=selection.file_stem, after_figure=kept_heads)
    caveat()
