"""The Predictions page's view: what the model predicts at every position, how surprised it
was by each token of the text, and, for one prediction, which heads write it: each head's
direct effect on the logit (direct logit attribution) beside the exact effect of switching it
off; for an encoder-decoder, the decoder's predictions at each target position.

``show()`` builds the page's context once (``Predicted``: the run or trace and the model's
predictions; ``DecoderPredicted`` for an encoder-decoder) and walks its sections, each a
function of it. A new section is one function and one line."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import streamlit as st

from ... import analysis as A
from ... import plots, ui
from ...analysis import pruning
from ...analysis.attribution import check_attributable
from ...core.errors import MhaVizError
from ...plots import fit
from ...server import export
from .. import continuation
from ..words import predictions as words

MAPS = ("self", "encoder", "decoder", "cross")  # the sets of maps the page reads (maps.sets)
K = words.K
COLOURS = words.COLOURS
INTRO = words.INTRO


def strip_per_row() -> int:
    """Tokens per row of the loss strip: 6 on a phone, 12 elsewhere."""
    screen = ui.figure_screen()
    return 6 if screen is not None and screen.width < fit.NARROW_PX else 12


def strip_hover(labels, pred, shift: int) -> list[str]:
    """Each cell's hover on the loss strip: the token, its probability and loss, and the top
    guesses of the position that predicted it (shift 1: a causal model predicts token i at
    position i - 1, and token 0 not at all; shift 0: a decoder predicts target token i at
    position i)."""
    guesses = [words.guesses([ui.md_escape(t) for t in toks], probs, quoted=True)
               for toks, probs in zip(pred.top_tokens, pred.top_probs)]
    loss, p = pred.token_loss, pred.token_probability
    return [f"{i}: '{labels[i]}'" + (
        "" if i < shift else f"<br>p = {p[i]:.1%}, loss {loss[i]:.2f} nats"
                             f"<br>expected: {guesses[i - shift]}") for i in range(len(labels))]


def top_guesses(pred) -> list[str]:
    """Each position's top K guesses, for a table."""
    return [words.guesses(toks, probs) for toks, probs in zip(pred.top_tokens, pred.top_probs)]


def attribution_refused(model) -> str | None:
    """Why direct logit attribution is not shown for this model (None: it is), in the
    library's own words (analysis.check_attributable: a post-norm model, or logits that are
    not a sum of the heads' terms, like Gemma 2's soft-capped ones)."""
    try:
        check_attributable(model)
    except MhaVizError as error:
        return f"No direct logit attribution here: {ui.md_escape(error)}."
    return None


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


@dataclass(frozen=True)
class Predicted:
    """A model of one stack's predictions: every position's (causal) or the masked
    positions' (masked-LM), from one kept pass (``run``, causal) or the model's own masked
    input."""
    selection: ui.Selection
    run: object | None  # the ForwardRun of a causal model
    trace: object
    pred: object  # models.Predictions
    labels: list[str]  # the predicted tokens, the model's written ones marked

    @property
    def model(self):
        return self.selection.model

    @property
    def causal(self) -> bool:
        return self.model.info.causal


def predicted(selection: ui.Selection) -> Predicted:
    """The run or trace and the predictions (a masked-LM: its masked positions chosen
    here). A causal model's predictions, metric and attribution all come from one forward
    pass (model.run); a masked-LM model predicts from its own masked input, so it traces
    apart."""
    info = selection.model.info if selection.model is not None else None
    run = ui.get_run(selection) if info is not None and info.causal else None
    trace = run.trace if run is not None else ui.get_trace(selection)
    model = selection.model
    ui.trace_notes(trace)
    if not model.info.has_lm_head:
        st.info(words.no_lm_head(ui.md_escape(model.info.name)))
        st.stop()
    if run is not None:
        pred = ui.memo(run.predict, k=K)
        # the tokens the model wrote after the text (Continue, on Home) carry their mark
        return Predicted(selection, run, trace, pred,
                         continuation.marked_labels(trace, pred.tokens))
    candidates = [i for i in range(trace.n_tokens) if not trace.special_mask[i]]
    masked = ui.synced(st.multiselect, "masked", "Positions to mask", candidates[:1],
                       options=candidates, valid=lambda v: all(int(p) in candidates for p in v),
                       format_func=lambda i: f"{i}: {trace.display_tokens[i]}",
                       help=words.MASKED_HELP)
    if not masked:
        st.info("Pick at least one position to mask.")
        st.stop()
    pred = ui.memo(model.predict, selection.text, k=K, masked_positions=list(masked),
                   max_tokens=selection.max_tokens)
    return Predicted(selection, None, trace, pred, pred.tokens)


