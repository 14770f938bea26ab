"""The Predictions page's view: what the model predicts at every position, how surprised it
was by each token of the text, and, for one prediction, which heads write it: each head's
direct effect on the logit (direct logit attribution) beside the exact effect of switching it
off; for an encoder-decoder, the decoder's predictions at each target position."""

from __future__ import annotations

from functools import partial

import streamlit as st

from ... import analysis as A
from ... import plots, ui
from .. import continuation
from ...analysis import pruning
from ...analysis.attribution import check_attributable
from ...core.errors import MhaVizError
from ...plots import fit
from ...server import export

K = 5
# the page's one colour rule, said once above its red-blue maps
COLOURS = ("In the maps below, red = the head raises the metric (it pushes the prediction "
           "toward the target), blue = it lowers it; white = no effect.")
INTRO = ("What the model predicts at every position, how surprised it was by each token of the "
         "text, and, for one prediction, which heads write it: each head's direct effect on "
         "the logit (direct logit attribution) beside the exact effect of switching it off.")


def strip_per_row() -> int:
    """Tokens per row of the loss strip: 6 on a phone, 12 elsewhere."""
    screen = ui.figure_screen()
    return 6 if screen is not None and screen.width < fit.NARROW_PX else 12


def strip_hover(labels, pred, shift: int) -> list[str]:
    """Each cell's hover on the loss strip: the token, its probability and loss, and the top
    guesses of the position that predicted it (shift 1: a causal model predicts token i at
    position i - 1, and token 0 not at all; shift 0: a decoder predicts target token i at
    position i)."""
    guesses = [", ".join(f"'{ui.md_escape(t)}' {p:.0%}" for t, p in zip(toks, probs))
               for toks, probs in zip(pred.top_tokens, pred.top_probs)]
    loss, p = pred.token_loss, pred.token_probability
    return [f"{i}: '{labels[i]}'" + (
        "" if i < shift else f"<br>p = {p[i]:.1%}, loss {loss[i]:.2f} nats"
                             f"<br>expected: {guesses[i - shift]}") for i in range(len(labels))]


def decoder_predictions(selection, seq) -> None:
    """An encoder-decoder: what the decoder predicts at each target position, teacher-forced,
    and how surprised it was by each target token."""
    pred = ui.memo(selection.model.predict, selection.text, target=selection.target, k=K)
    labels, loss = pred.tokens, pred.token_loss
    hover = strip_hover(labels, pred, shift=0)
    whose = "the model's own output (greedy)" if seq.generated else "the target"
    st.subheader("How surprised the decoder was by each target token")
    st.caption(f"The decoder reads {whose} teacher-forced: at each position it has the source "
               f"and the target tokens before. Mean loss {pred.mean_loss:.3f} "
               f"nats/token. Dark cells are tokens it did not expect; point at or tap a cell "
               f"for its probability and the decoder's top {K} guesses there.")
    # at least 1 nat at the dark end: a near-perfect model's 0.001 should not look alarming
    fig = plots.token_loss_strip(labels, loss, hover, per_row=strip_per_row(),
                                 title="How surprised the decoder was by each target token",
                                 max_loss=max(1.0, pred.max_loss), clickable=False,
                                 given="the source and the target before it")
    ui.show_figure(fig, key="loss_strip", alt="Per-token loss of the target")
    table = {"position": list(range(len(labels))), "target token": labels,
             "loss (nats)": [round(float(v), 3) for v in loss],
             f"top {K} predictions": [", ".join(f"{t} {p:.0%}" for t, p in zip(toks, probs))
                                      for toks, probs in zip(pred.top_tokens, pred.top_probs)]}
    st.dataframe(table, hide_index=True, width="stretch")
    ui.download_csv(partial(export.table_csv, table),
                    export.safe_filename(selection.file_stem, "predictions", suffix=".csv"),
                    "Predictions as CSV", key="dl_predictions")
    decoder_attribution(selection, pred)
    ui.caveat()


