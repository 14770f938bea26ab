"""The Long range page's sections on the long text: the attention sinks, StreamingLLM's
table (full attention, sink + window, window only) and the per-head cost of a sink +
window with the key/value cache a restriction saves."""

from __future__ import annotations

from functools import partial

import streamlit as st

from .... import analysis as A
from .... import plots, ui
from ....plots import long_range as figures
from ....server import export
from ...words import long_range as words
from .context import LongRange


def sink_section(ctx: LongRange) -> None:
    st.subheader(words.SINK_TITLE)
    st.caption(words.SINK_CAPTION)
    found = ui.run_or_wait(A.sink_scores, ctx.model, ctx.text_ids, name="lr_sinks",
                           label=f"Reading {ctx.n_tokens:,} tokens twice",
                           auto=ui.runs_on_open("long_range.sinks", ctx.n_tokens),
                           button=f"Measure the sinks ({ctx.n_tokens:,} tokens, twice)")
    if found is None:
        return
    natural, repeated = found.natural, found.repeated
    total = natural.sink_heads.size
    first, second = ui.figure_columns(2)
    for column, stats, label, key in ((first, natural, ctx.text_source, "lr_sink"),
                                      (second, repeated, "one token repeated", "lr_sink_rep")):
        with column:
            title = words.sink_share(label, stats.n_sink_heads, total, stats.share)
            fig = plots.layer_head_heatmap(stats.first_attention, title,
                                           "attention to the first token", fmt=".2f",
                                           colorscale="Purples", zmin=0.0, zmax=1.0)
            plots.columns_at_bottom(fig)
            ui.show_figure(fig, key=key, share=ui.column_share(0.5), alt=title)
    ui.drawn_when_opened(words.GEOMETRY_TITLE, "lr_geometry", partial(geometry, natural))
    ui.download_csv(partial(export.layer_head_csv,
                            {"first_token_attention": natural.first_attention,
                             "first_token_attention_repeated": repeated.first_attention}),
                    export.safe_filename(ctx.selection.file_stem, "sinks", suffix=".csv"),
                    "Sink scores as CSV", key="dl_lr_sinks")


def geometry(stats) -> None:
    """The first key's norm against the others', and the queries' cosine with it."""
    st.caption(words.GEOMETRY_CAPTION)
    first, second = ui.figure_columns(2)
    for column, values, name, key in (
            (first, stats.key_norm_ratio, "first key's norm ÷ other keys' mean", "lr_norm"),
            (second, stats.cosine_gap, "cosine with the first key − with the others",
             "lr_cos")):
        with column:
            fig = plots.layer_head_heatmap(values, name, name, fmt=".2f",
                                           diverging=key == "lr_cos")
            plots.columns_at_bottom(fig)
            ui.show_figure(fig, key=key, share=ui.column_share(0.5), alt=name)


def table_section(ctx: LongRange) -> None:
    st.subheader(words.TABLE_TITLE)
    st.caption(words.TABLE_CAPTION.format(sink=ctx.sink, window=ctx.window))
    losses = ui.run_or_wait(A.window_losses, ctx.model, ctx.text_ids, sink=ctx.sink,
                            window=ctx.window, name="lr_table",
                            label=f"Three forwards over {ctx.n_tokens:,} tokens",
                            auto=ui.runs_on_open("long_range.table", ctx.n_tokens),
                            button=f"Compare the losses ({ctx.n_tokens:,} tokens, 3 forwards)")
    if losses is None:
        return
    fig = figures.labelled_bars(words.table_labels(ctx.sink, ctx.window),
                                [losses.full, losses.sink_window, losses.window_only],
                                f"Loss of {ctx.n_tokens:,} tokens of {ctx.text_source}",
                                "loss (nats/token)", marked=[False, True, False])
    ui.show_figure(fig, key="lr_table", alt=words.TABLE_TITLE)


def costs_section(ctx: LongRange) -> None:
    st.subheader(words.COSTS_TITLE)
    st.caption(words.COSTS_CAPTION.format(sink=ctx.sink, window=ctx.window))
    info = ctx.info
    total = info.n_layer * info.n_head
    costs = ui.run_or_wait(A.window_costs, ctx.model, ctx.text_ids, sink=ctx.sink,
                           window=ctx.window, name="lr_costs",
                           label=f"Restricting each head alone over {ctx.n_tokens:,} tokens",
                           auto=ui.runs_on_open("long_range.costs", ctx.n_tokens),
                           button=words.costs_button(total, ctx.n_tokens))
    if costs is None:
        return
    fig = plots.layer_head_heatmap(costs.costs, words.COSTS_TITLE, "Δ loss (nats/token)",
                                   fmt=".3f", diverging=True)
    plots.columns_at_bottom(fig)
    ui.show_figure(fig, key="lr_costs", alt=words.COSTS_TITLE)
    ui.download_csv(partial(export.layer_head_csv, {"window_cost": costs.costs}),
                    export.safe_filename(ctx.selection.file_stem, "window_costs",
                                         suffix=".csv"),
                    "Window costs as CSV", key="dl_lr_costs")
    kept_section(ctx, costs)


def kept_section(ctx: LongRange, costs) -> None:
    """Keep the costliest heads whole, restrict the rest: the cache saved and the loss."""
    info = ctx.info
    total = info.n_layer * info.n_head
    keep = ui.synced(st.slider, "lr_keep", "Heads kept reading the whole context",
                     ui.kept_whole(total), min_value=0, max_value=total, help=words.KEEP_HELP)
    restricted = ui.memo(A.streaming_heads, costs.costs, int(keep))
    saving = ui.memo(A.kv_cache_saved, ctx.model, info.max_positions, ctx.sink, ctx.window,
                     heads=restricted)
    st.metric(f"Key/value cache at {info.max_positions:,} tokens",
              words.bytes_text(saving.restricted_bytes),
              delta=words.saved_delta(saving), delta_color="inverse")
    st.caption(words.kv_saving(saving, info.max_positions))
    losses = ui.run_or_wait(A.window_losses, ctx.model, ctx.text_ids, sink=ctx.sink,
                            window=ctx.window, heads=restricted, name="lr_kept",
                            label=f"Three forwards over {ctx.n_tokens:,} tokens",
                            auto=ui.runs_on_open("long_range.table", ctx.n_tokens),
                            button="Measure the loss with those heads restricted")
    if losses is not None:
        st.caption(words.kept_loss(losses, int(keep)))
