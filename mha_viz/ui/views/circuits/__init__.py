"""The Circuits page's view: which heads cause a prediction. Patch activations between a
clean and a corrupted prompt (one pair, generated indirect-object pairs or a file of them),
trace paths between heads, estimate every head by attribution patching, and draw the circuit
that carries the behaviour and test its heads; for an encoder-decoder, every head of every
kind patched between two sources (circuits_parts)."""

from __future__ import annotations

from functools import partial

import streamlit as st

from ... import plots, ui
from ...analysis import circuits, patching, prompts
from ...analysis.attribution import check_attributable
from ...core.errors import MhaVizError
from ...server import export
from ..words import circuits as words
from . import circuits_parts as parts
from . import circuits_prompts as pair
from .circuits_parts import DIRECTION_HELP, METRIC_HELP, SOURCES, STREAMS, VIEWS

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
TARGET, CONTRAST = " Mary", " John"
TOP_HEADS = 8
INTRO = ("Which heads *cause* the model's answer? Type a clean prompt and a corrupted one that "
         "differs in one name, and patch: run one prompt with one component's activation taken "
         "from the other, for every head, position and path. The heads whose activation moves "
         "the answer form the circuit (Wang et al. 2023, the indirect-object circuit).")


def pair_inputs(selection, model):
    """The pairs to patch and their metric kind, from the widgets (None: nothing to run)."""
    source = ui.synced(st.radio, "c_pairs", "Patch over", "one", options=list(SOURCES),
                       format_func=SOURCES.get, horizontal=True,
                       help="Results are the mean over the pairs; each pair's values are one "
                            "click away in the Heads view.")
    clean = ui.synced(st.text_input, "clean", "Clean prompt", CLEAN,
                      help="The prompt on which the model does the behaviour.")
    corrupted = ui.synced(st.text_input, "corrupted", "Corrupted prompt", CORRUPTED,
                          help="The same prompt with the information that matters changed "
                               "(here the repeated name), with the same number of tokens.")
    stale_place = st.empty()  # filled below, once every field that depends on it is read
    comparison = None
    try:
        comparison = prompts.compare_prompts(model, clean, corrupted)
    except MhaVizError as error:
        ui.show_error(error)
    if comparison is not None:
        pair.show_tokens(comparison)
    target_col, contrast_col = st.columns(2)
    target = ui.synced(target_col.text_input, "c_target", "Target token", TARGET,
                       help="The answer on the clean prompt, one token. A word after a space "
                            "is its own token with the space: ' Mary', not 'Mary'.")
    contrast = ui.synced(contrast_col.text_input, "c_contrast", "Contrast token", CONTRAST,
                         help="The answer the corrupted prompt pushes towards (used by the "
                              "logit difference).")
    st.caption("Leading-space rule: tokenizers like GPT-2's and SmolLM2's write a word that "
               "follows a space as one token that starts with the space (shown ␣Mary), so "
               "type the target as ' Mary'. A target the model would write differently is "
               "refused with the spelling to use.")
    stale, made_for = pair.stale_fields(clean, {"corrupted": corrupted, "c_target": target,
                                                 "c_contrast": contrast})
    if source == "one" and stale:
        pair.stale_warning(stale_place, stale, made_for, clean)
    fresh = comparison is not None and "corrupted" not in stale
    if clean.strip():
        pair.swap_helper(model, clean, memo_tokens(model, clean),
                          comparison.differing[0] if fresh and comparison.differing else None,
                          expanded="corrupted" in stale)
        pair.prediction_pills(model, clean, corrupted if fresh else None)
    metric_col, direction_col = st.columns(2)
    kind = ui.synced(metric_col.radio, "c_metric", "Metric", "logit_diff",
                     options=list(ui.METRIC_LABELS), format_func=ui.METRIC_LABELS.get,
                     horizontal=True, help=" ".join(METRIC_HELP.values()))
    metric_col.caption(METRIC_HELP[kind])
    direction = ui.synced(direction_col.radio, "c_dir", "Direction", "denoise",
                          options=list(patching.DIRECTIONS), horizontal=True,
                          help=DIRECTION_HELP)
    direction_col.caption(words.DIRECTION_CAPTIONS[direction])
    if source == "one":
        if comparison is None or stale or not clean.strip() or not corrupted.strip():
            return None, kind, direction
        return [prompts.PromptPair(clean, corrupted, target,
                                   contrast if kind == "logit_diff" else None)], kind, direction
    if source == "ioi":
        return parts.ioi_pairs_input(model), kind, direction
    return parts.pairs_file_input(), kind, direction