def decoder_attribution(selection, pred) -> None:
    """Which decoder heads write the target's token at one position: each self-attention
    and cross-attention head's direct effect on the logit difference."""
    st.subheader("Which heads write one prediction")
    model = selection.model
    labels = pred.tokens
    positions = list(range(len(labels)))
    pos_col, contrast_col = st.columns(2)
    with pos_col:
        position = ui.synced(st.selectbox, "position", "Target position", positions[0],
                             options=positions, valid=lambda p: int(p) in positions,
                             format_func=lambda i: f"{i}: {labels[i]}",
                             help="The decoder's prediction of this target token.")
    runner_up = pred.runner_up(int(position))
    with contrast_col:
        contrast_text = ui.synced(
            st.text_input, "contrast", "Contrast token (optional)", "",
            placeholder=model.display_tokens([runner_up])[0].replace("␣", " "),
            help="Measure logit(target token) − logit(contrast). Empty: the decoder's best "
                 "guess other than the target's token.")
    refused = attribution_refused(model)
    if refused:
        st.info(refused)
        return
    st.caption(COLOURS)
    attribution = ui.memo(A.direct_logit_attribution_seq2seq, selection.model, selection.text,
                          target=selection.target, position=int(position),
                          contrast=contrast_text or runner_up)
    self_col, cross_col = ui.figure_columns(2)
    for col, values, kind, key in (
            (self_col, attribution.heads, "Decoder self-attention", "dla_decoder"),
            (cross_col, attribution.cross_heads, "Cross-attention", "dla_cross")):
        with col:
            fig = plots.layer_head_heatmap(values, f"{kind} heads", "direct effect (logits)",
                                           fmt=".2f", diverging=True)
            plots.columns_at_bottom(fig)
            ui.show_figure(fig, key=key, share=ui.column_share(0.5),
                           alt=f"Direct logit attribution of each {kind.lower()} head")
    parts = A.attribution_parts(attribution)
    st.caption(
        f"Direct effect on {ui.md_escape(attribution.description)}: each head's output at "
        f"this position, "
        f"through its slice of W_O and the final norm (its scale frozen at "
        f"{attribution.scale:.3g}). Self-attention heads {parts['self-attention heads']:.2f}; "
        f"cross-attention heads {parts['cross-attention heads']:.2f}; MLPs "
        f"{parts['MLPs']:.2f}; embeddings {parts['embeddings']:.2f}; the rest "
        f"{parts['the rest']:.2f}. They sum to {attribution.sum_of_components:.3f}, the "
        f"decoder's own {attribution.total:.3f}. The source reaches this prediction only "
        f"through the cross-attention heads; a direct effect leaves out what a head does "
        f"through later layers.")


def explain_clicked_token() -> None:
    """A click on token i of the loss strip -> the prediction of that token (made at i - 1),
    measured for the model's own top guesses there."""
    points = ((st.session_state.get("loss_strip") or {}).get("selection") or {}).get("points")
    for point in points or []:
        position = plots.strip_point_to_token(point)
        if position is not None and position >= 1:
            ui.set_value("position", position - 1)
            ui.set_value("target", "")
            ui.set_value("contrast", "")
            return


def attribution_refused(model) -> str | None:
    """Why direct logit attribution is not shown for this model (None: it is), in the
    library's own words (analysis.check_attributable: a post-norm model, or logits that are
    not a sum of the heads' terms, like Gemma 2's soft-capped ones)."""
    try:
        check_attributable(model)
    except MhaVizError as error:
        return f"No direct logit attribution here: {ui.md_escape(error)}."
    return None


