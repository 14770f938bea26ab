"""The Entropy page's view: how broad or focused each head is (mean entropy per head, the
broadest and most focused heads), and, each drawn when opened, how far each head looks, one
head's entropy per query token and where the attention goes (token classes); for an
encoder-decoder's cross-attention, the entropy over the source.

``show()`` builds the page's context once (``Entropy``: the trace as shown, the scale, every
head's entropy; ``CrossEntropy`` for cross-attention, whose rows run over the source) and
walks its sections, each a function of it. A new section is one function and one line."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import streamlit as st

from ... import analysis as A
from ... import plots, ui
from ...server import export
from ..words import entropy as words
from ..words import value_weights

MAPS = ("self", "encoder", "decoder", "cross")  # the sets of maps the page reads (maps.sets)
TOP = 5  # broadest / most focused heads listed
SMOOTHING = 1e-4  # Clark et al. 2019: A' = 0.9999 A + 0.0001 / n
INTRO = words.INTRO


@dataclass(frozen=True)
class Entropy:
    """What every section of a square map's page reads: the trace, the trace as shown (hidden
    tokens removed), the scale and smoothing, and every head's mean entropy."""
    selection: ui.Selection
    trace: object
    shown: object
    normalized: bool
    smoothing: float
    ent: np.ndarray  # [L, H] on the chosen scale
    row_max: np.ndarray  # ln(keys row i sees)

    @property
    def n(self) -> int:
        return self.shown.n_tokens

    @property
    def unit(self) -> str:
        return "normalized entropy" if self.normalized else "nats"

    @property
    def what(self) -> str:
        return "normalized entropy" if self.normalized else "entropy (nats)"

    @property
    def reference(self) -> float:
        """Uniform attention over the keys each row sees, averaged like the heads are."""
        return 1.0 if self.normalized else float(A.mean_over_rows(self.row_max))

    @property
    def moved(self) -> str:
        return value_weights.TITLE_SUFFIX if self.trace.value_weighted else ""


def options(scale_col, smooth_col) -> tuple[bool, float]:
    """Raw or normalized entropy, and smoothing, in the two columns given."""
    with scale_col:
        # links written before the spelling settled say "normalised"
        scale = ui.synced(st.radio, "scale", "Entropy", "raw", options=["raw", "normalized"],
                          parse=lambda raw: "normalized" if raw == "normalised" else raw,
                          format_func=words.SCALES.get, horizontal=True, help=words.SCALE_HELP)
    with smooth_col:
        smooth = ui.synced(st.toggle, "smooth", "Clark et al. smoothing", False,
                           help=words.SMOOTH_HELP)
    return scale == "normalized", SMOOTHING if smooth else 0.0


def entropy_of(selection: ui.Selection, weights: str, scale_col, smooth_col,
               hide_col) -> Entropy:
    """The trace as shown and every head's entropy, its choices drawn in the row given."""
    trace = ui.get_trace(selection, weights=weights)
    ui.trace_notes(trace)
    if trace.value_weighted:
        st.caption(value_weights.STATISTICS_READ)
    normalized, smoothing = options(scale_col, smooth_col)
    keep = ui.hide_special_toggle(trace, hide_col)
    # the trace as shown (hidden tokens removed, rows renormalized), read like any trace
    shown = ui.shown_trace(selection, trace, keep)
    ui.hidden_note(trace, keep)
    # one pass over every head's rows gives both scales (the switch costs no second pass): a
    # job that shows its progress and can be cancelled
    scales = ui.computed(A.entropy_scales, shown, smoothing=smoothing, causal=trace.causal,
                         label=f"Computing every head's entropy over {shown.n_tokens:,} "
                               f"tokens…")
    if scales is None:
        st.info("Cancelled: change an option or reload the page to compute it again.")
        st.stop()
    return Entropy(selection, trace, shown, normalized, smoothing,
                   scales["normalized" if normalized else "entropy"],
                   A.max_row_entropy(shown.n_tokens, causal=trace.causal))


def heads_section(e: Entropy) -> None:
    """Every head's mean entropy, and its CSV."""
    st.subheader(f"Mean entropy of every head{e.moved}")
    st.caption(words.colour_scale(e.normalized, e.trace.causal, e.n, e.reference))
    fig = plots.layer_head_heatmap(e.ent, f"Mean {e.what} per head{e.moved}", e.unit,
                                   reference=e.reference, reference_name="uniform attention",
                                   fmt=".2f", zmin=0.0, zmax=e.reference)
    ui.show_figure(fig, key="entropy", alt="Mean entropy per head")
    ui.download_csv(partial(export.layer_head_csv, e.ent, "normalized_entropy" if e.normalized
                            else "entropy_nats"),
                    export.safe_filename(e.selection.file_stem, "entropy", suffix=".csv"),
                    "Entropy as CSV", key="dl_entropy")


