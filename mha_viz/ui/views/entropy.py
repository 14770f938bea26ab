"""The Entropy page's view: how broad or focused each head is (mean entropy per head, the
broadest and most focused heads), and, each drawn when opened, how far each head looks, one
head's entropy per query token and where the attention goes (token classes); for an
encoder-decoder's cross-attention, the entropy over the source."""

from __future__ import annotations

from functools import partial

import numpy as np
import streamlit as st

from ... import analysis as A
from ... import plots, ui
from ..words import value_weights
from ...server import export

TOP = 5  # broadest / most focused heads listed
SMOOTHING = 1e-4  # Clark et al. 2019: A' = 0.9999 A + 0.0001 / n
INTRO = ("How spread out each head's attention is. A head whose tokens each read from one "
         "place is *focused*: its entropy is 0. One that spreads each token's attention evenly "
         "over n tokens is *broad*: its entropy is ln n, the most there can be. A token's "
         "entropy is H = −Σ a·ln a over the weights a of its row, in nats; a head's is the mean "
         "over its tokens.")


def cross_attention_entropy(selection, seq, normalized: bool, smoothing: float) -> None:
    """An encoder-decoder's cross-attention: how many source tokens each target position
    reads, per head and per target token."""
    source = seq.source("cross")
    n_source = len(seq.source_ids)
    ent = ui.memo(A.entropy, source, normalized=normalized, smoothing=smoothing)
    unit = "normalized entropy" if normalized else "nats"
    reference = 1.0 if normalized else A.uniform_entropy(n_source)
    st.caption(f"Cross-attention rows run over the {n_source} source tokens: uniform "
               f"attention over the source is ln {n_source} = "
               f"{A.uniform_entropy(n_source):.2f} nats. "
               f"A focused head reads one source token per target token, as a word "
               f"alignment does; a broad one reads the whole source.")
    st.subheader("Mean entropy over the source, every cross-attention head")
    fig = plots.layer_head_heatmap(ent, f"Mean {unit} of cross-attention per head", unit,
                                   reference=reference, reference_name="uniform attention",
                                   fmt=".2f", zmin=0.0, zmax=reference)
    ui.show_figure(fig, key="entropy", alt="Mean cross-attention entropy per head")
    ui.download_csv(partial(export.layer_head_csv, ent, "cross_attention_" + (
        "normalized_entropy" if normalized else "entropy_nats")),
                    export.safe_filename(selection.file_stem, "cross", "entropy",
                                         suffix=".csv"), "Entropy as CSV", key="dl_entropy")
    st.subheader("Entropy of each target token in one head")
    layer, head = ui.head_picker(seq.as_trace("decoder"), st.columns([2, 3])[0])
    name = plots.head_name(layer, head)
    rows = ui.memo(A.row_entropy, source, normalized=normalized,
                   smoothing=smoothing)[layer, head]
    labels = list(seq.label_tokens)
    fig = plots.per_query_line(rows, labels, f"{name}: entropy of each target token's "
                               f"cross-attention", reference=reference,
                               reference_name="uniform attention", y_title=unit)
    ui.show_figure(fig, key="per_query", alt=f"Cross-attention entropy per token for {name}")
    st.caption("Each point is the target token the position writes; the dashed line is "
               "uniform attention over the source.")
    ui.caveat()


def entropy_options(scale_col, smooth_col) -> tuple[bool, float]:
    """Raw or normalized entropy, and smoothing, in the two columns given."""
    with scale_col:
        # links written before the spelling settled say "normalised"
        scale = ui.synced(st.radio, "scale", "Entropy", "raw", options=["raw", "normalized"],
                          parse=lambda raw: "normalized" if raw == "normalised" else raw,
                          format_func={"raw": "raw (nats)",
                                       "normalized": "normalized (÷ maximum)"}.get,
                          horizontal=True,
                          help="Normalized divides each row by the largest entropy it could "
                               "have, ln(number of keys it sees): ln(i+1) for a causal model's "
                               "row i, ln n for BERT. 1 = uniform, 0 = one token. Rows that see a "
                               "single key are left out.")
    with smooth_col:
        smooth = ui.synced(st.toggle, "smooth", "Clark et al. smoothing", False,
                           help="Mix a little uniform attention in before the log, "
                                "A' = 0.9999 A + 0.0001/n, as Clark et al. (2019) do.")
    return scale == "normalized", SMOOTHING if smooth else 0.0


