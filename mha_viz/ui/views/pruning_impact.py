"""The Pruning impact page's view: what happens to the model's score when heads are switched
off. The exact effect of removing each head alone, heads switched off together (the score and
the maps above them), a one-pass gradient estimate (Michel et al. 2019), and the score as more
and more heads are removed; for an encoder-decoder, every kind of head (pruning_impact_parts)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import streamlit as st

from ... import analysis as A
from ... import plots, ui
from ...analysis import heads, pruning
from ...maps.downsample import block_factor, downsampled_labels
from ...server import export
from ..words import pruning as words
from . import pruning_impact_parts as parts

MAP_MAX = 192  # a head map here is block-averaged past this many tokens
INTRO = ("Which heads does the model actually need? Switch a head off (its output is removed "
         "before the output projection W_O) and measure how much the model's score changes. "
         "Three views: the exact effect of removing each head alone, a one-pass gradient "
         "estimate (Michel et al. 2019), and the score as more and more heads are removed.")


@dataclass(frozen=True)
class Measured:
    """What every section of the page reads: the input, the measure and the choices."""
    selection: ui.Selection
    trace: object
    metric: object  # None: the model's score; else a TargetMetric
    score_unit: str
    score_tokens: int
    mode: str
    log_colours: bool
    baseline: float

    @property
    def model(self):
        return self.selection.model

    @property
    def second_order(self) -> bool:
        return pruning.second_order_gradient(self.model.info.score_kind, self.metric)

    def runs_on_open(self, by: str = ui.PRUNING_DEFAULTS["by"]) -> dict[str, bool]:
        return ui.pruning_runs_on_open(self.model.info.score_kind, self.score_tokens,
                                       self.metric, by)


def set_off(names: list[str]) -> None:
    ui.set_value("off", list(names))


def show() -> None:
    selection = ui.sidebar(shows_saved_traces=False, encoder_decoders=True)
    with ui.guard():
        if selection.kind is not None:
            parts.encoder_decoder_pruning(selection, ui.get_seq2seq_trace(selection))
            st.stop()
        trace = ui.get_trace(selection)
        model = selection.model
        ui.trace_notes(trace)
        score_tokens = len(model.encode(selection.text).input_ids)
        metric, score_unit = parts.measure(selection, trace, score_tokens)
        parts.scored_tokens_notes(trace, score_tokens)
        mode = ui.synced(st.radio, "ablation", "Switching a head off means",
                         ui.PRUNING_DEFAULTS["mode"], options=list(words.ABLATION_MODES),
                         format_func=words.ABLATION_MODES.get, horizontal=True,
                         help="Zero ablation removes the head's output (Michel et al. 2019). "
                              "Mean ablation replaces it by its average over the text's "
                              "positions, which keeps the typical offset the head adds and so "
                              "disturbs the layers above less.")
        log_colours = ui.synced(st.toggle, "logc", "Log colour scale for the head maps", False,
                                help="Colour the ablation and gradient maps by the size of each "
                                     "value on a log scale (three decades), so one or two "
                                     "large heads do not wash out the rest. A cell's label "
                                     "(point at it, or tap it) gives the plain value.")
        baseline = ui.computed(model.score, selection.text, metric=metric,
                               label="Scoring the text…")
        m = Measured(selection, trace, metric, score_unit, score_tokens, mode, log_colours,
                     baseline)
        effects = ablation_section(m)
        switch_off_section(m, effects)
        too_long = gradient_section(m, effects)
        curve_section(m, too_long)
        st.markdown(
            "**Published results.** Michel, Levy & Neubig (2019, *Are Sixteen Heads Really Better "
            "than One?*) pruned heads by this gradient importance: BERT fine-tuned on MNLI kept its "
            "accuracy with about 40% of its heads removed (WMT translation: about 20%), and many "
            "layers could be cut to a single head. Voita et al. (2019, *Analyzing Multi-Head "
            "Self-Attention: Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned*) removed "
            "38 of the 48 encoder heads of an English-Russian translation model for a drop of 0.15 "
            "BLEU. Those are task accuracies averaged over a test set; here the score is measured on "
            "one text, so expect a noisier curve.")
        st.caption(ui.NUMBERING)

        st.divider()
        ui.download_trace(selection, trace)
        ui.caveat()


def ablation_section(m: Measured):
    """The exact effect of switching each head off alone: its map, the heads that matter most
    and those whose removal helps, and its CSV. Returns the effects (None while the sweep
    waits for its button)."""
    selection, model, metric = m.selection, m.model, m.metric
    info, text, stem = model.info, selection.text, selection.file_stem
    n_layer, n_head = info.n_layer, info.n_head
    score_unit, score_tokens, mode = m.score_unit, m.score_tokens, m.mode
    second_order, log_colours = m.second_order, m.log_colours
    runs_itself = m.runs_on_open()
    shown_baseline = words.format_score(m.baseline)
    st.subheader(f"Ablation effect: the {'score' if metric is None else 'metric'} change when "
                 f"one head is switched off")
    sweep_label = (f"Ablation sweep: each of the {n_layer * n_head} heads switched off in "
                   f"turn on {score_tokens} tokens, layer by layer")
    effects = ui.run_or_wait(pruning.ablation_effects, model, text, mode=mode, metric=metric,
                             name="ablation",
                             label=sweep_label, auto=runs_itself["ablation"],
                             button=f"Run the ablation sweep ({n_layer * n_head} heads × "
                                    f"{score_tokens} tokens)")
    if effects is None:
        st.info(f"This text has {score_tokens} tokens: the sweep runs the upper layers once per "
                f"head, so it waits for the button above.")
    else:
        signed = pruning.effects_both_ways(effects, metric)
        st.caption(words.colours(metric is not None))
        lost = words.lost_label(metric is not None, score_unit)
        if metric is None:
            st.caption(f"Each cell: score with that head switched off − score with every head "
                       f"on ({shown_baseline}). Exact: one forward pass per head, reusing the "
                       f"layers below each head.")
            title = f"Δ {score_unit} when a head is switched off ({mode} ablation)"
        else:
            st.caption(f"Each cell: the metric with every head on ({shown_baseline}) − the "
                       f"metric with that head switched off: what the head adds to the "
                       f"target. Exact: one forward pass per head.")
            title = f"Metric lost when a head is switched off ({mode} ablation)"
        # shown so that red is a head that helps: a loss rises, a metric falls without it
        shown = pruning.harm_sign(metric) * effects
        fig = plots.layer_head_heatmap(
            shown, title, lost, fmt=".2g" if second_order else ".3f",
            diverging=signed, colorscale=None if signed else "Reds", zmin=0.0,
            log_scale=log_colours)
        plots.columns_at_bottom(fig)
        ui.show_figure(fig, key="ablation", alt="Ablation effect of each head")
        ranked = pruning.heads_that_matter(effects, metric)
        top_col, help_col = st.columns(2)
        column = lost
        with top_col:
            st.markdown("**Heads that matter most** (largest "
                        f"{'increase' if metric is None else 'drop'})")
            st.dataframe(words.effect_table(shown, ranked[:parts.TOP], column),
                         hide_index=True, width="stretch")
        with help_col:
            helps = pruning.heads_whose_removal_helps(effects, metric, parts.TOP)
            st.markdown("**Heads whose removal lowers the score**" if metric is None else
                        "**Heads whose removal raises the metric**")
            if helps:
                st.dataframe(words.effect_table(shown, helps, column), hide_index=True,
                             width="stretch")
            else:
                st.caption("None: switching off any single head makes the "
                           f"{'score worse' if metric is None else 'metric lower'} (or leaves "
                           "it unchanged).")
        column = "delta_target_metric" if metric is not None else f"delta_{info.score_kind}"
        ui.download_csv(partial(export.layer_head_csv, {column: effects}),
                        export.safe_filename(stem, "ablation", mode, suffix=".csv"),
                        "Ablation effects as CSV", key="dl_ablation",
                        help=f"{score_unit} with all heads on: {shown_baseline}.")

    return effects


def switch_off_section(m: Measured, effects) -> None:
    """Heads switched off together: the score with them off, how much each head's map moved,
    one head before and after, and the trace with those heads off."""
    selection, trace, model, metric = m.selection, m.trace, m.model, m.metric
    info, text, stem = model.info, selection.text, selection.file_stem
    n_layer, n_head = info.n_layer, info.n_head
    score_unit, mode, baseline = m.score_unit, m.mode, m.baseline
    shown_baseline = words.format_score(baseline)
    st.subheader("Switch heads off")
    st.caption("Pick heads to remove together. The score and every later layer's attention "
               "maps are recomputed with those heads switched off. A switched-off head's own map "
               "is unchanged (the gate sits after its softmax); the layers above it read a "
               "different input, so their maps move.", help=ui.TERMS["gate"])
    all_names = heads.head_names(n_layer, n_head)
    off = ui.synced(st.multiselect, "off", "Heads switched off", [], options=all_names,
                    placeholder="Choose heads, e.g. L0.H1", help=ui.NUMBERING)
    presets = st.columns([1, 1, 1, 3], gap="small")
    if effects is not None:
        ranked = [heads.head_name(l, h) for l, h in pruning.heads_that_matter(effects, metric)]
        presets[0].button("Top 3 heads", key="preset_top", on_click=set_off, args=(ranked[:3],),
                          help="The 3 heads with the largest ablation effect.", width="stretch")
        presets[1].button("Least useful half", key="preset_half", on_click=set_off,
                          args=(ranked[len(ranked) // 2:],), width="stretch",
                          help="The half of the heads with the smallest ablation effect.")
    presets[2].button("Clear", key="preset_clear", on_click=set_off, args=([],),
                      width="stretch")
    mask = heads.names_to_mask(off, n_layer, n_head)
    masked_score = baseline if not off else ui.computed(
        model.score, text, head_mask=mask, ablation=mode, metric=metric,
        label="Scoring with those heads switched off…")
    m1, m2, m3 = st.columns(3)
    what = "Score" if metric is None else "Metric"
    m1.metric(f"{what} with every head on", shown_baseline, help=score_unit)
    m2.metric(f"{what} with those heads off", words.format_score(masked_score),
              delta=None if not off else f"{masked_score - baseline:+.4g}",
              delta_color="inverse" if metric is None else "normal",
              help=f"{score_unit}; {mode} ablation")
    m3.metric("Heads switched off", f"{len(off)} of {n_layer * n_head}")
    if not off:
        st.info("No head is switched off yet: choose some above (or a preset) to see the score "
                "and the maps of later layers change.")
    else:
        masked = ui.masked_trace(selection, mask, mode)
        # every head's map read twice, a block of rows at a time (a long input's are rebuilt)
        change = ui.computed(heads.attention_change, trace, masked,
                             label=f"Comparing every head's map with and without those heads "
                                   f"over {trace.n_tokens:,} tokens…")
        if change is None:
            st.info("Cancelled: change the heads or reload the page to compare them again.")
            st.stop()
        lowest = heads.lowest_layer(off)
        st.markdown(f"**How much each head's map moved** with {len(off)} head(s) off: the mean "
                    f"over query tokens of the total-variation distance between the two maps "
                    f"(0 = unchanged, 1 = no overlap). Layers up to L{lowest} cannot change.")
        fig = plots.layer_head_heatmap(change, "Change of each head's attention map",
                                       "mean TV distance", fmt=".3f", zmin=0.0,
                                       zmax=max(float(change.max()), 1e-6))
        plots.columns_at_bottom(fig)
        ui.show_figure(fig, key="change", alt="Change of each head's attention map")
        picked = ui.head_picker(trace, st.columns([2, 1])[0])
        layer, head = heads.head_to_compare(*picked, lowest, change)
        name = heads.head_name(layer, head)
        note = ""
        if picked[0] <= lowest and lowest == n_layer - 1:
            note = (f"Every switched-off head is in the last layer (L{lowest}): no attention "
                    f"map can change, only the score. ")
        elif picked[0] <= lowest:
            note = (f"{heads.head_name(*picked)} sits at or below the lowest switched-off layer "
                    f"(L{lowest}), so its map cannot change: showing {name}, the head whose "
                    f"map moved most. Pick a layer above L{lowest} to choose another. ")
        fig = plots.head_heatmap_row(
            [trace.head_map(layer, head), masked.head_map(layer, head)],
            trace.display_tokens, [f"{name} with every head on",
                                   f"{name} with {len(off)} head(s) off"],
            causal=trace.causal, max_size=MAP_MAX, max_ticks=30, height=560,
            title=f"{name}: before and after (mean TV distance {change[layer, head]:.3f})")
        ui.show_figure(fig, key="before_after", alt=f"{name} before and after")
        # past MAP_MAX tokens: block means of the difference, one label per block
        difference = heads.map_difference(trace, masked, layer, head, max_size=MAP_MAX)
        diff_labels = downsampled_labels(trace.display_tokens,
                                         block_factor(trace.n_tokens, MAP_MAX))
        small = trace.n_tokens <= 24
        # orange and purple: red and blue say whether a head helps, on this page
        fig = plots.tensor_figure(difference, diff_labels, diff_labels,
                                  f"{name}: after − before (orange = more attention with the "
                                  f"heads off, purple = less)", show_values=small, fmt=".2f",
                                  colorscale="PuOr_r", row_title="query", col_title="key")
        ui.show_figure(fig, key="difference", alt=f"{name}: change of each weight")
        if name in off:
            note += ("This head is switched off itself: its map is what its softmax computed, "
                     "but its output no longer reaches the layers above.")
        if note:
            st.caption(note)
        ui.download_csv(partial(export.layer_head_csv, {"mean_tv_distance": change}),
                        export.safe_filename(stem, "map_change", suffix=".csv"),
                        "Map changes as CSV", key="dl_change")
        # made on the click, from the store: a bound method would keep the trace alive
        ui.download_bytes(lambda: ui.masked_trace(selection, mask, mode).to_bytes(),
                          f"{stem}_trace_heads_off.npz",
                          "⬇ Trace with those heads off (.npz)", key="dl_masked_trace")



def gradient_section(m: Measured, effects) -> str | None:
    """Michel et al.'s gradient importance beside the exact effects. Returns why a backward
    pass cannot run on this text (None when it can)."""
    selection, model, metric = m.selection, m.model, m.metric
    info, text, stem = model.info, selection.text, selection.file_stem
    n_layer, n_head = info.n_layer, info.n_head
    score_tokens, second_order, log_colours = m.score_tokens, m.second_order, m.log_colours
    runs_itself = m.runs_on_open()
    st.subheader("Gradient importance (Michel, Levy & Neubig 2019)")
    grad_cost = words.gradient_cost(second_order, n_layer * n_head)
    if second_order:
        st.caption("The embedding shift is at its minimum (0) with every head on, so its "
                   "gradient there is exactly 0, and no single backward pass estimates it. The "
                   "second-order estimate ½‖∂e/∂ξ‖² (e = the normalized embedding, ξ the head's "
                   f"gate) needs one forward-mode pass per head, {n_layer * n_head} of them, "
                   "each dearer than a forward pass: **it costs more than the exact ablation "
                   "sweep above, which measures the same thing exactly; use the sweep.** The "
                   "estimate is here to compare with it.")
    else:
        st.caption(f"I = |∂ {'score' if metric is None else 'metric'} / ∂ξ| for each head's "
                   "gate ξ at ξ = 1: one backward pass "
                   "estimates every head's importance at once (a first-order estimate of the "
                   "ablation effect).")
    normalize = ui.synced(st.toggle, "gnorm", "Normalize within each layer", False,
                          help="Divide each layer's row by its ℓ2 norm, as Michel et al. do "
                               "before comparing heads across layers.")
    # a backward pass keeps every head's attention of the scored text (the whole text, up to
    # the model's context)
    too_long = ui.too_long_for("A backward pass (it keeps every head's attention)",
                               score_tokens,
                               pruning.gradient_bytes_per_squared_token(n_layer, n_head),
                               max_tokens_helps=False)
    gradient = None
    if too_long and not second_order:
        st.info(too_long)
    else:
        gradient = ui.run_or_wait(pruning.gradient_importance, model, text, metric=metric,
                                  name="gradient",
                                  label=f"Gradient importance ({grad_cost})…",
                                  auto=runs_itself["gradient"],
                                  button=f"Compute gradient importance ({grad_cost})")
    if gradient is not None:
        shown_gradient = heads.normalize_layers(gradient) if normalize else gradient
        what = (words.gradient_symbol(metric, second_order=second_order)
                + (" (÷ layer norm)" if normalize else ""))
        fig = plots.layer_head_heatmap(shown_gradient, f"Gradient importance {what}", what,
                                       fmt=".2g", zmin=0.0, log_scale=log_colours)
        plots.columns_at_bottom(fig)
        ui.show_figure(fig, key="gradient", alt="Gradient importance of each head")
        if effects is not None:
            r = A.importance_agreement(shown_gradient, effects)
            if r is not None:
                st.caption(f"Correlation with the size of the exact ablation effect: r = {r:.2f}.")
        ui.download_csv(partial(export.layer_head_csv, {"gradient_importance": gradient}),
                        export.safe_filename(stem, "gradient_importance", suffix=".csv"),
                        "Gradient importance as CSV", key="dl_gradient")

    return too_long


def curve_section(m: Measured, too_long: str | None) -> None:
    """The pruning curve: the score as more heads are removed, least important first."""
    selection, model, metric = m.selection, m.model, m.metric
    info, text, stem = model.info, selection.text, selection.file_stem
    mode, second_order, score_unit = m.mode, m.second_order, m.score_unit

    def run_curve(by, step, per_step, steps):
        return ui.run_or_wait(
            pruning.pruning_curve, model, text, step=step, by=by, mode=mode, metric=metric,
            name="curve", label=f"Pruning curve: one {words.CURVE_STEP_COSTS[by]} per step",
            auto=m.runs_on_open(by)["curve"],
            button=words.curve_button(per_step, steps, words.CURVE_STEP_COSTS[by]))

    parts.pruning_curve_section(
        "Pruning curve: the score as more heads are removed",
        "ablation" if second_order else "gradient", info.n_layer * info.n_head, run_curve,
        baseline=m.baseline, score_unit=score_unit, title=score_unit,
        table=lambda curve: pruning.curve_table(
            curve, "score" if metric is None else "target_metric"),
        file_stem=stem, refused=too_long)