def show() -> None:
    selection = ui.sidebar(shows_saved_traces=False, encoder_decoders=True)
    with ui.guard():
        if selection.kind is not None:
            decoder_predictions(selection, ui.get_seq2seq_trace(selection))
            st.stop()
        info = selection.model.info if selection.model is not None else None
        # A causal model's predictions, metric and attribution all come from one forward pass
        # (model.run); a masked-LM model predicts from its own masked input, so it traces apart.
        run = ui.get_run(selection) if info is not None and info.causal else None
        trace = run.trace if run is not None else ui.get_trace(selection)
        model = selection.model
        info = model.info
        text = selection.text
        ui.trace_notes(trace)
        if not info.has_lm_head:
            st.info(f"{ui.md_escape(info.name)} has no language-model head: it turns a text into "
                    f"an embedding and predicts no tokens. Pick **SmolLM2** (bundled) or another "
                    f"causal or masked-LM model in the sidebar.")
            st.stop()

        # ---------------------------------------------------------------- every position
        if info.causal:
            pred = ui.memo(run.predict, k=K)
            # the tokens the model wrote after the text (Continue, on Home) carry their mark
            labels = continuation.marked_labels(trace, pred.tokens)
            loss = pred.token_loss  # NaN for the first token: nothing predicts it
            hover = strip_hover(labels, pred, shift=1)
            st.subheader("How surprised the model was by each token")
            st.caption(f"Mean loss {pred.mean_loss:.3f} nats/token (perplexity "
                       f"{pred.perplexity:.1f}). Dark cells are tokens the model did not "
                       f"expect; point at or tap a cell for its probability and the model's top "
                       f"{K} guesses for that place."
                       + (" The model wrote the marked tokens itself, so each was among its "
                          "own guesses (its first, when it wrote greedily)."
                          if selection.generation is not None else ""))
            fig = plots.token_loss_strip(labels, loss, hover, per_row=strip_per_row())
            ui.show_figure(fig, key="loss_strip", on_select=ui.callback(explain_clicked_token),
                           alt="Per-token loss of the text")
            table = {"position": list(range(len(labels))), "token": labels,
                     "loss (nats)": [None] + [round(float(v), 3) for v in pred.loss],
                     f"top {K} next tokens": [", ".join(f"{t} {p:.0%}" for t, p in zip(toks, probs))
                                              for toks, probs in zip(pred.top_tokens,
                                                                     pred.top_probs)]}
            with st.expander("Every position as a table"):
                st.dataframe(table, hide_index=True, width="stretch")
                ui.download_csv(partial(export.table_csv, table),
                                export.safe_filename(selection.file_stem, "predictions",
                                                     suffix=".csv"), "Predictions as CSV",
                                key="dl_predictions")
        else:
            candidates = [i for i in range(trace.n_tokens) if not trace.special_mask[i]]
            masked = ui.synced(st.multiselect, "masked", "Positions to mask", candidates[:1],
                               options=candidates,
                               valid=lambda v: all(int(p) in candidates for p in v),
                               format_func=lambda i: f"{i}: {trace.display_tokens[i]}",
                               help="A masked-LM model predicts the tokens it cannot see: each "
                                    "chosen position is replaced by [MASK].")
            if not masked:
                st.info("Pick at least one position to mask.")
                st.stop()
            pred = ui.memo(model.predict, text, k=K,
                           masked_positions=list(masked), max_tokens=selection.max_tokens)
            st.subheader("The model's fillers for the masked positions")
            st.dataframe({"position": [int(p) for p in pred.positions],
                          "original": [pred.tokens[p] for p in pred.positions],
                          f"top {K} fillers": [", ".join(f"{t} {p:.0%}" for t, p in zip(toks, probs))
                                               for toks, probs in zip(pred.top_tokens,
                                                                      pred.top_probs)]},
                         hide_index=True, width="stretch")

        # ---------------------------------------------------------------- one prediction
        st.subheader("Which heads write one prediction")
        n = len(pred.tokens)
        positions = list(range(n)) if info.causal else [int(p) for p in pred.positions]
        row_of = {int(p): r for r, p in enumerate(pred.positions)}
        metric = ui.target_metric_picker(model, labels if info.causal else pred.tokens, positions,
                                         lambda p: pred.top_ids[row_of[p]][:2])
        position, target, contrast = metric.position, metric.target, metric.contrast
        if contrast is None:  # attribution reads a direction: the second guess unless one is given
            contrast = ui.get_value("contrast") or int(pred.top_ids[row_of[position]][1])
        row = row_of[int(position)]
        guesses = ", ".join(f"'{ui.md_escape(t)}' {p:.1%}"
                            for t, p in zip(pred.top_tokens[row], pred.top_probs[row]))
        if info.causal and int(position) + 1 < n:
            actual = pred.tokens[int(position) + 1]
            p_actual = pred.token_probability[int(position) + 1]
            st.markdown(f"After **'{ui.md_escape(pred.tokens[int(position)])}'** (position "
                        f"{int(position)}) the model expected {guesses}; the text goes on with "
                        f"'{ui.md_escape(actual)}' (p = {p_actual:.1%}).")
        else:
            st.markdown(f"At position {int(position)} the model's top {K}: {guesses}.")
        if run is not None:
            value = run.score(metric)  # two rows of W_U at one position: nothing to cache
        else:
            value = ui.memo(model.score, text, metric=metric)
        resolved = model.resolve_metric(metric, n)
        st.markdown(f"**Metric:** {ui.md_escape(resolved.description)} = **{value:.3f}**. "
                    f"In code: `model.score(text, metric=TargetMetric(...))`; `ablation_effects`, "
                    f"`gradient_importance` and `pruning_curve` take the same `metric=`.")

        st.caption(COLOURS)
        dla_col, ablation_col = ui.figure_columns(2)
        with dla_col:
            refused = attribution_refused(model) if run is not None else None
            if run is not None and not refused:
                attribution = A.attribute_run(run, int(position), target, contrast)
                fig = plots.layer_head_heatmap(
                    attribution.heads, "Direct effect of each head",
                    "direct effect (logits)", fmt=".2f", diverging=True)
                plots.columns_at_bottom(fig)
                ui.show_figure(fig, key="dla", alt="Direct logit attribution of each head",
                               share=ui.column_share(0.5))
                parts = A.attribution_parts(attribution)
                st.caption(
                    f"Each head's output at position {attribution.position}, through its slice of "
                    f"W_O and the final norm (its scale frozen at {attribution.scale:.3g}), read "
                    f"along W_U[target] − W_U[contrast]. All heads together: "
                    f"{parts['self-attention heads']:.2f}; MLPs {parts['MLPs']:.2f}; embeddings "
                    f"{parts['embeddings']:.2f}; the rest {parts['the rest']:.2f}. "
                    f"They sum to {attribution.sum_of_components:.3f}, the model's logit difference "
                    f"{attribution.total:.3f}. A direct effect leaves out what a head does through "
                    f"later layers: compare the ablation beside it.",
                    help=ui.TERMS["logit difference"])
            else:
                st.info(refused or "Direct logit attribution needs a pre-norm model (GPT-2, the "
                                   "Llama family): in a post-norm model like BERT the residual "
                                   "stream is renormalized after every layer, so it is not a sum "
                                   "of the heads' outputs.")
        with ablation_col:
            effects = ui.run_or_wait(
                pruning.ablation_effects, model, text, metric=metric, name="abl",
                label="Switching each head off in turn",
                auto=ui.runs_on_open("predictions.ablation", n),
                button=f"Run the exact ablation ({info.n_layer * info.n_head} heads × {n} tokens)")
            if effects is None:
                st.info(f"The exact sweep runs the layers above each of the "
                        f"{info.n_layer * info.n_head} heads once; past "
                        f"{ui.RUNS_ON_OPEN['predictions.ablation'].up_to} tokens it waits for "
                        f"the button above.")
            else:
                # what each head adds: the metric with every head on − with it switched off
                # (ablation_effects is off − on: the sweep Pruning impact shares)
                fig = plots.layer_head_heatmap(
                    -effects, "Exact effect of each head",
                    "metric on − off", fmt=".2f", diverging=True)
                plots.columns_at_bottom(fig)
                ui.show_figure(fig, key="ablation_metric", alt="Exact effect of each head on "
                               "the metric", share=ui.column_share(0.5))
                st.caption("Each cell: the metric with every head on − the metric with that "
                           "head switched off, so what the head adds to it. It counts every "
                           "path, direct and through later layers.")
        ui.caveat()