def ranking_section(e: Entropy) -> None:
    """The broadest and the most focused heads."""
    rows = A.rank_heads(e.ent, descending=False)  # from the most focused up
    broad_col, focus_col = st.columns(2)
    with broad_col:
        st.markdown(f"**Broadest heads** (highest {e.what})")
        st.dataframe(heads_table(e, rows[::-1][:TOP]), hide_index=True, width="stretch")
    with focus_col:
        st.markdown(f"**Most focused heads** (lowest {e.what})")
        st.dataframe(heads_table(e, rows[:TOP]), hide_index=True, width="stretch")
    if not e.normalized and not e.trace.causal:
        st.caption(words.clark_broad(e.n))


def heads_table(e: Entropy, picked) -> dict:
    return {"head": [plots.head_name(l, h) for l, h in picked],
            e.what: [round(float(e.ent[l, h]), 3) for l, h in picked]}


def on_every_token(e: Entropy, statistic, doing: str):
    """statistic(trace) over every token, whatever is hidden: a job kept per input, with its
    progress; None (said so) when cancelled."""
    found = ui.computed(statistic, e.trace, label=f"{doing} over {e.trace.n_tokens:,} tokens…")
    if found is None:
        st.info("Cancelled: reload the page to compute it again.")
    return found


def distance_section(e: Entropy) -> None:
    """How far each head looks: its mean attention distance."""
    distance = on_every_token(e, A.mean_attention_distance,
                              "Measuring every head's attention distance")
    if distance is None:
        return
    uniform_distance = A.uniform_attention_distance(e.trace.n_tokens, e.trace.causal)
    st.caption(words.distance(uniform_distance))
    fig = plots.layer_head_heatmap(distance, "Mean attention distance per head", "tokens",
                                   reference=uniform_distance,
                                   reference_name="uniform attention", fmt=".1f", zmin=0.0)
    ui.show_figure(fig, key="distance", alt="Mean attention distance per head")
    ui.download_csv(partial(export.layer_head_csv, distance, "mean_attention_distance"),
                    export.safe_filename(e.selection.file_stem, "attention_distance",
                                         suffix=".csv"),
                    "Attention distance as CSV", key="dl_distance")


def per_query_section(e: Entropy) -> None:
    """One head's entropy at each query token, against uniform attention."""
    trace, labels = e.trace, list(e.shown.display_tokens)
    layer, head = ui.head_picker(trace, st.columns([2, 3])[0])
    name = plots.head_name(layer, head)
    per_row = ui.memo(A.head_row_entropy, e.shown, layer=layer, head=head,
                      normalized=e.normalized, smoothing=e.smoothing, causal=trace.causal)
    row_ref = 1.0 if e.normalized else (e.row_max if trace.causal else float(e.row_max[0]))
    fig = plots.per_query_line(per_row, labels, f"{name}: entropy of each query's attention",
                               reference=row_ref, reference_name="uniform attention",
                               y_title=e.unit)
    ui.show_figure(fig, key="per_query", alt=f"Entropy per query token for {name}")
    st.caption(words.per_query(trace.causal, e.normalized, e.n))
    ui.download_csv(partial(export.per_query_csv,
                            {e.unit: per_row, "uniform attention": np.broadcast_to(
                                np.asarray(row_ref, dtype=float), per_row.shape)},
                            labels, A.kept_positions(e.shown)),
                    export.safe_filename(e.selection.file_stem, name, "entropy", suffix=".csv"),
                    f"{name} per query as CSV", key="dl_per_query")


def mass_section(e: Entropy) -> None:
    """Where the attention goes: the mass on each class of token, by layer and per head."""
    mass = on_every_token(e, A.token_class_mass, "Measuring where every head's attention goes")
    if mass is None:
        return
    classes = list(A.TOKEN_CLASSES)
    if e.trace.causal:
        classes = [c for c in classes if c not in (A.CLS_CLASS, A.SEP_CLASS)]
        note = words.CAUSAL_SINK
    else:
        classes = [c for c in classes if c != "first token"]
        note = words.BERT_FIRST
    shown_mass = {c: mass[c] for c in classes}
    st.caption(words.class_mass(note))
    fig = plots.class_mass_by_layer(shown_mass)
    ui.show_figure(fig, key="class_mass", alt="Attention mass by token class and layer")
    cls = ui.synced(st.columns([1, 2])[0].selectbox, "cls", "Per head: mass on",
                    "previous", options=classes)
    fig = plots.layer_head_heatmap(mass[cls], f"Mass on {cls} per head",
                                   "fraction of attention", fmt=".2f", zmin=0.0, zmax=1.0)
    ui.show_figure(fig, key="class_heads", alt=f"Attention mass on {cls} per head")
    ui.download_csv(partial(export.class_mass_csv, shown_mass),
                    export.safe_filename(e.selection.file_stem, "token_class_mass",
                                         suffix=".csv"),
                    "Token-class mass as CSV", key="dl_mass")