def show() -> None:
    selection = ui.sidebar()
    with ui.guard():
        # one row of choices; the statistics read the weights or what the heads move (issue
        # 49): one argument
        weights_col, scale_col, smooth_col, hide_col = st.columns(4)
        weights = ui.weights_switch(selection.model, weights_col)
        trace = ui.get_trace(selection, cross_view=lambda seq: cross_attention_entropy(
            selection, seq, *entropy_options(scale_col, smooth_col)), weights=weights)
        ui.trace_notes(trace)
        moved = value_weights.TITLE_SUFFIX if trace.value_weighted else ""
        if trace.value_weighted:
            st.caption(value_weights.STATISTICS_READ)

        normalized, smoothing = entropy_options(scale_col, smooth_col)
        keep = ui.hide_special_toggle(trace, hide_col)
        # the trace as shown (hidden tokens removed, rows renormalized), read like any trace
        shown = ui.shown_trace(selection, trace, keep)
        kept, labels = A.kept_positions(shown), list(shown.display_tokens)
        ui.hidden_note(trace, keep)
        n = shown.n_tokens
        stem = selection.file_stem

        # one pass over every head's rows gives both scales (the switch costs no second pass): a
        # job that shows its progress and can be cancelled
        scales = ui.computed(A.entropy_scales, shown,
                             smoothing=smoothing, causal=trace.causal,
                             label=f"Computing every head's entropy over {n:,} tokens…")
        if scales is None:
            st.info("Cancelled: change an option or reload the page to compute it again.")
            st.stop()
        ent = scales["normalized" if normalized else "entropy"]
        row_max = A.max_row_entropy(n, causal=trace.causal)  # ln(keys row i sees)
        if normalized:
            reference, reference_name, unit = 1.0, "uniform attention", "normalized entropy"
        else:
            # uniform attention over the keys each row sees, averaged like the heads are
            reference, reference_name, unit = (float(A.mean_over_rows(row_max)),
                                               "uniform attention", "nats")

        # ---------------------------------------------------------------- layer x head
        st.subheader(f"Mean entropy of every head{moved}")
        what = "normalized entropy" if normalized else "entropy (nats)"
        uniform_text = ("1.0" if normalized else
                        (f"ln {n} = {reference:.2f} nats" if not trace.causal else
                         f"{reference:.2f} nats, the mean of ln(i+1) over the rows"))
        st.caption(f"Dark = focused heads, bright = broad heads; the colour scale ends at "
                   f"uniform attention, {uniform_text}. Point at or tap a cell for its value.")
        fig = plots.layer_head_heatmap(ent, f"Mean {what} per head{moved}", unit,
                                       reference=reference,
                                       reference_name=reference_name, fmt=".2f", zmin=0.0,
                                       zmax=reference)
        ui.show_figure(fig, key="entropy", alt="Mean entropy per head")
        ui.download_csv(partial(export.layer_head_csv, ent, "normalized_entropy" if normalized
                                else "entropy_nats"),
                        export.safe_filename(stem, "entropy", suffix=".csv"), "Entropy as CSV",
                        key="dl_entropy")

        # ---------------------------------------------------------------- broad / focused
        rows = A.rank_heads(ent, descending=False)  # from the most focused up

        def table(picked):
            return {"head": [plots.head_name(l, h) for l, h in picked],
                    what: [round(float(ent[l, h]), 3) for l, h in picked]}

        broad_col, focus_col = st.columns(2)
        with broad_col:
            st.markdown(f"**Broadest heads** (highest {what})")
            st.dataframe(table(rows[::-1][:TOP]), hide_index=True, width="stretch")
        with focus_col:
            st.markdown(f"**Most focused heads** (lowest {what})")
            st.dataframe(table(rows[:TOP]), hide_index=True, width="stretch")
        if not normalized and not trace.causal:
            st.caption("Clark et al. (2019) call a BERT-base head *broad* when its entropy is above "
                       "3.8 nats on inputs of about 128 tokens; raw entropy grows with the length "
                       f"(this input has {n} tokens), so compare lengths with the normalized view.")

        # ------------------------------------------- the rest, each drawn when opened
        def on_every_token(statistic, doing: str):
            """statistic(trace) over every token, whatever is hidden: a job kept per input, with
            its progress; None (said so) when cancelled."""
            found = ui.computed(statistic, trace,
                                label=f"{doing} over {trace.n_tokens:,} tokens…")
            if found is None:
                st.info("Cancelled: reload the page to compute it again.")
            return found

        def distance_section() -> None:
            distance = on_every_token(A.mean_attention_distance,
                                      "Measuring every head's attention distance")
            if distance is None:
                return
            uniform_distance = A.uniform_attention_distance(trace.n_tokens, trace.causal)
            st.caption(f"For each query, the distance in tokens to what it reads, weighted by the "
                       f"attention: Σ_j a_ij·|i − j|; a head's value is the mean over its queries "
                       f"(as Dosovitskiy et al. 2021 measure ViT's heads). Near 1: a previous-token "
                       f"head; near 0: a head that reads the token itself; spreading evenly would "
                       f"give {uniform_distance:.1f}. Every token counts here, whatever is hidden "
                       f"above.")
            fig = plots.layer_head_heatmap(distance, "Mean attention distance per head", "tokens",
                                           reference=uniform_distance,
                                           reference_name="uniform attention", fmt=".1f", zmin=0.0)
            ui.show_figure(fig, key="distance", alt="Mean attention distance per head")
            ui.download_csv(partial(export.layer_head_csv, distance, "mean_attention_distance"),
                            export.safe_filename(stem, "attention_distance", suffix=".csv"),
                            "Attention distance as CSV", key="dl_distance")

        def per_query_section() -> None:
            layer, head = ui.head_picker(trace, st.columns([2, 3])[0])
            name = plots.head_name(layer, head)
            per_row = ui.memo(A.head_row_entropy, shown, layer=layer,
                              head=head, normalized=normalized, smoothing=smoothing,
                              causal=trace.causal)
            row_ref = 1.0 if normalized else (row_max if trace.causal else float(row_max[0]))
            fig = plots.per_query_line(per_row, labels,
                                       f"{name}: entropy of each query's attention",
                                       reference=row_ref, reference_name="uniform attention",
                                       y_title=unit)
            ui.show_figure(fig, key="per_query", alt=f"Entropy per query token for {name}")
            st.caption("Low values: the token reads mostly from one place. The dashed line is the "
                       "entropy of uniform attention over the tokens that query can see"
                       + (" (it grows along the text, as a causal model's row i sees i+1 tokens)."
                          if trace.causal and not normalized else ".")
                       + (f" With {n} tokens only every {-(-n // 60)}th token is labelled; point "
                          f"at or tap the chart to see each one." if n > 60 else ""))
            ui.download_csv(partial(export.per_query_csv,
                                    {unit: per_row, "uniform attention": np.broadcast_to(
                                        np.asarray(row_ref, dtype=float), per_row.shape)},
                                    labels, kept),
                            export.safe_filename(stem, name, "entropy", suffix=".csv"),
                            f"{name} per query as CSV", key="dl_per_query")

        def mass_section() -> None:
            mass = on_every_token(A.token_class_mass, "Measuring where every head's attention goes")
            if mass is None:
                return
            classes = list(A.TOKEN_CLASSES)
            if trace.causal:
                classes = [c for c in classes if c not in (A.CLS_CLASS, A.SEP_CLASS)]
                note = ("Causal models have no [CLS] or [SEP]; their first token often acts as an "
                        "*attention sink* that idle heads attend to.")
            else:
                classes = [c for c in classes if c != "first token"]
                note = "For BERT the first token is [CLS], so it has no line of its own."
            shown_mass = {c: mass[c] for c in classes}
            st.caption("The fraction of each head's attention (averaged over query tokens) that "
                       "lands on [CLS], [SEP], punctuation, the first token, the token itself, the "
                       "previous token and the next token. Always computed on every token, whatever "
                       "is hidden above. Clark et al. (2019) found BERT's middle layers pile "
                       "attention on [SEP]. " + note)
            fig = plots.class_mass_by_layer(shown_mass)
            ui.show_figure(fig, key="class_mass", alt="Attention mass by token class and layer")
            cls = ui.synced(st.columns([1, 2])[0].selectbox, "cls", "Per head: mass on",
                            "previous", options=classes)
            fig = plots.layer_head_heatmap(mass[cls], f"Mass on {cls} per head",
                                           "fraction of attention", fmt=".2f", zmin=0.0,
                                           zmax=1.0)
            ui.show_figure(fig, key="class_heads", alt=f"Attention mass on {cls} per head")
            ui.download_csv(partial(export.class_mass_csv, shown_mass),
                            export.safe_filename(stem, "token_class_mass", suffix=".csv"),
                            "Token-class mass as CSV", key="dl_mass")

        ui.drawn_when_opened("How far each head looks: mean attention distance", "distance",
                             distance_section)
        ui.drawn_when_opened("Entropy of each query token in one head", "query_entropy",
                             per_query_section)
        ui.drawn_when_opened("Where the attention goes: mass on kinds of tokens",
                             "class_mass", mass_section)

        st.divider()
        ui.download_trace(selection, trace)
        ui.caveat()