def memo_tokens(model, text: str) -> list[str]:
    """The text's tokens as shown (one prompt compared with itself)."""
    return ui.memo(prompts.compare_prompts, model, text, text).clean_tokens


def heads_view(selection, model, pairs, kind, direction, auto):
    info = model.info
    result = ui.run_or_wait(
        patching.activation_patching, model, pairs, None, kind, "head", direction, name="patch",
        label=f"Patching every head ({info.n_layer} × {info.n_head}) on {len(pairs)} pair(s)",
        auto=auto, button=f"Patch every head ({info.n_layer * info.n_head} heads × "
                          f"{len(pairs)} pair(s))")
    if result is None:
        return
    picked = "mean"
    if result.n_pairs > 1:
        labels = parts.effect_choices(result.n_pairs, pairs)
        picked = st.selectbox("Show", list(labels), key="_mv_circuit_show",
                              format_func=partial(parts.effect_label, labels))
    shown = parts.shown_effect(result, picked)
    st.caption(parts.heads_caption(result))
    parts.noise_or_darkest(result, "head's patch", picked == "std")
    fig = plots.patching_heatmap(
        shown.values, shown.raw, parts.heads_title(direction, shown.what), shown.unit,
        kv_heads=result.kv_heads, raw_name=f"patched {result.metric}", shown_name=shown.what,
        clickable=True, layers_across=parts.layers_across(), span=shown.span)
    fig.layout.meta["pairs"] = parts.pairs_digest(pairs)  # which pairs it shows
    ui.show_figure(fig, key="patch_heads",
                   on_select=partial(parts.receiver_from_map, info.n_head),
                   alt="Patching effect of every head")
    st.markdown(f"**Strongest heads** ({ui.md_escape(result.metric)}; "
                f"{result.n_pairs} pair(s)):")
    st.table(parts.strongest_table(patching.strongest_components(result, TOP_HEADS)))
    for note in result.notes:
        st.caption(ui.md_escape(note))
    parts.downloads(result, "heads", selection.file_stem)


def positions_view(selection, model, pairs, kind, direction, auto):
    stream = ui.synced(st.radio, "c_stream", "Patch", "resid_pre", options=list(STREAMS),
                       format_func=STREAMS.get, horizontal=True,
                       help="The whole vector at one layer and one position.")
    result = ui.run_or_wait(
        patching.activation_patching, model, pairs, None, kind, stream, direction, name="patch",
        label=f"Patching the {STREAMS[stream]} at every layer and position", auto=auto,
        button=f"Patch the {STREAMS[stream]} at every layer and position")
    if result is None:
        return
    differing = prompts.compare_prompts(model, pairs[0].clean, pairs[0].corrupted).differing
    st.caption("Each cell: how far patching that layer's vector at that position moved the "
               "metric (the scale above). Information moves from the differing token (★) to "
               "the last position as the layers climb.")
    parts.noise_or_darkest(result, "position's patch")
    fig = plots.position_patching_map(result.effect, result.values, result.col_labels,
                                      f"Patching the {STREAMS[stream]} by layer and position",
                                      words.SCALE_TITLE, differing, span=parts.FIXED_SPAN)
    ui.show_figure(fig, key="patch_positions", alt="Patching effect by layer and position")
    parts.downloads(result, stream, selection.file_stem)


