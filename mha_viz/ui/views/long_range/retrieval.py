"""The Long range page's needle sections: the copy accuracy by length and depth, every
head's retrieval score, and the copy accuracy with the retrieval heads switched off."""

from __future__ import annotations

from functools import partial

import streamlit as st

from .... import analysis as A
from .... import plots, ui
from ....plots import long_range as figures
from ....server import export
from ...words import long_range as words
from .context import LongRange

TOP = 10  # retrieval heads listed
MAX_DRAWS = 10


def waiting(ctx: LongRange) -> bool:
    """Whether the needle study has no result to show (it waits for its button, was
    cancelled, or has no lengths): said once, in the first section."""
    return ctx.study is None


def needle_grid_section(ctx: LongRange) -> None:
    st.subheader(words.NEEDLE_TITLE)
    st.caption(words.NEEDLE_CAPTION)
    if waiting(ctx):
        st.info("The needles have not been read yet: run them above.")
        return
    grid = ctx.study.grid
    fig = figures.needle_grid_figure(grid.lengths, grid.depths, grid.accuracy,
                                     f"{words.GRID_TITLE} (mean {grid.mean:.2f})")
    ui.show_figure(fig, key="lr_grid", alt=words.GRID_TITLE)


def retrieval_section(ctx: LongRange) -> None:
    if waiting(ctx):
        return
    st.subheader(words.RETRIEVAL_TITLE)
    st.caption(words.RETRIEVAL_CAPTION)
    counts = ctx.study.retrieval
    if not counts.counted:
        st.info(words.nothing_counted(counts.right, counts.tokens))
        return
    scores = counts.scores
    over = counts.heads_over()
    st.caption(words.retrieval_summary(len(over), scores.size, counts.counted, counts.right,
                                       counts.tokens))
    fig = plots.layer_head_heatmap(scores, words.RETRIEVAL_TITLE, "retrieval score",
                                   fmt=".2f", colorscale="Reds", zmin=0.0, zmax=1.0)
    plots.columns_at_bottom(fig)
    ui.show_figure(fig, key="lr_retrieval", alt=words.RETRIEVAL_TITLE)
    if over:
        st.dataframe(words.head_table(scores, over[:TOP], "retrieval score"), hide_index=True,
                     width="stretch")
    ui.download_csv(partial(export.layer_head_csv, {"retrieval_score": scores}),
                    export.safe_filename(ctx.selection.file_stem, "retrieval_scores",
                                         suffix=".csv"),
                    "Retrieval scores as CSV", key="dl_lr_retrieval")


def masking_section(ctx: LongRange) -> None:
    if waiting(ctx) or not ctx.study.retrieval.counted:
        return
    st.subheader(words.MASKING_TITLE)
    st.caption(words.MASKING_CAPTION)
    counts, info = ctx.study.retrieval, ctx.info
    total = info.n_layer * info.n_head
    k_col, draws_col = st.columns(2)
    k = ui.synced(k_col.number_input, "lr_k", "k heads", max(1, len(counts.heads_over())),
                  min_value=1, max_value=total - 1, step=1, valid=lambda n: 1 <= int(n) < total,
                  help="How many heads each run switches off: the top k by retrieval score, "
                       "or k drawn at random from the others.")
    draws = ui.synced(draws_col.slider, "lr_draws", "Random draws", 3, min_value=1,
                      max_value=MAX_DRAWS, help="Each draw switches off its own k heads.")
    picked = ui.synced(st.multiselect, "lr_off", "And your own heads switched off", [],
                       options=A.head_names(info.n_layer, info.n_head),
                       placeholder="Choose heads, e.g. L0.H1", help=ui.NUMBERING)
    result = ui.run_or_wait(A.retrieval_masking, ctx.model, ctx.cases, counts.scores,
                            k=int(k), draws=int(draws), seed=0, heads=tuple(picked),
                            full=ctx.study.grid.mean, name="lr_masking",
                            label="Reading the needles with heads off",
                            auto=ui.runs_on_open("long_range.masking", len(ctx.cases)),
                            button=words.masking_button(int(k), int(draws), len(ctx.cases),
                                                        bool(picked)))
    if result is None:
        return
    labels = words.masking_labels(result.k, len(result.random), len(result.picked_heads))
    values = [result.full, result.top, *result.random] + (
        [result.picked] if result.picked_heads else [])
    fig = figures.labelled_bars(labels, values, words.MASKING_TITLE, "copy accuracy",
                                fmt=".2f", marked=[False, True] + [False] * (len(values) - 2),
                                note=words.masking_note(result))
    ui.show_figure(fig, key="lr_masking", alt=words.MASKING_TITLE)