def downloads_section(e: Entropy) -> None:
    st.divider()
    ui.download_trace(e.selection, e.trace)
    ui.caveat()


# ------------------------------------------------------------------ cross-attention


@dataclass(frozen=True)
class CrossEntropy:
    """An encoder-decoder's cross-attention: its rows run over the source's tokens."""
    selection: ui.Selection
    seq: object  # the EncoderDecoderTrace
    normalized: bool
    smoothing: float

    @property
    def unit(self) -> str:
        return "normalized entropy" if self.normalized else "nats"

    @property
    def n_source(self) -> int:
        return len(self.seq.source_ids)

    @property
    def reference(self) -> float:
        return 1.0 if self.normalized else A.uniform_entropy(self.n_source)


def cross_entropy_of(selection: ui.Selection, scale_col, smooth_col) -> CrossEntropy:
    seq = ui.get_seq2seq_trace(selection)
    return CrossEntropy(selection, seq, *options(scale_col, smooth_col))


def cross_heads_section(c: CrossEntropy) -> None:
    """How many source tokens each cross-attention head reads, per head."""
    ent = ui.memo(A.entropy, c.seq.source(c.selection.kind), normalized=c.normalized,
                  smoothing=c.smoothing)
    st.caption(words.cross_source(c.n_source, A.uniform_entropy(c.n_source)))
    st.subheader("Mean entropy over the source, every cross-attention head")
    fig = plots.layer_head_heatmap(ent, f"Mean {c.unit} of cross-attention per head", c.unit,
                                   reference=c.reference, reference_name="uniform attention",
                                   fmt=".2f", zmin=0.0, zmax=c.reference)
    ui.show_figure(fig, key="entropy", alt="Mean cross-attention entropy per head")
    ui.download_csv(partial(export.layer_head_csv, ent, "cross_attention_" + (
        "normalized_entropy" if c.normalized else "entropy_nats")),
                    export.safe_filename(c.selection.file_stem, "cross", "entropy",
                                         suffix=".csv"), "Entropy as CSV", key="dl_entropy")


def cross_per_target_section(c: CrossEntropy) -> None:
    """One cross-attention head's entropy at each target token."""
    st.subheader("Entropy of each target token in one head")
    layer, head = ui.head_picker(c.seq.as_trace(c.selection.map_set.stack),
                                 st.columns([2, 3])[0])
    name = plots.head_name(layer, head)
    rows = ui.memo(A.row_entropy, c.seq.source(c.selection.kind), normalized=c.normalized,
                   smoothing=c.smoothing)[layer, head]
    fig = plots.per_query_line(rows, list(c.seq.label_tokens),
                               f"{name}: entropy of each target token's cross-attention",
                               reference=c.reference, reference_name="uniform attention",
                               y_title=c.unit)
    ui.show_figure(fig, key="per_query", alt=f"Cross-attention entropy per token for {name}")
    st.caption(words.CROSS_PER_TOKEN)
    ui.caveat()


SECTIONS = [heads_section, ranking_section,
            ui.Folded("How far each head looks: mean attention distance", "distance",
                      distance_section),
            ui.Folded("Entropy of each query token in one head", "query_entropy",
                      per_query_section),
            ui.Folded("Where the attention goes: mass on kinds of tokens", "class_mass",
                      mass_section),
            downloads_section]
CROSS_SECTIONS = [cross_heads_section, cross_per_target_section]


def show() -> None:
    selection = ui.sidebar(reads=MAPS)
    with ui.guard():
        # one row of choices; the statistics read the weights or what the heads move (issue
        # 49): one argument
        weights_col, scale_col, smooth_col, hide_col = st.columns(4)
        weights = ui.weights_switch(selection.model, weights_col)
        if selection.map_set.square:
            ui.show_sections(entropy_of(selection, weights, scale_col, smooth_col, hide_col),
                             SECTIONS)
        else:  # cross-attention: target rows over the source's columns
            ui.show_sections(cross_entropy_of(selection, scale_col, smooth_col),
                             CROSS_SECTIONS)
