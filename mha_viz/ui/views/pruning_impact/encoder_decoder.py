"""The Pruning impact page's sections for an encoder-decoder, each taking its
``Seq2SeqMeasured``: the exact ablation effect and the gradient importance of every head of
every kind (the sidebar's kind drawn), and the pruning curve over all of them."""

from __future__ import annotations

from functools import partial

import streamlit as st

from .... import plots, ui
from ....analysis import encoder_decoder_ablation as seq2seq_ablation
from ....analysis import heads, pruning
from ....models.seq2seq import KIND_NAMES, KINDS
from ....server import export
from ...words import pruning as words
from .curve import pruning_curve_section
from .measured import TOP, Seq2SeqMeasured

SATURATED_LOSS = 0.05  # nats/token: below it gradients say little about removal


def ablation_section(m: Seq2SeqMeasured) -> None:
    """Each head of the sidebar's kind switched off alone, and its CSV."""
    st.caption(words.seq2seq_ablation_cells(m.metric is not None, m.scored, m.base,
                                            ui.md_escape(m.score_unit)))
    st.caption(words.colours(m.metric is not None))
    st.markdown(f"**Ablation: each {KIND_NAMES[m.kind]} head switched off alone**")
    fig = plots.layer_head_heatmap(
        m.harm * m.effects[m.kind], "Δ loss, head off" if m.metric is None else
        "Metric lost, head off", m.lost, fmt=".3f", diverging=True)
    ui.show_figure(fig, key="ablation", alt=f"Ablation effect of every {m.kind} head")
    ranking_section(m)
    ui.download_csv(partial(export.layer_head_csv, m.effects[m.kind],
                            "loss_increase" if m.metric is None else "delta_target_metric"),
                    export.safe_filename(m.selection.file_stem, m.kind, "ablation",
                                         suffix=".csv"),
                    "These effects as CSV", key="dl_ablation")


def ranking_section(m: Seq2SeqMeasured) -> None:
    """The heads the model needs most, of every kind, in one table."""
    ranked = heads.rank_heads_of_kinds({k: m.harm * m.effects[k] for k in KINDS},
                                       KINDS)[:TOP * 2]
    st.markdown("**The heads the model needs most**, of every kind")
    st.dataframe({"head": [heads.head_name(l, h) for _, l, h in ranked],
                  "kind": [KIND_NAMES[k] for k, _, _ in ranked],
                  m.lost: [round(float(m.harm * m.effects[k][l, h]), 4) for k, l, h in ranked]},
                 hide_index=True, width="stretch")


def gradient_section(m: Seq2SeqMeasured) -> None:
    """Michel et al.'s gradient importance of the sidebar's kind, and how it agrees with
    the exact effects over every kind."""
    st.subheader("Gradient importance (Michel, Levy & Neubig 2019)")
    gradient = m.gradient
    what = words.gradient_symbol(m.metric, score="loss")
    st.markdown(f"**The {KIND_NAMES[m.kind]} heads**")
    fig = plots.layer_head_heatmap(gradient[m.kind], what, what, fmt=".2g", zmin=0.0)
    ui.show_figure(fig, key="gradient", alt=f"Gradient importance of every {m.kind} head")
    r = seq2seq_ablation.importance_agreement(gradient, m.effects)
    st.caption(words.seq2seq_gradient(r))
    if m.metric is None and m.base < SATURATED_LOSS:
        st.caption(words.saturated(m.base))
    ui.download_csv(partial(export.layer_head_csv, gradient[m.kind], "gradient_importance"),
                    export.safe_filename(m.selection.file_stem, m.kind, "gradient_importance",
                                         suffix=".csv"), "Gradient importance as CSV",
                    key="dl_gradient")


def curve_section(m: Seq2SeqMeasured) -> None:
    """The pruning curve over every kind of head in one ranking, and which kind goes first."""
    pruning_curve_section(
        "Pruning curve: every kind of head in one ranking", "gradient",
        seq2seq_ablation.total_heads(m.model), partial(run_curve, m), baseline=m.base,
        score_unit=m.score_unit, title="Loss" if m.metric is None else "Metric",
        table=partial(curve_table, m), file_stem=m.selection.file_stem,
        after_figure=partial(kept_heads, m))
    ui.caveat()


def run_curve(m: Seq2SeqMeasured, by: str, step: float, per_step: int, steps: int):
    selection = m.selection
    return ui.run_or_wait(seq2seq_ablation.pruning_curve_seq2seq, m.model, selection.text,
                          selection.target, step=step, by=by, metric=m.metric,
                          name="curve_seq2seq",
                          label=f"Pruning curve: one {by} estimate per step",
                          auto=ui.runs_on_open("pruning.seq2seq_curve",
                                               seq2seq_ablation.total_heads(m.model)),
                          button=words.curve_button(per_step, steps))


def curve_table(m: Seq2SeqMeasured, curve) -> dict:
    return pruning.curve_table(curve, "loss" if m.metric is None else "target_metric",
                               seq2seq_ablation.kept_fractions(curve, m.model))


def kept_heads(m: Seq2SeqMeasured, curve) -> None:
    """The share of each kind of head still on at each step."""
    kept = seq2seq_ablation.kept_fractions(curve, m.model)
    fig = plots.kept_heads_figure(curve.fractions, {KIND_NAMES[k]: v for k, v in kept.items()})
    ui.show_figure(fig, key="kept", alt="Share of each kind of head still on")
    st.caption(words.KIND_GOES_FIRST)