def surprise_section(p: Predicted) -> None:
    """How surprised a causal model was by each token: the loss strip, and every position
    as a table."""
    pred, labels = p.pred, p.labels
    loss = pred.token_loss  # NaN for the first token: nothing predicts it
    hover = strip_hover(labels, pred, shift=1)
    st.subheader("How surprised the model was by each token")
    st.caption(words.surprise(pred.mean_loss, pred.perplexity,
                              p.selection.generation is not None))
    fig = plots.token_loss_strip(labels, loss, hover, per_row=strip_per_row())
    ui.show_figure(fig, key="loss_strip", on_select=ui.callback(explain_clicked_token),
                   alt="Per-token loss of the text")
    table = {"position": list(range(len(labels))), "token": labels,
             "loss (nats)": [None] + [round(float(v), 3) for v in pred.loss],
             f"top {K} next tokens": top_guesses(pred)}
    with st.expander("Every position as a table"):
        st.dataframe(table, hide_index=True, width="stretch")
        ui.download_csv(partial(export.table_csv, table),
                        export.safe_filename(p.selection.file_stem, "predictions",
                                             suffix=".csv"), "Predictions as CSV",
                        key="dl_predictions")


def fillers_section(p: Predicted) -> None:
    """A masked-LM's fillers for the positions it cannot see."""
    pred = p.pred
    st.subheader("The model's fillers for the masked positions")
    st.dataframe({"position": [int(i) for i in pred.positions],
                  "original": [pred.tokens[i] for i in pred.positions],
                  f"top {K} fillers": top_guesses(pred)},
                 hide_index=True, width="stretch")


def every_position_section(p: Predicted) -> None:
    (surprise_section if p.causal else fillers_section)(p)


def one_prediction_section(p: Predicted) -> None:
    """Which heads write one prediction: the target metric chosen, the model's guesses there,
    each head's direct effect beside its exact effect."""
    pred, model = p.pred, p.model
    st.subheader("Which heads write one prediction")
    n = len(pred.tokens)
    positions = list(range(n)) if p.causal else [int(i) for i in pred.positions]
    row_of = {int(i): r for r, i in enumerate(pred.positions)}
    metric = ui.target_metric_picker(model, p.labels, positions,
                                     lambda i: pred.top_ids[row_of[i]][:2])
    position = int(metric.position)
    contrast = metric.contrast
    if contrast is None:  # attribution reads a direction: the second guess unless one is given
        contrast = ui.get_value("contrast") or int(pred.top_ids[row_of[position]][1])
    row = row_of[position]
    guesses = words.guesses([ui.md_escape(t) for t in pred.top_tokens[row]],
                            pred.top_probs[row], ".1%", quoted=True)
    if p.causal and position + 1 < n:
        st.markdown(f"After **'{ui.md_escape(pred.tokens[position])}'** (position "
                    f"{position}) the model expected {guesses}; the text goes on with "
                    f"'{ui.md_escape(pred.tokens[position + 1])}' (p = "
                    f"{pred.token_probability[position + 1]:.1%}).")
    else:
        st.markdown(f"At position {position} the model's top {K}: {guesses}.")
    if p.run is not None:
        value = p.run.score(metric)  # two rows of W_U at one position: nothing to cache
    else:
        value = ui.memo(model.score, p.selection.text, metric=metric)
    st.markdown(words.metric_line(ui.md_escape(model.resolve_metric(metric, n).description),
                                  value))
    st.caption(COLOURS)
    dla_col, ablation_col = ui.figure_columns(2)
    with dla_col:
        direct_effects(p, position, metric.target, contrast)
    with ablation_col:
        exact_effects(p, metric)


def direct_effects(p: Predicted, position: int, target, contrast) -> None:
    """Each head's direct effect on the metric (a causal pre-norm model)."""
    refused = attribution_refused(p.model) if p.run is not None else None
    if p.run is None or refused:
        st.info(refused or words.POST_NORM)
        return
    attribution = A.attribute_run(p.run, position, target, contrast)
    fig = plots.layer_head_heatmap(attribution.heads, "Direct effect of each head",
                                   "direct effect (logits)", fmt=".2f", diverging=True)
    plots.columns_at_bottom(fig)
    ui.show_figure(fig, key="dla", alt="Direct logit attribution of each head",
                   share=ui.column_share(0.5))
    st.caption(words.direct_effects(attribution.position, attribution.scale,
                                    A.attribution_parts(attribution),
                                    attribution.sum_of_components, attribution.total),
               help=ui.TERMS["logit difference"])


