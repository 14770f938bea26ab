"""The Head roles page's view: which heads read the previous token, earlier copies of the
current token or what followed them (induction), which rest on a sink, which spread out; every
head's strongest role in a table, each role's map, and one head on the text and on the
repeated-random-tokens probe.

``show()`` builds the page's context once (``Roles``: the trace, what is hidden, the
normalization, every role score on the text and on the probe, each head's strongest role)
and walks SECTIONS, each a function of it. A new section is one function and one line."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import streamlit as st

from ... import InputError
from ... import analysis as A
from ... import plots, ui
from ...maps.downsample import block_factor
from ...server import export
from .. import picks
from ..words import head_roles as words
from ..words import value_weights

MAPS = ("self", "encoder", "decoder")  # the sets of maps the page reads (maps.sets)
TOP = 15  # heads listed unless every head is asked for
HEAD_MAP_HEIGHT = 560  # a square map in half the page width, without empty bands
HEAD_MAP_MAX = 256  # past this many tokens the head on the text shows as block means
SEQ_LEN, N_SEQS, SEED = 50, 5, 0  # the probe's defaults: ~2 s for SmolLM2 on one CPU thread
SEQ_LEN_MAX, N_SEQS_MAX, SEED_MAX = 200, 20, 1_000_000
INTRO = words.INTRO


@dataclass(frozen=True)
class Probe:
    """The repeated-random-tokens probe as the page ran it."""
    result: object  # analysis.InductionProbe
    seq_len: int
    n_seqs: int
    name: str  # its description, and what is left out of it


@dataclass(frozen=True)
class Roles:
    """What every section reads: the trace, the tokens hidden (keep), the normalization,
    every role score (on the text and the probe), what each was read on, each head's
    strongest role and the maps drawn."""
    selection: ui.Selection
    trace: object
    keep: np.ndarray | None
    norm: str
    probe: Probe
    scores: dict  # role -> [L, H]
    probes: dict  # role -> the input its score was read on
    roles: list  # analysis.HeadRole, strongest first
    role_maps: list  # (role, title, what it measures) of the roles drawn
    first_name: str  # the first token as the sink roles name it
    n_repeats: int  # queries whose token occurred before

    @property
    def moved(self) -> str:
        return value_weights.TITLE_SUFFIX if self.trace.value_weighted else ""

    @property
    def drop_probe(self) -> bool:
        return self.keep is not None


def roles_of(selection: ui.Selection) -> Roles:
    """The page's choices, every role score and the probe, drawn above the sections."""
    # one row of choices; every score reads the weights or what the heads move: one argument
    weights_col, hide_col, norm_col = st.columns(3)
    weights = ui.weights_switch(selection.model, weights_col)
    trace = ui.get_trace(selection, weights=weights)
    ui.trace_notes(trace)
    if trace.value_weighted:
        st.caption(value_weights.STATISTICS_READ + " The probe reads them too.")
    keep = ui.hide_special_toggle(trace, hide_col)
    norm = ui.synced(norm_col.selectbox, "norm", "Normalization", "ours",
                     options=list(A.NORMALIZATIONS), format_func=words.NORMS.get,
                     help=words.NORM_HELP)
    ui.hidden_note(trace, keep)
    if keep is not None:
        st.caption(words.RENORMALIZED)
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
    probe = probe_of(selection, trace, keep, norm)
    return assembled(selection, trace, keep, norm, scores, support, probe)


def assembled(selection, trace, keep, norm, scores, support, probe: Probe) -> Roles:
    """Every score in one table, what each was read on, and each head's strongest role."""
    first, separator = A.SINK_ROLES  # the role scores' names of the two sinks
    # a bidirectional model's first token is its own special token ([CLS], <s>): named as the
    # model writes it; a causal model's is whatever the text begins with
    first_name = (trace.display_tokens[0] if not trace.causal and trace.special_mask[0]
                  else first)
    all_scores = dict(scores)
    all_scores["induction (probe)"] = probe.result.scores(norm, drop_special=keep is not None)
    if trace.causal:  # 0 by construction: nothing after the query, no separator
        all_scores.pop("next token")
        all_scores.pop(separator)
    hidden = list(dict.fromkeys(trace.display_tokens[i] for i in np.flatnonzero(~keep))) \
        if keep is not None else []
    n_dup = support["duplicate token"]
    probes = words.probes(all_scores, hidden, probe.name,
                          f"{n_dup} of {support['rows']} queries repeat an earlier token",
                          keep is not None)
    maps = words.role_maps(norm, support["rows"], n_dup, probe.seq_len,
                           int(probe.result.keep_mask(keep is not None).sum()), first_name,
                           trace.n_tokens)
    roles = A.strongest_roles(all_scores, probes, first_token_name=first_name)
    return Roles(selection, trace, keep, norm, probe, all_scores, probes, roles,
                 [m for m in maps if m[0] in all_scores], first_name, n_dup)


