"""The Pruning impact page's sections for a model of one stack, each taking the page's
``Measured``: the exact effect of switching each head off alone, heads switched off together
(the score and the maps above them), Michel et al.'s gradient importance, the pruning curve,
the published results and the page's downloads."""

from __future__ import annotations

from functools import partial

import streamlit as st

from .... import analysis as A
from .... import plots, ui
from ....analysis import heads, pruning
from ....maps.downsample import block_factor, downsampled_labels
from ....server import export
from ...words import pruning as words
from .curve import pruning_curve_section
from .measured import TOP, Measured

MAP_MAX = 192  # a head map here is block-averaged past this many tokens


def set_off(names: list[str]) -> None:
    ui.set_value("off", list(names))


def ablation_section(m: Measured) -> None:
    """The exact effect of switching each head off alone: its map, the heads that matter most
    and those whose removal helps, and its CSV (the sweep waits for its button past a size)."""
    metric = m.metric
    st.subheader(f"Ablation effect: the {'score' if metric is None else 'metric'} change when "
                 f"one head is switched off")
    effects = m.effects
    if effects is None:
        st.info(f"This text has {m.score_tokens} tokens: the sweep runs the upper layers once "
                f"per head, so it waits for the button above.")
        return
    signed = pruning.effects_both_ways(effects, metric)
    st.caption(words.colours(metric is not None))
    lost = words.lost_label(metric is not None, m.score_unit)
    st.caption(words.ablation_cells(metric is not None, words.format_score(m.baseline)))
    title = (f"Δ {m.score_unit} when a head is switched off ({m.mode} ablation)"
             if metric is None else
             f"Metric lost when a head is switched off ({m.mode} ablation)")
    # shown so that red is a head that helps: a loss rises, a metric falls without it
    shown = pruning.harm_sign(metric) * effects
    fig = plots.layer_head_heatmap(
        shown, title, lost, fmt=".2g" if m.second_order else ".3f",
        diverging=signed, colorscale=None if signed else "Reds", zmin=0.0,
        log_scale=m.log_colours)
    plots.columns_at_bottom(fig)
    ui.show_figure(fig, key="ablation", alt="Ablation effect of each head")
    heads_tables(m, shown, lost)
    column = "delta_target_metric" if metric is not None else f"delta_{m.model.info.score_kind}"
    ui.download_csv(partial(export.layer_head_csv, {column: effects}),
                    export.safe_filename(m.selection.file_stem, "ablation", m.mode,
                                         suffix=".csv"),
                    "Ablation effects as CSV", key="dl_ablation",
                    help=f"{m.score_unit} with all heads on: {words.format_score(m.baseline)}.")


def heads_tables(m: Measured, shown, column: str) -> None:
    """The heads that matter most, beside those whose removal helps."""
    metric = m.metric
    ranked = pruning.heads_that_matter(m.effects, metric)
    top_col, help_col = st.columns(2)
    with top_col:
        st.markdown("**Heads that matter most** (largest "
                    f"{'increase' if metric is None else 'drop'})")
        st.dataframe(words.effect_table(shown, ranked[:TOP], column), hide_index=True,
                     width="stretch")
    with help_col:
        helps = pruning.heads_whose_removal_helps(m.effects, metric, TOP)
        st.markdown("**Heads whose removal lowers the score**" if metric is None else
                    "**Heads whose removal raises the metric**")
        if helps:
            st.dataframe(words.effect_table(shown, helps, column), hide_index=True,
                         width="stretch")
        else:
            st.caption("None: switching off any single head makes the "
                       f"{'score worse' if metric is None else 'metric lower'} (or leaves "
                       "it unchanged).")