def attribution_view(selection, model, pairs, kind, direction, auto):
    estimate = ui.run_or_wait(patching.attribution_patching, model, pairs, None, kind, "head",
                              direction, name="attribution",
                              label="Attribution patching (one forward and one backward pass)",
                              auto=auto, button="Estimate by attribution patching")
    exact = ui.run_or_wait(patching.activation_patching, model, pairs, None, kind, "head",
                           direction, name="patch", label="Exact patching of every head", auto=auto,
                           button="Patch every head exactly, to compare")
    if estimate is None or exact is None:
        return
    error = patching.estimate_error(estimate, exact)
    st.caption("Attribution patching estimates every head's effect from one backward pass "
               "(a first-order Taylor step from the run being patched). Where the points leave "
               "the diagonal the estimate cannot be trusted: usually heads whose patch moves "
               "the metric far, through a softmax or a norm.")
    fig = plots.attribution_scatter(estimate.normalized, exact.normalized, error["r"],
                                    error["worst"])
    ui.show_figure(fig, key="attribution", alt="Attribution estimate against exact patching")
    c1, c2 = st.columns(2)
    c1.metric("Correlation r (every head and pair)", f"{error['r']:.3f}")
    c2.metric("Largest error (normalized)", f"{error['max_abs']:.3f}")
    st.table({"worst-estimated head": error["worst"],
              "|estimate − exact|": [f"{g:.3f}" for g in error["worst_gaps"]]})
    parts.downloads(estimate, "attribution", selection.file_stem)


def path_view(selection, model, pairs, kind, auto):
    left, right = st.columns([2, 1])
    receiver = ui.synced(left.selectbox, "c_recv", "Receiver", "logits",
                         options=parts.receiver_names(model.info.n_layer,
                                                              model.info.n_head),
                         help="Logits: each sender head's effect through paths that reach the "
                              "output without passing another head. A head: its effect on "
                              "that head's input (click a head in the Heads view).")
    part = ui.synced(right.radio, "c_part", "Receiver reads", "q", options=["q", "k", "v"],
                     horizontal=True, disabled=receiver == "logits",
                     help="Which input of the receiver head takes the senders' paths: "
                          "queries, keys or values.")
    receivers = parts.path_receivers(receiver, part)
    path_direction = "noise"  # Wang et al.'s: the clean run, one sender corrupted
    result = ui.run_or_wait(
        patching.path_patching, model, pairs, None, kind, receivers, path_direction, name="path",
        label=f"Path patching into {receiver}", auto=auto,
        button=f"Run path patching into {receiver}" + (f" ({part})" if receivers != "logits"
                                                        else ""))
    if result is None:
        st.caption("Path patching runs the clean prompt with one sender head's output taken "
                   "from the corrupted run while every other head is frozen at its clean "
                   "output, so only the sender's direct path to the receiver changes: one "
                   "run per sender head.")
        return
    st.caption(f"Each cell: the clean run with that sender's path into "
               f"{ui.md_escape(result.receivers)} taken from the corrupted run, every other "
               f"head frozen at its clean output: how far that moved the metric (the scale "
               f"above). A sender whose path carries what the answer needs moves it toward "
               f"the corrupted run.")
    parts.noise_or_darkest(result, f"sender's path into {result.receivers}")
    fig = plots.patching_heatmap(result.effect, result.values,
                                 f"Path patching: senders → {result.receivers}",
                                 words.SCALE_TITLE, kv_heads=result.kv_heads,
                                 raw_name=f"patched {result.metric}",
                                 shown_name="moved (normalized)",
                                 layers_across=parts.layers_across(), span=parts.FIXED_SPAN)
    ui.show_figure(fig, key="paths", alt="Path patching effect of each sender head")
    parts.downloads(result, "paths", selection.file_stem)