def probe_of(selection: ui.Selection, trace, keep, norm: str) -> Probe:
    """The repeated-random-tokens probe (its length, count and seed chosen here), through the
    model, or an encoder-decoder's stack the sidebar picked."""
    model = selection.model
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
    seq_len, n_seqs, seed = probe_choices(largest)
    probe = ui.computed(A.induction_probe, probed, seq_len=seq_len, n_seqs=n_seqs, seed=seed,
                        weights="value" if trace.value_weighted else "attention",
                        label="Running the induction probe", large=True)
    name = probe.description + (", without " + ", ".join(probe.frame_tokens)
                                if keep is not None else "")
    st.caption(words.probe_caption(ui.md_escape(probe.description), ui.md_escape(probe.frame),
                                   seq_len, len(probe.ids[0]),
                                   probe.uniform_score(norm, drop_special=keep is not None),
                                   keep is not None))
    return Probe(probe, seq_len, n_seqs, name)


def probe_choices(largest: int) -> tuple[int, int, int]:
    """The probe's length of R, number of sequences and seed, kept in the URL."""
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
    return seq_len, n_seqs, seed


def table_section(r: Roles) -> None:
    """Each head's strongest role, a row picking the head shown below, and the CSVs."""
    trace, roles = r.trace, r.roles
    st.subheader(f"Each head's strongest role{r.moved}")
    st.caption(words.rule(trace.causal, r.first_name, A.SINK_ROLES[1], r.norm))
    if r.n_repeats == 0:
        st.caption(words.NO_REPEATS)
    sharing = ui.kv_sharing_note(trace)
    if sharing:
        st.caption(f"{sharing} Heads that share keys and values can still have different "
                   f"roles: each has its own queries.")
    show_all = ui.synced(st.toggle, "all_roles", f"List every head ({len(roles)})", False)
    shown = roles if show_all else roles[:TOP]
    table = {"head": [x.name for x in shown], "role": [x.role for x in shown],
             "score": [round(x.score, 3) for x in shown], "probe": [x.probe for x in shown],
             "also above threshold": [x.also for x in shown]}
    if sharing:
        table["shares K/V with"] = [
            ", ".join(f"H{h}" for h in trace.heads_sharing_kv(x.head) if h != x.head)
            for x in shown]
    st.dataframe(table, hide_index=True, width="stretch",
                 column_config={"score": st.column_config.NumberColumn(format="%.3f")},
                 height=600 if show_all else "content", key="roles_table",
                 on_select=ui.callback(partial(picks.head_from_table, "roles_table", shown,
                                               "role_head")),
                 selection_mode="single-row")
    full = {"head": [x.name for x in roles], "layer": [x.layer for x in roles],
            "head index": [x.head for x in roles], "role": [x.role for x in roles],
            "score": [x.score for x in roles], "probe": [x.probe for x in roles],
            "also above threshold": [x.also for x in roles]}
    stem = r.selection.file_stem
    dl_roles, dl_maps = st.columns(2)
    ui.download_csv(partial(export.table_csv, full),
                    export.safe_filename(stem, "head_roles", suffix=".csv"),
                    "Every head's role as CSV", key="dl_roles", where=dl_roles)
    ui.download_csv(partial(export.layer_head_csv, r.scores),
                    export.safe_filename(stem, "role_scores", r.norm, suffix=".csv"),
                    "Every role score as CSV", key="dl_role_scores", where=dl_maps)


def maps_section(r: Roles) -> None:
    """Every head's score for each role, one map a role."""
    st.caption(words.MAPS_CAPTION)
    per_row = 2 if r.trace.n_head > 9 else 3
    norm_name = "ours" if r.norm == "ours" else "TransformerLens"
    for start in range(0, len(r.role_maps), per_row):
        columns = ui.figure_columns(per_row)
        for column, (key, title, how) in zip(columns, r.role_maps[start:start + per_row]):
            with column:
                unit = "mass" if key in A.SINK_ROLES else (
                    "entropy" if key == "entropy" else "score")
                fig = plots.layer_head_heatmap(r.scores[key], title + r.moved, unit, fmt=".2f",
                                               zmin=0.0, zmax=1.0)
                plots.columns_at_bottom(fig)
                ui.show_figure(fig, key=f"map_{key}", alt=f"{title} per head",
                               share=ui.column_share(1 / per_row))
                normalized = "" if key in (*A.SINK_ROLES, "entropy") else \
                    f" **Normalization:** {norm_name}."
                st.caption(f"{ui.md_escape(how)}. **Probe:** {ui.md_escape(r.probes[key])}."
                           + normalized)


