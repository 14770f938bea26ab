"""The Head roles page's view: which heads read the previous token, earlier copies of the
current token or what followed them (induction), which rest on a sink, which spread out; every
head's strongest role in a table, each role's map, and one head on the text and on the
repeated-random-tokens probe."""

from __future__ import annotations

from functools import partial

import numpy as np
import streamlit as st

from ... import InputError
from ... import analysis as A
from ... import plots, ui
from ...maps.downsample import block_factor
from ...server import export
from .. import picks
from ..words import value_weights

TOP = 15  # heads listed unless every head is asked for
HEAD_MAP_HEIGHT = 560  # a square map in half the page width, without empty bands
HEAD_MAP_MAX = 256  # past this many tokens the head on the text shows as block means
SEQ_LEN, N_SEQS, SEED = 50, 5, 0  # the probe's defaults: ~2 s for SmolLM2 on one CPU thread
SEQ_LEN_MAX, N_SEQS_MAX, SEED_MAX = 200, 20, 1_000_000
NORMS = {"ours": "Ours: ÷ the rows that have the key",
         "transformer_lens": "TransformerLens: ÷ all T rows"}
INTRO = ("Some heads do one recognisable job: read the **previous token**, read an **earlier "
         "copy** of the current token (duplicate token), read the token that **followed** that "
         "earlier copy (induction, Olsson et al. 2022), or park their attention on a **sink** "
         "(the first token, [CLS], [SEP]). Each map scores every head for one role; the table "
         "names each head's strongest role and the input that showed it.")


