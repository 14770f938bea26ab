"""Pruning impact: what happens to the model's score when heads are switched off."""

from functools import partial

import streamlit as st

from mha_viz import analysis as A
from mha_viz import plots, ui
from mha_viz.analysis import heads
from mha_viz.analysis import pruning as P
from mha_viz.maps.downsample import block_factor, downsampled_labels
from mha_viz.server import export

TOP = 5
MAP_MAX = 192  # a head map here is block-averaged past this many tokens
SATURATED_LOSS = 0.05  # nats/token: below it gradients say little about removal
SHORT_SCORE = {
    "next_token_loss": "next-token loss (nats/token)",
    "mlm_loss": "masked-LM loss (nats/token)",
    "embedding_shift": "embedding shift (1 − cos)",
}
SCORE_EXPLAINED = {
    "next_token_loss": "The causal LM's mean cross-entropy of predicting each next token of the text, "
                       "in nats per token. Lower is better; a head that matters makes it rise "
                       "when it is switched off.",
    "mlm_loss": "BERT's masked-LM cross-entropy: a fixed, seeded 15% of the tokens (at least "
                "one) are replaced by [MASK] and the model must recover them; nats per token, "
                "lower is better.",
    "embedding_shift": "This checkpoint has no language-model head (a sentence-embedding BERT "
                       "such as all-MiniLM-L6-v2), so the score is how far the sentence "
                       "embedding moves: 1 − cosine between the mean-pooled last hidden state "
                       "with heads switched off and the one with every head on. It is 0 with "
                       "all heads on; bigger means the head mattered more for the embedding.",
}
MODES = {"zero": "zero (remove the head's output)",
         "mean": "mean (replace it by its mean over positions)"}


def fmt(value: float) -> str:
    """A score as the page shows it (and the tests read it): 6 significant digits; float
    noise around 0 (1 − cos of an embedding with itself is ~1e-8, not 0) shows as 0."""
    return "0" if abs(value) < 5e-7 else f"{value:.6g}"


ui.page_setup(
    "Pruning impact",
    "Which heads does the model actually need? Switch a head off (its output is removed "
    "before the output projection W_O) and measure how much the model's score changes. "
    "Three views: the exact effect of removing each head alone, a one-pass gradient estimate "
    "(Michel et al. 2019), and the score as more and more heads are removed.",
)
selection = ui.sidebar(shows_saved_traces=False, encoder_decoders=True)

KIND_TITLES = {"encoder": "encoder self-attention", "decoder": "decoder self-attention",
               "cross": "cross-attention"}


def curve_controls(default_by: str) -> tuple[str, float]:
    """What the pruning curve ranks heads by, and the share of heads removed per step."""
    c1, c2 = st.columns(2)
    with c1:
        by = ui.synced(st.radio, "by", "Remove first the heads with the smallest", default_by,
                       options=["gradient", "ablation"],
                       format_func={"gradient": "gradient importance",
                                    "ablation": "ablation effect"}.get, horizontal=True,
                       help="After each step the importance of the remaining heads is "
                            "estimated again (Michel et al.'s iterative pruning).")
    with c2:
        step = ui.synced(st.radio, "step", "Heads removed per step", 0.1,
                         options=[0.1, 0.05], format_func=lambda s: f"{s:.0%}",
                         horizontal=True)
    return by, step


def encoder_decoder_measure(seq):
    """The score the page measures on an encoder-decoder: the target's teacher-forced loss,
    or one target position's metric (defaults: the decoder's top two guesses there)."""
    measure = ui.synced(st.radio, "measure", "Measure each head by", "score",
                        options=["score", "target"], horizontal=True,
                        format_func={"score": "the target's loss (nats/token)",
                                     "target": "one prediction (a target metric)"}.get,
                        help="A target metric asks which heads make one token of the output, "
                             "e.g. logit('voiture') − logit('chien') at its position.")
    if measure != "target":
        return None
    pred = ui.memo(selection.model.predict, selection.text, key=(selection.key[:-1], "predict"),
                   target=selection.target, k=TOP)
    return ui.target_metric_picker(selection.model, pred.tokens, range(len(pred.tokens)),
                                   lambda p: pred.top_ids[p][:2], decoder=True)