def first_head(r: Roles) -> None:
    """On a first visit, the head with the clearest role is the one shown."""
    if ui.get_value("layer") is None and ui.get_value("head") is None \
            and "layer" not in st.query_params and "head" not in st.query_params:
        ui.set_value("layer", r.roles[0].layer)
        ui.set_value("head", r.roles[0].head)


def one_head_section(r: Roles) -> None:
    """One head: every score of it, and its map on the text and on the probe."""
    first, separator = A.SINK_ROLES
    trace = r.trace
    layer, head = ui.head_picker(trace, st.columns([2, 3])[0])
    name = plots.head_name(layer, head)
    mine = next(x for x in r.roles if x.layer == layer and x.head == head)
    short = {first: f"sink: {r.first_name}", separator: f"sink: {separator}",
             "entropy": "normalized entropy"}
    st.markdown(f"**{name}: {ui.md_escape(mine.role)}** ({mine.score:.2f}, "
                f"{ui.md_escape(mine.probe)}). Every score of this head:")
    st.dataframe({short.get(key, key): [round(float(r.scores[key][layer, head]), 3)]
                  for key, _, _ in r.role_maps}, hide_index=True, width="stretch")
    sharing = ui.kv_sharing_note(trace, head)
    if sharing:
        st.caption(sharing)
    text_col, probe_col = ui.figure_columns(2)
    with text_col:
        head_on_text(r, layer, head, name)
    with probe_col:
        head_on_probe(r, layer, head, name)


def head_on_text(r: Roles, layer: int, head: int, name: str) -> None:
    """The head on the text as shown; past 256 tokens, its block means (an overview)."""
    shown = ui.shown_trace(r.selection, r.trace, r.keep)
    labels = list(shown.display_tokens)
    factor = block_factor(shown.n_tokens, HEAD_MAP_MAX)
    if factor > 1:
        text_map = ui.memo(shown.block_mean, layer=layer, head=head, factor=factor)
    else:
        factor, text_map = None, shown.head_map(layer, head)
    fig = plots.head_heatmap(text_map, labels, title=f"{name} on the text{r.moved}",
                             causal=r.trace.causal, max_ticks=30, block_factor=factor,
                             height=None if len(labels) <= 24 else HEAD_MAP_HEIGHT)
    ui.show_figure(fig, key="head_text", alt=f"{name} on the text",
                   share=ui.column_share(0.5))


def head_on_probe(r: Roles, layer: int, head: int, name: str) -> None:
    """The head on the probe's first sequence, its frame left out when the text's is."""
    probe = r.probe.result
    probe_map = probe.trace.head_map(layer, head)
    probe_labels = list(probe.trace.display_tokens)
    if r.drop_probe:
        probe_map, probe_kept = A.drop_positions(probe_map, probe.keep_mask(True))
        probe_labels = [probe_labels[i] for i in probe_kept]
    fig = plots.head_heatmap(probe_map, probe_labels,
                             title=f"{name} on the probe (sequence 1 of "
                                   f"{r.probe.n_seqs}){r.moved}",
                             causal=r.trace.causal, max_ticks=14, height=HEAD_MAP_HEIGHT)
    ui.show_figure(fig, key="head_probe", alt=f"{name} on the probe",
                   share=ui.column_share(0.5))
    st.caption(f"The probe's first sequence ({ui.md_escape(r.probe.name)}). An induction "
               f"head draws a stripe {r.probe.seq_len - 1} cells left of the diagonal in the "
               f"second half: each token reads the token after its first copy.")


def caveat(r: Roles) -> None:
    ui.caveat()


SECTIONS = [table_section, ui.Folded("Every head, role by role", "role_maps", maps_section),
            first_head,
            ui.Folded("One head on the text and on the probe", "role_head", one_head_section),
            caveat]


def show() -> None:
    selection = ui.sidebar(shows_saved_traces=False, reads=MAPS)
    with ui.guard():
        ui.show_sections(roles_of(selection), SECTIONS)