def circuit_view(selection, model, pairs, kind, auto):
    try:
        check_attributable(model)
    except MhaVizError as error:
        ui.show_error(error)
        return
    scores = ui.run_or_wait(
        circuits.edge_attribution_patching, model, pairs, None, kind, name="edges",
        label="Edge attribution patching (every edge, one backward pass)", auto=auto,
        button="Score every edge")
    if scores is None:
        return
    top_k = ui.synced(st.slider, "c_edges", "Edges kept (strongest first)", 50, min_value=5,
                      max_value=min(500, scores.n_edges), step=5,
                      valid=lambda v: 5 <= int(v) <= 500,
                      help="The circuit is the strongest edges by |score|; its faithfulness "
                           "is measured exactly with everything else corrupted.")
    found = ui.computed(
        circuits.circuit, model, pairs, None, kind, int(top_k), None, scores,
        label=f"Measuring the {top_k}-edge circuit exactly")
    if found is None:
        return
    c1, c2, c3 = st.columns(3)
    c1.metric(words.RECOVERED, f"{found.faithfulness:.0%}", help=words.RECOVERED_HELP)
    c2.metric("Edges kept", f"{found.n_edges} of {scores.n_edges:,}")
    c3.metric("Nodes", f"{len(found.nodes)}")
    fig = plots.circuit_graph(found.edges, model.info.n_layer, model.info.n_head,
                              f"The {found.n_edges} strongest edges", found.faithfulness)
    meta = fig.layout.meta
    meta["pairs"] = parts.pairs_digest(pairs)
    ui.show_figure(fig, key="circuit_graph",
                   on_select=partial(parts.open_node, list(meta["nodes"]),
                                     int(meta["node_curve"]), pairs[0].clean),
                   alt="Circuit graph")
    st.caption(words.circuit_caption(found.faithfulness))
    st.table(parts.edge_table(found.edges))
    ui.download_csv(partial(export.table_csv, parts.edge_columns(found.edges)),
                    export.safe_filename(selection.file_stem, "circuit", top_k, suffix=".csv"),
                    "Circuit edges as CSV", key="dl_circuit")
    for note in found.notes:
        st.caption(ui.md_escape(note))
    parts.circuit_test_view(model, pairs, kind, found)


def show() -> None:
    selection = ui.sidebar(shows_saved_traces=False, encoder_decoders=True)
    parts.open_clicked_head()  # a node of the circuit graph was clicked
    with ui.guard():
        model = selection.model
        if model is None:
            ui.show_error(selection.model_error)
            st.stop()
        if model.info.encoder_decoder:
            parts.encoder_decoder_view(selection, model)
            st.stop()
        if not (model.info.causal and model.info.has_lm_head):
            st.warning(f"**{ui.md_escape(model.info.name)}** is not a causal language model "
                       f"(it has no next-token prediction to measure), so there is no answer to "
                       f"patch. Pick SmolLM2 or GPT-2 in the sidebar.")
            st.stop()
        st.caption("This page takes its own two prompts; the sidebar's text is for the other "
                   "pages.")
        pairs, kind, direction = pair_inputs(selection, model)
        if pairs is None:
            st.stop()
        try:  # tokenization only: says what is wrong with which pair before anything runs
            patching.prepare_pairs(model, pairs, None, kind)
        except MhaVizError as error:
            ui.show_error(error)
            st.stop()
        auto = parts.runs_by_itself(model, pairs)
        st.divider()
        view = ui.synced(st.radio, "c_view", "Result", "heads", options=list(VIEWS),
                         format_func=VIEWS.get, horizontal=True)
        st.caption(words.COLOURS)
        if view == "heads":
            heads_view(selection, model, pairs, kind, direction, auto[view])
        elif view == "positions":
            positions_view(selection, model, pairs, kind, direction, auto[view])
        elif view == "attribution":
            attribution_view(selection, model, pairs, kind, direction, auto[view])
        elif view == "paths":
            path_view(selection, model, pairs, kind, auto[view])
        else:
            circuit_view(selection, model, pairs, kind, auto[view])
        st.caption(ui.NUMBERING)
        ui.caveat()