def encoder_decoder_pruning(seq) -> None:
    """An encoder-decoder: the exact ablation effect and the gradient importance of every head
    of every kind (the sidebar's kind drawn), and the pruning curve over all of them."""
    model, kind = selection.model, selection.kind
    metric = encoder_decoder_measure(seq)
    key = (selection.key[:-1], metric)  # the same for every kind
    effects = ui.memo(A.ablation_effects_seq2seq, model, key=(*key, "ablation"),
                      source=selection.text, target=selection.target, metric=metric)
    target = "the model's own output" if seq.generated else "the target"
    base = float(effects["base"])
    if metric is None:
        score_unit = "loss (nats/token)"
        st.caption(f"The score is the cross-entropy of {target}, teacher-forced: {base:.3f} "
                   f"nats/token with every head. Each cell is that loss with one head switched "
                   f"off (its output multiplied by 0 before W_O) minus the loss with every "
                   f"head: positive = the model needs the head here. Every head of the "
                   f"encoder, the decoder and the cross-attention is measured (one forward "
                   f"each, in a batch).")
    else:
        score_unit = A.pair_score(model, selection.text, selection.target, metric).description
        st.caption(f"**Measured:** {ui.md_escape(score_unit)}, teacher-forced on {target}: "
                   f"{base:.3f} with every head. Each cell is the metric with one head switched "
                   f"off minus that: blue = the head was helping this token, red = working "
                   f"against it.")
    harm = 1.0 if metric is None else -1.0
    st.markdown(f"**Ablation: each {KIND_TITLES[kind]} head switched off alone**")
    fig = plots.layer_head_heatmap(
        effects[kind], f"Δ {'loss' if metric is None else 'metric'}, head off",
        "Δ loss (nats/token)" if metric is None else "Δ metric", fmt=".3f", diverging=True)
    ui.show_figure(fig, key="ablation", alt=f"Ablation effect of every {kind} head")
    ranked = sorted(((harm * float(effects[k][l, h]), k, l, h) for k in KIND_TITLES
                     for l in range(effects[k].shape[0]) for h in range(effects[k].shape[1])),
                    reverse=True)[:TOP * 2]
    st.markdown("**The heads the model needs most**, of every kind")
    st.dataframe({"head": [plots.head_name(l, h) for _, _, l, h in ranked],
                  "kind": [KIND_TITLES[k] for _, k, _, _ in ranked],
                  "Δ loss (nats/token)" if metric is None else "Δ metric":
                      [round(float(effects[k][l, h]), 4) for _, k, l, h in ranked]},
                 hide_index=True, width="stretch")
    ui.download_csv(partial(export.layer_head_csv, effects[kind],
                            "loss_increase" if metric is None else "delta_target_metric"),
                    export.safe_filename(selection.file_stem, kind, "ablation",
                                         suffix=".csv"), "These effects as CSV",
                    key="dl_ablation")

    st.subheader("Gradient importance (Michel, Levy & Neubig 2019)")
    gradient = ui.memo(A.gradient_importance_seq2seq, model, key=(*key, "gradient"),
                       source=selection.text, target=selection.target, metric=metric)
    what = "|∂ loss/∂ξ|" if metric is None else "|∂ metric/∂ξ|"
    st.markdown(f"**The {KIND_TITLES[kind]} heads**")
    fig = plots.layer_head_heatmap(gradient[kind], what, what, fmt=".2g", zmin=0.0)
    ui.show_figure(fig, key="gradient", alt=f"Gradient importance of every {kind} head")
    r = A.importance_agreement(gradient, effects)
    st.caption("One backward pass gives every head's derivative at once: a first-order "
               "estimate of the ablation effect above. "
               + (f"Over the heads of all three kinds it correlates with the size of the exact "
                  f"effect at r = {r:.2f}." if r is not None else ""))
    if metric is None and base < SATURATED_LOSS:
        st.caption(f"The loss is nearly 0 ({base:.3f}): the model is almost certain of every "
                   f"token, its softmax is saturated, and derivatives there are tiny even for "
                   f"heads whose removal costs nats. Rank by the ablation effect instead, or "
                   f"give a target the model finds harder.")
    ui.download_csv(partial(export.layer_head_csv, gradient[kind], "gradient_importance"),
                    export.safe_filename(selection.file_stem, kind, "gradient_importance",
                                         suffix=".csv"), "Gradient importance as CSV",
                    key="dl_gradient")

    st.subheader("Pruning curve: every kind of head in one ranking")
    by, step = curve_controls("gradient")
    total_heads = A.total_heads(model)
    per_step, steps = P.curve_steps(total_heads, step)
    curve = ui.run_or_wait(("curve_seq2seq", *key, by, step), A.pruning_curve_seq2seq, model,
                           selection.text, selection.target, step=step, by=by, metric=metric,
                           label=f"Pruning curve: one {by} estimate per step",
                           auto=total_heads <= 200,
                           button=f"Run the pruning curve ({steps} steps of {per_step} heads)")
    if curve is None:
        st.info("The curve re-estimates importance after every step; press the button to run "
                "it. A bar shows its progress.")
    else:
        ranking = "gradient importance" if by == "gradient" else "ablation effect"
        fig = plots.pruning_curve_figure(curve.fractions, curve.scores, baseline=base,
                                         score_name=score_unit,
                                         title=f"{'Loss' if metric is None else 'Metric'} as "
                                               f"heads are removed (by {ranking})")
        ui.show_figure(fig, key="curve", alt="Pruning curve")
        kept = A.kept_fractions(curve, model)
        fig = plots.kept_heads_figure(curve.fractions,
                                      {KIND_TITLES[k]: v for k, v in kept.items()})
        ui.show_figure(fig, key="kept", alt="Share of each kind of head still on")
        st.caption("Which kind goes first: Michel et al. (2019) found the encoder-decoder "
                   "attention of a translation model far more sensitive to pruning than its "
                   "self-attention. A kind whose line stays high is one the ranking keeps.")
        ui.download_csv(partial(export.table_csv, {
            "fraction_removed": curve.fractions,
            "loss" if metric is None else "target_metric": curve.scores,
            **{f"{k}_heads_on": v for k, v in kept.items()},
            "heads_removed_this_step": [" ".join(f"{k}:{plots.head_name(l, h)}"
                                                 for k, l, h in step_heads)
                                        for step_heads in curve.removed]}),
            export.safe_filename(selection.file_stem, "pruning_curve", by, suffix=".csv"),
            "Pruning curve as CSV", key="dl_curve")
    ui.caveat()


