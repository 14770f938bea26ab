"""What every section of the Pruning impact page reads (``Measured``, and ``Seq2SeqMeasured``
for an encoder-decoder), built once from the sidebar's selection and the page's choices: what
a head's removal is measured by (the model's score or one prediction's target metric), how a
head is switched off, and the score with every head on."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, partial

import streamlit as st

from .... import ui
from ....analysis import encoder_decoder_ablation as seq2seq_ablation
from ....analysis import pruning
from ...words import pruning as words

TOP = 5  # rows of the tables of heads; the model's guesses offered as a target


@dataclass(frozen=True)
class Measured:
    """One stack's page: the input, the measure and the choices. ``effects`` (the ablation
    sweep) is run, or waits for its button, where a section first asks for it."""
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
    def text(self) -> str:
        return self.selection.text

    @property
    def total_heads(self) -> int:
        return self.model.info.n_layer * self.model.info.n_head

    @property
    def second_order(self) -> bool:
        return pruning.second_order_gradient(self.model.info.score_kind, self.metric)

    def runs_on_open(self, by: str = ui.PRUNING_DEFAULTS["by"]) -> dict[str, bool]:
        return ui.pruning_runs_on_open(self.model.info.score_kind, self.score_tokens,
                                       self.metric, by)

    @cached_property
    def effects(self):
        """The exact effect of switching each head off alone (the sweep), or None while it
        waits for its button (drawn where a section first asks)."""
        return ui.run_or_wait(
            pruning.ablation_effects, self.model, self.text, mode=self.mode,
            metric=self.metric, name="ablation",
            label=f"Ablation sweep: each of the {self.total_heads} heads switched off in turn on "
                  f"{self.score_tokens} tokens, layer by layer",
            auto=self.runs_on_open()["ablation"],
            button=f"Run the ablation sweep ({self.total_heads} heads × {self.score_tokens} "
                   f"tokens)", hint=words.NOT_PREPARED)

    @property
    def backward_refused(self) -> str | None:
        """Why a backward pass (it keeps every head's attention of the scored text) cannot
        run on this text, or None."""
        info = self.model.info
        return ui.too_long_for("A backward pass (it keeps every head's attention)",
                               self.score_tokens,
                               pruning.gradient_bytes_per_squared_token(info.n_layer,
                                                                        info.n_head),
                               max_tokens_helps=False)


def measured(selection: ui.Selection) -> Measured:
    """The page's measure and choices, drawn above its sections."""
    trace = ui.get_trace(selection)
    model = selection.model
    ui.trace_notes(trace)
    score_tokens = model.n_tokens(selection.text)
    metric, score_unit = measure(selection, trace, score_tokens)
    scored_tokens_notes(trace, score_tokens)
    mode = ui.synced(st.radio, "ablation", "Switching a head off means",
                     ui.PRUNING_DEFAULTS["mode"], options=list(words.ABLATION_MODES),
                     format_func=words.ABLATION_MODES.get, horizontal=True,
                     help=words.ABLATION_MODE_HELP)
    log_colours = ui.synced(st.toggle, "logc", "Log colour scale for the head maps", False,
                            help=words.LOG_COLOURS_HELP)
    baseline = ui.computed(model.score, selection.text, metric=metric,
                           label="Scoring the text…")
    return Measured(selection, trace, metric, score_unit, score_tokens, mode, log_colours,
                    baseline)


def target_metric(selection, trace):
    """The target-metric controls, with the model's own top two guesses as defaults."""
    model = selection.model
    if model.info.causal:
        run = ui.get_run(selection)  # shared with the Predictions page: one forward for both
        pred = ui.memo(run.predict, k=TOP)
        return ui.target_metric_picker(model, pred.tokens, range(len(pred.tokens)),
                                       lambda p: pred.top_ids[p][:2])
    ordinary = [i for i in range(trace.n_tokens) if not trace.special_mask[i]]
    return ui.target_metric_picker(model, trace.display_tokens, ordinary,
                                   partial(masked_fillers, selection))


def masked_fillers(selection: ui.Selection, position: int):
    """A masked-LM's two best fillers of a position (the target picker's defaults)."""
    return ui.memo(selection.model.predict, selection.text, k=TOP, masked_positions=[position],
                   max_tokens=selection.max_tokens).top_ids[0][:2]


def measure_choice(score: str, example: str) -> str:
    """ "score" (the model's score, labelled ``score``) or "target" (a target metric)."""
    return ui.synced(st.radio, "measure", "Measure each head by", "score",
                     options=["score", "target"], horizontal=True,
                     format_func={"score": score,
                                  "target": "one prediction (a target metric)"}.get,
                     help=example)


def measure(selection, trace, score_tokens: int):
    """What a head's removal is measured by: the model's own score, or (models with an LM
    head) one prediction's target metric, chosen as on the Predictions page; said on the page.
    Returns (the metric or None, the score's label)."""
    model, info = selection.model, selection.model.info
    chosen = "score"
    if info.has_lm_head:
        chosen = measure_choice(f"the model's score ({info.score_short_name})",
                                words.TARGET_METRIC_EXAMPLE)
    if chosen != "target":
        st.markdown(f"**Score used on this page:** {ui.md_escape(info.score_name)}. "
                    f"{info.score_explanation}")
        return None, info.score_short_name
    metric = target_metric(selection, trace)
    described = model.resolve_metric(metric, score_tokens).description
    st.markdown(words.measured_on_this_page(ui.md_escape(described)))
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


# ------------------------------------------------------------------- an encoder-decoder


@dataclass(frozen=True)
class Seq2SeqMeasured:
    """An encoder-decoder's page: the pair, the measure (the target's loss or one target
    position's metric), every head's ablation effect and gradient importance of every kind,
    and the kind the sidebar shows."""
    selection: ui.Selection
    seq: object  # the EncoderDecoderTrace
    metric: object
    effects: dict  # {kind: [L, H]} and "base"
    score_unit: str

    @property
    def model(self):
        return self.selection.model

    @property
    def kind(self) -> str:
        return self.selection.kind

    @property
    def base(self) -> float:
        return float(self.effects["base"])

    @property
    def scored(self) -> str:
        return "the model's own output" if self.seq.generated else "the target"

    @property
    def harm(self) -> float:
        return pruning.harm_sign(self.metric)  # red: a head that helps (a loss rises without)

    @property
    def lost(self) -> str:
        return words.lost_label(self.metric is not None, "loss (nats/token)")

    @cached_property
    def gradient(self) -> dict:
        selection = self.selection
        return ui.memo(seq2seq_ablation.gradient_importance_seq2seq, self.model,
                       source=selection.text, target=selection.target, metric=self.metric)


def seq2seq_measured(selection: ui.Selection) -> Seq2SeqMeasured:
    """The measure of an encoder-decoder's heads, chosen above its sections."""
    seq = ui.get_seq2seq_trace(selection)
    model, source, target = selection.model, selection.text, selection.target
    metric = encoder_decoder_measure(selection)
    effects = ui.memo(seq2seq_ablation.ablation_effects_seq2seq, model, source=source,
                      target=target, metric=metric)
    score_unit = ("loss (nats/token)" if metric is None else
                  seq2seq_ablation.pair_score(model, source, target, metric).description)
    return Seq2SeqMeasured(selection, seq, metric, effects, score_unit)


def encoder_decoder_measure(selection):
    """The score measured on an encoder-decoder: the target's teacher-forced loss (None), or
    one target position's metric (defaults: the decoder's top two guesses there)."""
    chosen = measure_choice("the target's loss (nats/token)", words.SEQ2SEQ_METRIC_EXAMPLE)
    if chosen != "target":
        return None
    pred = ui.memo(selection.model.predict, selection.text, target=selection.target, k=TOP)
    return ui.target_metric_picker(selection.model, pred.tokens, range(len(pred.tokens)),
                                   lambda p: pred.top_ids[p][:2], decoder=True)