def switch_off_section(m: Measured) -> None:
    """Heads switched off together: the score with them off and, below, how the maps above
    them moved."""
    info = m.model.info
    st.subheader("Switch heads off")
    st.caption(words.SWITCH_OFF, help=ui.TERMS["gate"])
    off = ui.synced(st.multiselect, "off", "Heads switched off", [],
                    options=heads.head_names(info.n_layer, info.n_head),
                    placeholder="Choose heads, e.g. L0.H1", help=ui.NUMBERING)
    presets = st.columns([1, 1, 1, 3], gap="small")
    if m.effects is not None:
        ranked = [heads.head_name(l, h) for l, h in pruning.heads_that_matter(m.effects,
                                                                              m.metric)]
        presets[0].button("Top 3 heads", key="preset_top", on_click=set_off, args=(ranked[:3],),
                          help="The 3 heads with the largest ablation effect.", width="stretch")
        presets[1].button("Least useful half", key="preset_half", on_click=set_off,
                          args=(ranked[len(ranked) // 2:],), width="stretch",
                          help="The half of the heads with the smallest ablation effect.")
    presets[2].button("Clear", key="preset_clear", on_click=set_off, args=([],),
                      width="stretch")
    mask = heads.names_to_mask(off, info.n_layer, info.n_head)
    masked_score = m.baseline if not off else ui.computed(
        m.model.score, m.text, head_mask=mask, ablation=m.mode, metric=m.metric,
        label="Scoring with those heads switched off…")
    m1, m2, m3 = st.columns(3)
    what = "Score" if m.metric is None else "Metric"
    m1.metric(f"{what} with every head on", words.format_score(m.baseline), help=m.score_unit)
    m2.metric(f"{what} with those heads off", words.format_score(masked_score),
              delta=None if not off else f"{masked_score - m.baseline:+.4g}",
              delta_color="inverse" if m.metric is None else "normal",
              help=f"{m.score_unit}; {m.mode} ablation")
    m3.metric("Heads switched off", f"{len(off)} of {m.total_heads}")
    if not off:
        st.info("No head is switched off yet: choose some above (or a preset) to see the score "
                "and the maps of later layers change.")
    else:
        maps_moved(m, off, mask)


def maps_moved(m: Measured, off: list[str], mask) -> None:
    """How much every head's map moved with those heads off, one head before and after and
    their difference, and the trace with those heads off."""
    trace, selection, stem = m.trace, m.selection, m.selection.file_stem
    masked = ui.masked_trace(selection, mask, m.mode)
    # every head's map read twice, a block of rows at a time (a long input's are rebuilt)
    change = ui.computed(heads.attention_change, trace, masked,
                         label=f"Comparing every head's map with and without those heads "
                               f"over {trace.n_tokens:,} tokens…")
    if change is None:
        st.info("Cancelled: change the heads or reload the page to compare them again.")
        st.stop()
    lowest = heads.lowest_layer(off)
    st.markdown(words.map_change(len(off), lowest))
    fig = plots.layer_head_heatmap(change, "Change of each head's attention map",
                                   "mean TV distance", fmt=".3f", zmin=0.0,
                                   zmax=max(float(change.max()), 1e-6))
    plots.columns_at_bottom(fig)
    ui.show_figure(fig, key="change", alt="Change of each head's attention map")
    picked = ui.head_picker(trace, st.columns([2, 1])[0])
    layer, head = heads.head_to_compare(*picked, lowest, change)
    name = heads.head_name(layer, head)
    fig = plots.head_heatmap_row(
        [trace.head_map(layer, head), masked.head_map(layer, head)],
        trace.display_tokens, [f"{name} with every head on",
                               f"{name} with {len(off)} head(s) off"],
        causal=trace.causal, max_size=MAP_MAX, max_ticks=30, height=560,
        title=f"{name}: before and after (mean TV distance {change[layer, head]:.3f})")
    ui.show_figure(fig, key="before_after", alt=f"{name} before and after")
    # past MAP_MAX tokens: block means of the difference, one label per block
    difference = heads.map_difference(trace, masked, layer, head, max_size=MAP_MAX)
    labels = downsampled_labels(trace.display_tokens, block_factor(trace.n_tokens, MAP_MAX))
    # orange and purple: red and blue say whether a head helps, on this page
    fig = plots.tensor_figure(difference, labels, labels,
                              f"{name}: after − before (orange = more attention with the "
                              f"heads off, purple = less)", show_values=trace.n_tokens <= 24,
                              fmt=".2f", colorscale="PuOr_r", row_title="query",
                              col_title="key")
    ui.show_figure(fig, key="difference", alt=f"{name}: change of each weight")
    note = words.compared_head(picked, lowest, m.model.info.n_layer, name, name in off)
    if note:
        st.caption(note)
    ui.download_csv(partial(export.layer_head_csv, {"mean_tv_distance": change}),
                    export.safe_filename(stem, "map_change", suffix=".csv"),
                    "Map changes as CSV", key="dl_change")
    # made on the click, from the store: a bound method would keep the trace alive
    ui.download_bytes(partial(masked_trace_bytes, selection, mask, m.mode),
                      f"{stem}_trace_heads_off.npz",
                      "⬇ Trace with those heads off (.npz)", key="dl_masked_trace")


def masked_trace_bytes(selection: ui.Selection, mask, mode: str) -> bytes:
    return ui.masked_trace(selection, mask, mode).to_bytes()


def gradient_section(m: Measured) -> None:
    """Michel et al.'s gradient importance beside the exact effects."""
    metric, second_order = m.metric, m.second_order
    st.subheader("Gradient importance (Michel, Levy & Neubig 2019)")
    grad_cost = words.gradient_cost(second_order, m.total_heads)
    st.caption(words.gradient_caption(metric, second_order, m.total_heads))
    normalize = ui.synced(st.toggle, "gnorm", "Normalize within each layer", False,
                          help="Divide each layer's row by its ℓ2 norm, as Michel et al. do "
                               "before comparing heads across layers.")
    gradient = None
    if m.backward_refused and not second_order:
        st.info(m.backward_refused)
    else:
        gradient = ui.run_or_wait(pruning.gradient_importance, m.model, m.text, metric=metric,
                                  name="gradient",
                                  label=f"Gradient importance ({grad_cost})…",
                                  auto=m.runs_on_open()["gradient"],
                                  button=f"Compute gradient importance ({grad_cost})")
    if gradient is None:
        return
    shown = heads.normalize_layers(gradient) if normalize else gradient
    what = (words.gradient_symbol(metric, second_order=second_order)
            + (" (÷ layer norm)" if normalize else ""))
    fig = plots.layer_head_heatmap(shown, f"Gradient importance {what}", what, fmt=".2g",
                                   zmin=0.0, log_scale=m.log_colours)
    plots.columns_at_bottom(fig)
    ui.show_figure(fig, key="gradient", alt="Gradient importance of each head")
    if m.effects is not None:
        r = A.importance_agreement(shown, m.effects)
        if r is not None:
            st.caption(f"Correlation with the size of the exact ablation effect: r = {r:.2f}.")
    ui.download_csv(partial(export.layer_head_csv, {"gradient_importance": gradient}),
                    export.safe_filename(m.selection.file_stem, "gradient_importance",
                                         suffix=".csv"),
                    "Gradient importance as CSV", key="dl_gradient")


def curve_section(m: Measured) -> None:
    """The pruning curve: the score as more heads are removed, least important first."""
    pruning_curve_section(
        "Pruning curve: the score as more heads are removed",
        "ablation" if m.second_order else "gradient", m.total_heads, partial(run_curve, m),
        baseline=m.baseline, score_unit=m.score_unit, title=m.score_unit,
        table=partial(curve_table, "score" if m.metric is None else "target_metric"),
        file_stem=m.selection.file_stem, refused=m.backward_refused)


def run_curve(m: Measured, by: str, step: float, per_step: int, steps: int):
    """The curve ranked ``by`` in steps of ``step``, or None while it waits for its button."""
    return ui.run_or_wait(
        pruning.pruning_curve, m.model, m.text, step=step, by=by, mode=m.mode, metric=m.metric,
        name="curve", label=f"Pruning curve: one {words.CURVE_STEP_COSTS[by]} per step",
        auto=m.runs_on_open(by)["curve"],
        button=words.curve_button(per_step, steps, words.CURVE_STEP_COSTS[by]))


def curve_table(column: str, curve) -> dict:
    return pruning.curve_table(curve, column)


def published_section(m: Measured) -> None:
    """What the papers found, and how one text differs from their test sets."""
    st.markdown(words.PUBLISHED)
    st.caption(ui.NUMBERING)


def downloads_section(m: Measured) -> None:
    st.divider()
    ui.download_trace(m.selection, m.trace)
    ui.caveat()