def set_off(names: list[str]) -> None:
    ui.set_value("off", list(names))


def target_metric(selection, model, trace):
    """The target-metric controls, with the model's own top two guesses as defaults."""
    if model.info.causal:
        run = ui.get_run(selection)  # shared with the Predictions page: one forward for both
        pred = ui.memo(run.predict, key=(selection.key, "predict"), k=TOP)
        return ui.target_metric_picker(model, pred.tokens, range(len(pred.tokens)),
                                       lambda p: pred.top_ids[p][:2])

    def fillers(position: int):
        return ui.memo(model.predict, selection.text, key=(selection.key, "predict", (position,)),
                       k=TOP, masked_positions=[position],
                       max_tokens=selection.max_tokens).top_ids[0][:2]

    ordinary = [i for i in range(trace.n_tokens) if not trace.special_mask[i]]
    return ui.target_metric_picker(model, trace.display_tokens, ordinary, fillers)


with ui.guard():
    if selection.kind is not None:
        encoder_decoder_pruning(ui.get_seq2seq_trace(selection))
        st.stop()
    trace = ui.get_trace(selection)
    model = selection.model
    info = model.info
    text = selection.text
    n_layer, n_head = info.n_layer, info.n_head
    stem = selection.file_stem
    ui.trace_notes(trace)
    score_tokens = len(model.encode(text).input_ids)

    # What a head's removal is measured by: the model's own score, or (models with an LM
    # head) one prediction's target metric, chosen as on the Predictions page.
    measure = "score"
    if info.has_lm_head:
        measure = ui.synced(st.radio, "measure", "Measure each head by", "score",
                            options=["score", "target"], horizontal=True,
                            format_func={"score": f"the model's score ({SHORT_SCORE[info.score_kind]})",
                                         "target": "one prediction (a target metric)"}.get,
                            help="A target metric asks which heads make one prediction, e.g. "
                                 "logit(' Mary') − logit(' John') at the last token of an "
                                 "indirect-object sentence (Wang et al. 2023).")
    metric = None
    if measure == "target":
        metric = target_metric(selection, model, trace)
        resolved = model.resolve_metric(metric, score_tokens)
        score_unit = resolved.description
        st.markdown(f"**Measured on this page:** {ui.md_escape(resolved.description)}. Higher "
                    f"means the target is more likely: a head that helps it makes the metric "
                    f"fall when it is switched off.")
    else:
        score_unit = SHORT_SCORE[info.score_kind]
        st.markdown(f"**Score used on this page:** {ui.md_escape(info.score_name)}. "
                    f"{SCORE_EXPLAINED[info.score_kind]}")
    harm = P.harm_sign(metric)  # harm * effect > 0: the head mattered
    notes = []
    if trace.is_pair:
        notes.append("The scores read sentence A only (the model's score takes one text); the "
                     "attention maps below show the sentence pair.")
    if score_tokens != trace.n_tokens and not trace.is_pair:
        notes.append(f"The scores use {score_tokens} tokens (up to the model's context), the "
                     f"maps the first {trace.n_tokens} (*Max tokens* in the sidebar).")
    for note in notes:
        st.caption(note)

    mode = ui.synced(st.radio, "ablation", "Switching a head off means", "zero",
                     options=list(MODES), format_func=MODES.get, horizontal=True,
                     help="Zero ablation removes the head's output (Michel et al. 2019). Mean "
                          "ablation replaces it by its average over the text's positions, "
                          "which keeps the typical offset the head adds and so disturbs the "
                          "layers above less.")
    log_colours = ui.synced(st.toggle, "logc", "Log colour scale for the head maps", False,
                            help="Colour the ablation and gradient maps by the size of each "
                                 "value on a log scale (three decades), so one or two large "
                                 "heads do not wash out the rest. Hover shows the plain values.")
    baseline = ui.computed(ui.pruning_key("score", selection.model_name, text, metric),
                           model.score, text,
                           metric=metric, label="Scoring the text…")
    runs_itself = ui.pruning_runs_by_itself(model, score_tokens, metric)

    # ---------------------------------------------------------------- ablation
    st.subheader(f"Ablation effect: the {'score' if metric is None else 'metric'} change when "
                 f"one head is switched off")
    sweep_label = (f"Ablation sweep: each of the {n_layer * n_head} heads switched off in "
                   f"turn on {score_tokens} tokens, layer by layer")
    effects = ui.run_or_wait(ui.pruning_key("ablation", selection.model_name, text, metric,
                                            mode=mode),
                          P.ablation_effects, model, text, mode=mode, metric=metric,
                          label=sweep_label, auto=runs_itself["ablation"],
                          button=f"Run the ablation sweep ({n_layer * n_head} heads × "
                                 f"{score_tokens} tokens)")
    if effects is None:
        st.info(f"This text has {score_tokens} tokens: the sweep runs the upper layers once per "
                f"head, so it waits for the button above.")
    else:
        signed = bool((harm * effects < 0).any())
        if metric is None:
            st.caption(f"Each cell: score with that head switched off − score with every head "
                       f"on ({fmt(baseline)}). Red = the score got worse without the head (it "
                       f"mattered)" + (", blue = it got better" if signed else "") + ". Exact: "
                       "one forward pass per head, reusing the layers below each head.")
        else:
            st.caption(f"Each cell: the metric with that head switched off − the metric with "
                       f"every head on ({fmt(baseline)}). Blue = the metric fell without the "
                       f"head (it was helping the target), red = it rose (the head was "
                       f"working against it). Exact: one forward pass per head.")
            signed = True
        fig = plots.layer_head_heatmap(
            effects, f"Δ {score_unit} when a head is switched off ({mode} ablation)",
            "Δ metric" if metric is not None else f"Δ {score_unit}",
            fmt=".2g" if metric is None and info.score_kind == "embedding_shift" else ".3f",
            diverging=signed, colorscale=None if signed else "Reds", zmin=0.0,
            log_scale=log_colours)
        plots.columns_at_bottom(fig)
        ui.show_figure(fig, key="ablation", alt="Ablation effect of each head")
        ranked = heads.rank_heads(harm * effects)  # the most harmful removal first
        top_col, help_col = st.columns(2)

        def table(picked):
            return {"head": [heads.head_name(l, h) for l, h in picked],
                    f"Δ {score_unit}": [float(f"{effects[l, h]:.4g}") for l, h in picked]}

        with top_col:
            st.markdown("**Heads that matter most** (largest "
                        f"{'increase' if metric is None else 'drop'})")
            st.dataframe(table(ranked[:TOP]), hide_index=True, width="stretch")
        with help_col:
            helps = [(l, h) for l, h in ranked[::-1] if harm * effects[l, h] < 0][:TOP]
            st.markdown("**Heads whose removal lowers the score**" if metric is None else
                        "**Heads whose removal raises the metric**")
            if helps:
                st.dataframe(table(helps), hide_index=True, width="stretch")
            else:
                st.caption("None: switching off any single head makes the "
                           f"{'score worse' if metric is None else 'metric lower'} (or leaves "
                           "it unchanged).")
        column = "delta_target_metric" if metric is not None else f"delta_{info.score_kind}"
        ui.download_csv(partial(export.layer_head_csv, {column: effects}),
                        export.safe_filename(stem, "ablation", mode, suffix=".csv"),
                        "Ablation effects as CSV", key="dl_ablation",
                        help=f"{score_unit} with all heads on: {fmt(baseline)}.")

    # ---------------------------------------------------------------- switch heads off
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
        ranked = [heads.head_name(l, h) for l, h in heads.rank_heads(harm * effects)]
        presets[0].button("Top 3 heads", key="preset_top", on_click=set_off, args=(ranked[:3],),
                          help="The 3 heads with the largest ablation effect.", width="stretch")
        presets[1].button("Least useful half", key="preset_half", on_click=set_off,
                          args=(ranked[len(ranked) // 2:],), width="stretch",
                          help="The half of the heads with the smallest ablation effect.")
    presets[2].button("Clear", key="preset_clear", on_click=set_off, args=([],),
                      width="stretch")
    mask = heads.names_to_mask(off, n_layer, n_head)
    masked_score = baseline if not off else ui.computed(
        ("score", selection.model_name, text, mask.tobytes(), mode, metric), model.score, text,
        head_mask=mask, ablation=mode, metric=metric,
        label="Scoring with those heads switched off…")
    m1, m2, m3 = st.columns(3)
    what = "Score" if metric is None else "Metric"
    m1.metric(f"{what} with every head on", fmt(baseline), help=score_unit)
    m2.metric(f"{what} with those heads off", fmt(masked_score),
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
        change = ui.computed(("map_change", selection.key, mask.tobytes(), mode),
                             heads.attention_change, trace, masked,
                             label=f"Comparing every head's map with and without those heads "
                                   f"over {trace.n_tokens:,} tokens…")
        if change is None:
            st.info("Cancelled: change the heads or reload the page to compare them again.")
            st.stop()
        lowest = min(heads.parse_head_name(name)[0] for name in off)
        st.markdown(f"**How much each head's map moved** with {len(off)} head(s) off: the mean "
                    f"over query tokens of the total-variation distance between the two maps "
                    f"(0 = unchanged, 1 = no overlap). Layers up to L{lowest} cannot change.")
        fig = plots.layer_head_heatmap(change, "Change of each head's attention map",
                                       "mean TV distance", fmt=".3f", zmin=0.0,
                                       zmax=max(float(change.max()), 1e-6))
        plots.columns_at_bottom(fig)
        ui.show_figure(fig, key="change", alt="Change of each head's attention map")
        layer, head = ui.head_picker(trace, st.columns([2, 1])[0])
        picked = plots.head_name(layer, head)
        note = ""
        if layer <= lowest and lowest == n_layer - 1:
            note = (f"Every switched-off head is in the last layer (L{lowest}): no attention "
                    f"map can change, only the score. ")
        elif layer <= lowest:
            layer, head = heads.rank_heads(change)[0]
            note = (f"{picked} sits at or below the lowest switched-off layer (L{lowest}), so its "
                    f"map cannot change: showing {plots.head_name(layer, head)}, the head whose "
                    f"map moved most. Pick a layer above L{lowest} to choose another. ")
        name = plots.head_name(layer, head)
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
        fig = plots.tensor_figure(difference, diff_labels, diff_labels,
                                  f"{name}: after − before (red = more attention with the "
                                  f"heads off)", show_values=small, fmt=".2f",
                                  row_title="query", col_title="key")
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

    # ---------------------------------------------------------------- gradient
    st.subheader("Gradient importance (Michel, Levy & Neubig 2019)")
    if metric is None and info.score_kind == "embedding_shift":
        st.caption("The embedding shift is at its minimum (0) with every head on, so its "
                   "gradient there is exactly 0, and no single backward pass estimates it. The "
                   "second-order estimate ½‖∂e/∂ξ‖² (e = the normalised embedding, ξ the head's "
                   f"gate) needs one forward-mode pass per head, {n_layer * n_head} of them, "
                   "each dearer than a forward pass: **it costs more than the exact ablation "
                   "sweep above, which measures the same thing exactly; use the sweep.** The "
                   "estimate is here to compare with it.")
        grad_cost = f"{n_layer * n_head} forward-mode passes, slower than the sweep"
    else:
        st.caption(f"I = |∂ {'score' if metric is None else 'metric'} / ∂ξ| for each head's "
                   "gate ξ at ξ = 1: one backward pass "
                   "estimates every head's importance at once (a first-order estimate of the "
                   "ablation effect).")
        grad_cost = "one backward pass"
    normalise = ui.synced(st.toggle, "gnorm", "Normalise within each layer", False,
                          help="Divide each layer's row by its ℓ2 norm, as Michel et al. do "
                               "before comparing heads across layers.")
    # a backward pass keeps every head's attention of the scored text (the whole text, up to
    # the model's context)
    too_long = ui.too_long_for("A backward pass (it keeps every head's attention)",
                               score_tokens, P.gradient_bytes_per_squared_token(n_layer, n_head),
                               max_tokens_helps=False)
    gradient = None
    if too_long and grad_cost == "one backward pass":
        st.info(too_long)
    else:
        gradient = ui.run_or_wait(ui.pruning_key("gradient", selection.model_name, text, metric),
                                  P.gradient_importance, model, text, metric=metric,
                                  label=f"Gradient importance ({grad_cost})…",
                                  auto=runs_itself["gradient"],
                                  button=f"Compute gradient importance ({grad_cost})")
    if gradient is not None:
        shown_gradient = gradient
        if normalise:
            shown_gradient = heads.normalise_layers(gradient)
        what = ("½‖∂e/∂ξ‖²" if grad_cost != "one backward pass" else
                "|∂ score/∂ξ|" if metric is None else "|∂ metric/∂ξ|") \
            + (" (÷ layer norm)" if normalise else "")
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

    # ---------------------------------------------------------------- pruning curve
    st.subheader("Pruning curve: the score as more heads are removed")
    by, step = curve_controls("ablation" if metric is None and info.score_kind ==
                              "embedding_shift" else "gradient")
    per_step, steps = P.curve_steps(n_layer * n_head, step)
    curve_cost = ("gradient" if by == "gradient" else "ablation sweep")
    curve_auto = ui.pruning_runs_by_itself(model, score_tokens, metric, by)["curve"]
    curve, curve_refused = None, bool(too_long) and by == "gradient"
    if curve_refused:
        st.info(too_long + " Rank the heads by their ablation effect instead.")
    else:
        curve = ui.run_or_wait(ui.pruning_key("curve", selection.model_name, text, metric,
                                              mode=mode, by=by, step=step),
                               P.pruning_curve, model, text, step=step, by=by, mode=mode,
                               metric=metric, label=f"Pruning curve: one {curve_cost} per step",
                               auto=curve_auto,
                               button=f"Run the pruning curve ({steps} steps of {per_step} "
                                      f"head{'s' if per_step > 1 else ''}, one "
                                      f"{curve_cost} each)")
    if curve is None:
        if not curve_refused:
            st.info("The curve re-estimates importance after every step; press the button to "
                    "run it. A bar shows its progress.")
    else:
        ranking = "gradient importance" if by == "gradient" else "ablation effect"
        fig = plots.pruning_curve_figure(curve.fractions, curve.scores, baseline=baseline,
                                         score_name=score_unit,
                                         title=f"{score_unit} as heads are removed "
                                               f"(by {ranking})")
        ui.show_figure(fig, key="curve", alt="Pruning curve")
        ui.download_csv(partial(export.table_csv, {
            "fraction_removed": curve.fractions,
            "score" if metric is None else "target_metric": curve.scores,
            "heads_removed_this_step": [" ".join(plots.head_name(l, h) for l, h in step_heads)
                                        for step_heads in curve.removed]}),
            export.safe_filename(stem, "pruning_curve", by, suffix=".csv"),
            "Pruning curve as CSV", key="dl_curve")
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