def exact_effects(p: Predicted, metric) -> None:
    """Each head's exact effect on the metric: the sweep Pruning impact shares."""
    info, n = p.model.info, len(p.pred.tokens)
    effects = ui.run_or_wait(
        pruning.ablation_effects, p.model, p.selection.text, metric=metric, name="abl",
        label="Switching each head off in turn",
        auto=ui.runs_on_open("predictions.ablation", n),
        button=f"Run the exact ablation ({info.n_layer * info.n_head} heads × {n} tokens)")
    if effects is None:
        st.info(words.ablation_waits(info.n_layer * info.n_head,
                                     ui.RUNS_ON_OPEN["predictions.ablation"].up_to))
        return
    # what each head adds: the metric with every head on − with it switched off
    # (ablation_effects is off − on: the sweep Pruning impact shares)
    fig = plots.layer_head_heatmap(-effects, "Exact effect of each head", "metric on − off",
                                   fmt=".2f", diverging=True)
    plots.columns_at_bottom(fig)
    ui.show_figure(fig, key="ablation_metric", alt="Exact effect of each head on the metric",
                   share=ui.column_share(0.5))
    st.caption(words.ABLATION)


def caveat(context) -> None:
    ui.caveat()


# ------------------------------------------------------------------ an encoder-decoder


@dataclass(frozen=True)
class DecoderPredicted:
    """An encoder-decoder: what the decoder predicts at each target position, teacher-forced
    on the target (or on its own greedy output)."""
    selection: ui.Selection
    seq: object  # the EncoderDecoderTrace
    pred: object

    @property
    def model(self):
        return self.selection.model


def decoder_predicted(selection: ui.Selection) -> DecoderPredicted:
    seq = ui.get_seq2seq_trace(selection)
    return DecoderPredicted(selection, seq, ui.memo(selection.model.predict, selection.text,
                                                    target=selection.target, k=K))


def decoder_surprise_section(d: DecoderPredicted) -> None:
    """How surprised the decoder was by each target token, and every position as a table."""
    pred = d.pred
    labels, loss = pred.tokens, pred.token_loss
    hover = strip_hover(labels, pred, shift=0)
    whose = "the model's own output (greedy)" if d.seq.generated else "the target"
    st.subheader("How surprised the decoder was by each target token")
    st.caption(words.decoder_surprise(whose, pred.mean_loss))
    # at least 1 nat at the dark end: a near-perfect model's 0.001 should not look alarming
    fig = plots.token_loss_strip(labels, loss, hover, per_row=strip_per_row(),
                                 title="How surprised the decoder was by each target token",
                                 max_loss=max(1.0, pred.max_loss), clickable=False,
                                 given="the source and the target before it")
    ui.show_figure(fig, key="loss_strip", alt="Per-token loss of the target")
    table = {"position": list(range(len(labels))), "target token": labels,
             "loss (nats)": [round(float(v), 3) for v in loss],
             f"top {K} predictions": top_guesses(pred)}
    st.dataframe(table, hide_index=True, width="stretch")
    ui.download_csv(partial(export.table_csv, table),
                    export.safe_filename(d.selection.file_stem, "predictions", suffix=".csv"),
                    "Predictions as CSV", key="dl_predictions")


def decoder_attribution_section(d: DecoderPredicted) -> None:
    """Which decoder heads write the target's token at one position: each self-attention
    and cross-attention head's direct effect on the logit difference."""
    st.subheader("Which heads write one prediction")
    model, labels = d.model, d.pred.tokens
    positions = list(range(len(labels)))
    pos_col, contrast_col = st.columns(2)
    with pos_col:
        position = ui.synced(st.selectbox, "position", "Target position", positions[0],
                             options=positions, valid=lambda i: int(i) in positions,
                             format_func=lambda i: f"{i}: {labels[i]}",
                             help="The decoder's prediction of this target token.")
    runner_up = d.pred.runner_up(int(position))
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
    attribution = ui.memo(A.direct_logit_attribution_seq2seq, model, d.selection.text,
                          target=d.selection.target, position=int(position),
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
    st.caption(words.decoder_direct_effects(
        ui.md_escape(attribution.description), attribution.scale,
        A.attribution_parts(attribution), attribution.sum_of_components, attribution.total))


SECTIONS = [every_position_section, one_prediction_section, caveat]
DECODER_SECTIONS = [decoder_surprise_section, decoder_attribution_section, caveat]


def show() -> None:
    selection = ui.sidebar(shows_saved_traces=False, reads=MAPS)
    with ui.guard():
        if selection.kind is None:
            ui.show_sections(predicted(selection), SECTIONS)
        else:  # an encoder-decoder: its decoder's predictions, whichever set is shown
            ui.show_sections(decoder_predicted(selection), DECODER_SECTIONS)