def show() -> None:
    selection = ui.sidebar(shows_saved_traces=False, encoder_decoders=True)
    with ui.guard():
        # one row of choices; every score reads the weights or what the heads move (issue
        # 49): one argument
        weights_col, hide_col, norm_col = st.columns(3)
        weights = ui.weights_switch(selection.model, weights_col)
        trace = ui.get_trace(selection, weights=weights)
        model = selection.model
        ui.trace_notes(trace)
        moved = value_weights.TITLE_SUFFIX if trace.value_weighted else ""
        if trace.value_weighted:
            st.caption(value_weights.STATISTICS_READ + " The probe reads them too.")
        causal = trace.causal
        first, separator = A.SINK_ROLES  # the role scores' names of the two sinks
        # a bidirectional model's first token is its own special token ([CLS], <s>): named as the
        # model writes it; a causal model's is whatever the text begins with
        first_name = trace.display_tokens[0] if not causal and trace.special_mask[0] else first
        stem = selection.file_stem

        keep = ui.hide_special_toggle(trace, hide_col)
        norm = ui.synced(norm_col.selectbox, "norm", "Normalization", "ours",
                         options=list(A.NORMALIZATIONS), format_func=NORMS.get,
                         help="Ours averages over the query rows that have the key in question "
                              "(T − 1 rows for previous token; the rows whose token occurred "
                              "before, for duplicate token and induction). TransformerLens's "
                              "head_detector divides the same summed mass by all T rows, so its "
                              "previous-token score is ours × (T − 1)/T. The sink and entropy "
                              "maps are the same under both.")
        ui.hidden_note(trace, keep)
        if keep is not None:
            st.caption("Renormalizing cuts both ways: a head that put 99% of its weight on a token "
                       "left out is judged by the 1% that remains, scaled up to 100%. Compare "
                       "with the sink map, which is always measured on every token.")
        exclude = None if keep is None else ~keep
        # one pass over every head's rows (hidden tokens removed from each block as it is read):
        # a job that shows its progress and can be cancelled
        scores = ui.computed(A.role_scores, trace,
                             label=f"Scoring every head's role over {trace.n_tokens:,} tokens…",
                             exclude=exclude, normalization=norm)
        if scores is None:
            st.info("Cancelled: change an option or reload the page to compute it again.")
            st.stop()
        support = ui.memo(A.role_support, trace, exclude=exclude)
        hidden = list(dict.fromkeys(trace.display_tokens[i] for i in np.flatnonzero(~keep))) \
            if keep is not None else []
        text_probe = "the text" + (f" without {', '.join(hidden[:4])}" if hidden else "")

        # ---------------------------------------------------------------- the probe
        # an encoder-decoder: the probe runs through the stack the sidebar picked
        try:
            probed = model if selection.kind is None else model.stack(selection.kind)
        except InputError as error:  # an encoder that reads an image takes no token probe
            st.info(f"No induction probe here: {error}.")
            st.stop()
        largest = min(SEQ_LEN_MAX, A.longest_probe(probed))  # R R and the probe's frame fit
        if largest < 2:
            st.info(f"The model's context ({probed.info.max_positions} tokens) is too short for "
                    f"the repeated-random-tokens probe.")
            st.stop()
        len_col, n_col, seed_col = st.columns(3)
        with len_col:
            seq_len = int(ui.synced(
                st.number_input, "probe_len", "Probe: length of R (seq_len)",
                min(SEQ_LEN, largest), min_value=2, max_value=largest, step=10,
                valid=lambda v: 2 <= int(v) <= largest,
                help=f"R is this many distinct random tokens; the input is R twice "
                     f"(2 to {largest} here)."))
        with n_col:
            n_seqs = int(ui.synced(
                st.number_input, "probe_n", "Probe: sequences", N_SEQS, min_value=1,
                max_value=N_SEQS_MAX, step=1, valid=lambda v: 1 <= int(v) <= N_SEQS_MAX,
                help="The scores are the mean over this many random sequences."))
        with seed_col:
            seed = int(ui.synced(
                st.number_input, "probe_seed", "Probe: seed", SEED, min_value=0,
                max_value=SEED_MAX, step=1, valid=lambda v: 0 <= int(v) <= SEED_MAX,
                help="numpy default_rng(seed) draws the sequences: the same seed, the same "
                     "probe."))
        probe = ui.computed(A.induction_probe, probed, seq_len=seq_len, n_seqs=n_seqs, seed=seed,
                            weights="value" if trace.value_weighted else "attention",
                            label="Running the induction probe", large=True)
        frame = probe.frame
        drop_probe = keep is not None
        probe_name = probe.description + (", without " + ", ".join(probe.frame_tokens)
                                          if drop_probe else "")
        st.caption(f"**Induction probe: {ui.md_escape(probe.description)}.** Each input is "
                   f"{ui.md_escape(frame)}: R is {seq_len} distinct random tokens (no special "
                   f"ones), {len(probe.ids[0])} tokens in all. An induction head reading the second R "
                   f"attends from each token to the token that followed its first occurrence. "
                   f"Uniform attention would score "
                   f"{probe.uniform_score(norm, drop_special=keep is not None):.3f} here."
                   + (" The prefix/suffix tokens are left out like the text's (rows renormalized)."
                      if drop_probe else ""))

        all_scores = dict(scores)
        all_scores["induction (probe)"] = probe.scores(norm, drop_special=drop_probe)
        if causal:  # 0 by construction: nothing after the query, no separator
            all_scores.pop("next token")
            all_scores.pop(separator)
        n_dup = support["duplicate token"]
        repeats = f"{n_dup} of {support['rows']} queries repeat an earlier token"
        probes = {key: text_probe for key in all_scores}
        probes["induction (probe)"] = probe_name
        for key in A.SINK_ROLES:  # a sink is measured on every token, whatever is left out
            if key in probes:
                probes[key] = "the text, every token" if keep is not None else "the text"
        probes["duplicate token"] = probes["induction (text)"] = f"{text_probe} ({repeats})"

        # ---------------------------------------------------------------- the table
        st.subheader(f"Each head's strongest role{moved}")
        roles = A.strongest_roles(all_scores, probes, first_token_name=first_name)
        st.caption(
            f"The rule: among previous token{'' if causal else ', next token'}, duplicate token "
            f"and induction (probe or text), the highest score ≥ {A.ROLE_THRESHOLD} names the "
            f"role; else the larger sink mass ≥ {A.ROLE_THRESHOLD} "
            f"({first_name}{'' if causal else ', ' + separator}); else the normalized entropy e says "
            f"*broad* (e ≥ {A.BROAD_THRESHOLD}), *focused* (e ≤ {A.FOCUSED_THRESHOLD}, score "
            f"1 − e) or *mixed*. Pattern roles come first because a head that does its job where it "
            f"can often rests on the sink elsewhere. Sorted by that order, then by score; click a "
            f"column to sort, a row to show that head below."
            + (" The thresholds are meant for our normalization: TransformerLens's is smaller."
               if norm == "transformer_lens" else ""))
        if n_dup == 0:
            st.caption("This text repeats no token, so the duplicate-token and text-induction "
                       "scores are 0; try the *Repeated text (induction)* example in the sidebar.")
        sharing = ui.kv_sharing_note(trace)
        if sharing:
            st.caption(f"{sharing} Heads that share keys and values can still have different "
                       f"roles: each has its own queries.")
        show_all = ui.synced(st.toggle, "all_roles", f"List every head ({len(roles)})", False)
        shown = roles if show_all else roles[:TOP]
        table = {"head": [r.name for r in shown], "role": [r.role for r in shown],
                 "score": [round(r.score, 3) for r in shown], "probe": [r.probe for r in shown],
                 "also above threshold": [r.also for r in shown]}
        if sharing:
            table["shares K/V with"] = [
                ", ".join(f"H{h}" for h in trace.heads_sharing_kv(r.head) if h != r.head)
                for r in shown]
        st.dataframe(table, hide_index=True, width="stretch",
                     column_config={"score": st.column_config.NumberColumn(format="%.3f")},
                     height=600 if show_all else "content", key="roles_table",
                     on_select=ui.callback(lambda: picks.head_from_table("roles_table", shown,
                                                                         "role_head")),
                     selection_mode="single-row")
        full = {"head": [r.name for r in roles], "layer": [r.layer for r in roles],
                "head index": [r.head for r in roles], "role": [r.role for r in roles],
                "score": [r.score for r in roles], "probe": [r.probe for r in roles],
                "also above threshold": [r.also for r in roles]}
        dl_roles, dl_maps = st.columns(2)
        ui.download_csv(partial(export.table_csv, full),
                        export.safe_filename(stem, "head_roles", suffix=".csv"),
                        "Every head's role as CSV", key="dl_roles", where=dl_roles)
        ui.download_csv(partial(export.layer_head_csv, all_scores),
                        export.safe_filename(stem, "role_scores", norm, suffix=".csv"),
                        "Every role score as CSV", key="dl_role_scores", where=dl_maps)

        # ---------------------------------------------------------------- the maps
        rows = support["rows"]
        if norm == "ours":
            diag = f"mean over the {rows - 1} rows that have one"
            dup_norm = (f"mean over the {n_dup} queries that repeat a token" if n_dup else
                        "no query repeats a token, so 0 everywhere")
            probe_norm = f"mean over the second R's first {seq_len - 1} queries"
        else:
            diag = f"summed mass ÷ all {rows} rows (= ours × {rows - 1}/{rows})"
            dup_norm = f"summed mass ÷ all {rows} rows (= ours × {n_dup}/{rows})"
            probe_rows = int(probe.keep_mask(drop_probe).sum())
            probe_norm = f"summed over the second R ÷ all {probe_rows} rows"
        norm_name = "ours" if norm == "ours" else "TransformerLens"
        sink_name = "the first token" if first_name == first else first_name
        maps = [
            ("previous token", "Previous token", f"A[i, i−1], {diag}"),
            ("next token", "Next token", f"A[i, i+1], {diag}"),
            ("duplicate token", "Duplicate token",
             f"Mass on earlier copies of the query's token, {dup_norm}"),
            ("induction (probe)", "Induction on the probe",
             f"Repeated random tokens: mass on the token after the earlier copy, {probe_norm}"),
            ("induction (text)", "Induction on the text",
             f"Shifted duplicate: mass on the tokens after earlier copies of the query's token, "
             f"{dup_norm}"),
            (first, f"Sink: {first_name}",
             f"Mass on {sink_name}: mean over all {trace.n_tokens} rows, on every token"),
            (separator, f"Sink: {separator}",
             f"Mass on {separator}: mean over all {trace.n_tokens} rows, on every token"),
            ("entropy", "Broad vs focused",
             f"Normalized entropy: 0 = one key, 1 = uniform; broad ≥ {A.BROAD_THRESHOLD}, "
             f"focused ≤ {A.FOCUSED_THRESHOLD}"),
        ]
        maps = [m for m in maps if m[0] in all_scores]

        def role_maps() -> None:
            st.caption("Layers down, heads across; point at or tap a cell for its value. Every "
                       "score runs from 0 to 1. Under each map: what it measures, the input that "
                       "gave it (the probe) and the normalization.")
            per_row = 2 if trace.n_head > 9 else 3
            for start in range(0, len(maps), per_row):
                columns = ui.figure_columns(per_row)
                for column, (key, title, how) in zip(columns, maps[start:start + per_row]):
                    with column:
                        unit = "mass" if key in A.SINK_ROLES else (
                            "entropy" if key == "entropy" else "score")
                        fig = plots.layer_head_heatmap(all_scores[key], title + moved, unit,
                                                       fmt=".2f",
                                                       zmin=0.0, zmax=1.0)
                        plots.columns_at_bottom(fig)
                        ui.show_figure(fig, key=f"map_{key}", alt=f"{title} per head",
                                       share=ui.column_share(1 / per_row))
                        normalized = "" if key in (*A.SINK_ROLES, "entropy") else \
                            f" **Normalization:** {norm_name}."
                        st.caption(f"{ui.md_escape(how)}. **Probe:** {ui.md_escape(probes[key])}."
                                   + normalized)

        ui.drawn_when_opened("Every head, role by role", "role_maps", role_maps)

        # ---------------------------------------------------------------- one head
        if ui.get_value("layer") is None and ui.get_value("head") is None \
                and "layer" not in st.query_params and "head" not in st.query_params:
            ui.set_value("layer", roles[0].layer)  # first visit: the head with the clearest role
            ui.set_value("head", roles[0].head)

        def one_head() -> None:
            layer, head = ui.head_picker(trace, st.columns([2, 3])[0])
            name = plots.head_name(layer, head)
            mine = next(r for r in roles if r.layer == layer and r.head == head)
            short = {first: f"sink: {first_name}", separator: f"sink: {separator}",
                     "entropy": "normalized entropy"}
            st.markdown(f"**{name}: {ui.md_escape(mine.role)}** ({mine.score:.2f}, "
                        f"{ui.md_escape(mine.probe)}). Every score of this head:")
            st.dataframe({short.get(key, key): [round(float(all_scores[key][layer, head]), 3)]
                          for key, _, _ in maps}, hide_index=True, width="stretch")
            sharing = ui.kv_sharing_note(trace, head)
            if sharing:
                st.caption(sharing)
            # the head on the text as shown; past 256 tokens, its block means (an overview)
            shown = ui.shown_trace(selection, trace, keep)
            labels = list(shown.display_tokens)
            factor = block_factor(shown.n_tokens, HEAD_MAP_MAX)
            if factor > 1:
                text_map = ui.memo(shown.block_mean, layer=layer, head=head, factor=factor)
            else:
                factor, text_map = None, shown.head_map(layer, head)
            probe_keep = probe.keep_mask(drop_probe)
            probe_map = probe.trace.head_map(layer, head)
            probe_labels = list(probe.trace.display_tokens)
            if drop_probe:
                probe_map, probe_kept = A.drop_positions(probe_map, probe_keep)
                probe_labels = [probe_labels[i] for i in probe_kept]
            text_col, probe_col = ui.figure_columns(2)
            with text_col:
                fig = plots.head_heatmap(text_map, labels, title=f"{name} on the text{moved}",
                                         causal=causal, max_ticks=30, block_factor=factor,
                                         height=None if len(labels) <= 24 else HEAD_MAP_HEIGHT)
                ui.show_figure(fig, key="head_text", alt=f"{name} on the text",
                               share=ui.column_share(0.5))
            with probe_col:
                fig = plots.head_heatmap(probe_map, probe_labels,
                                         title=f"{name} on the probe (sequence 1 of "
                                               f"{n_seqs}){moved}",
                                         causal=causal, max_ticks=14, height=HEAD_MAP_HEIGHT)
                ui.show_figure(fig, key="head_probe", alt=f"{name} on the probe",
                               share=ui.column_share(0.5))
                st.caption(f"The probe's first sequence ({ui.md_escape(probe_name)}). An induction "
                           f"head draws a stripe {seq_len - 1} cells left of the diagonal in the "
                           f"second half: each token reads the token after its first copy.")

        ui.drawn_when_opened("One head on the text and on the probe", "role_head",
                             one_head)
        ui.caveat()
