"""The Circuits page's results, one section each, taking the page's ``Patched``: every head
patched (Heads), every layer and position (Positions), attribution patching against the
exact patches, path patching into a receiver, and the circuit graph with its heads tested."""

from __future__ import annotations

from functools import partial

import streamlit as st

from .... import plots, ui
from ....analysis import circuits, patching, prompts
from ....analysis.attribution import check_attributable
from ....analysis.circuit_tests import circuit_heads, circuit_test
from ....core.errors import MhaVizError
from ....server import export
from ...words import circuits as words
from ...words.circuits import ABLATIONS, STREAMS
from . import clicks, shown
from .pairs import Patched

TOP_HEADS = 8


def noise_or_darkest(result: patching.PatchingResult, what: str, spread: bool = False) -> None:
    """Under a patching map's caption: that nothing stands out from noise (every effect
    within patching.noise_level), or its darkest cells in words. Nothing for a map of the
    spread over pairs, whose colours are not effects."""
    if spread:
        return
    level = patching.noise_level(result)
    if patching.within_noise(result):
        st.info(words.noise_note(level, what))
        return
    said = words.darkest(patching.strongest_components(result, 3), level)
    if said:
        st.caption(said)


def downloads(result: patching.PatchingResult, name: str, file_stem: str) -> None:
    """A patching result as CSV and every pair's values as .npz."""
    stem = export.safe_filename(file_stem, "patching", name, result.direction)
    left, right = st.columns(2)
    with left:
        ui.download_csv(partial(export.patching_csv, result), stem + ".csv",
                        "Patching results as CSV", key=f"dl_{name}_csv")
    with right:
        ui.download_bytes(partial(export.npz_bytes, result.to_npz_dict()), stem + ".npz",
                          "⬇ Every pair's values (.npz)", key=f"dl_{name}_npz")


def heads(p: Patched) -> None:
    """Every head patched: its map (mean over pairs, their spread or one pair), the strongest
    heads and the downloads."""
    info, pairs = p.model.info, p.pairs
    result = ui.run_or_wait(
        patching.activation_patching, p.model, pairs, None, p.metric, "head", p.direction,
        name="patch", label=f"Patching every head ({info.n_layer} × {info.n_head}) on "
                            f"{len(pairs)} pair(s)",
        auto=p.auto, button=f"Patch every head ({info.n_layer * info.n_head} heads × "
                            f"{len(pairs)} pair(s))")
    if result is None:
        return
    picked = "mean"
    if result.n_pairs > 1:
        labels = shown.effect_choices(result.n_pairs, pairs)
        picked = st.selectbox("Show", list(labels), key="_mv_circuit_show",
                              format_func=partial(shown.effect_label, labels))
    effect = shown.shown_effect(result, picked)
    st.caption(shown.heads_caption(result))
    noise_or_darkest(result, "head's patch", picked == "std")
    fig = plots.patching_heatmap(
        effect.values, effect.raw, shown.heads_title(p.direction, effect.what), effect.unit,
        kv_heads=result.kv_heads, raw_name=f"patched {result.metric}", shown_name=effect.what,
        clickable=True, layers_across=shown.layers_across(), span=effect.span)
    fig.layout.meta["pairs"] = shown.pairs_digest(pairs)  # which pairs it shows
    ui.show_figure(fig, key="patch_heads",
                   on_select=partial(clicks.receiver_from_map, info.n_head),
                   alt="Patching effect of every head")
    st.markdown(f"**Strongest heads** ({ui.md_escape(result.metric)}; "
                f"{result.n_pairs} pair(s)):")
    st.table(shown.strongest_table(patching.strongest_components(result, TOP_HEADS)))
    for note in result.notes:
        st.caption(ui.md_escape(note))
    downloads(result, "heads", p.selection.file_stem)


def positions(p: Patched) -> None:
    """The residual stream (or a sub-layer's output) patched at every layer and position."""
    stream = ui.synced(st.radio, "c_stream", "Patch", "resid_pre", options=list(STREAMS),
                       format_func=STREAMS.get, horizontal=True,
                       help="The whole vector at one layer and one position.")
    result = ui.run_or_wait(
        patching.activation_patching, p.model, p.pairs, None, p.metric, stream, p.direction,
        name="patch", label=f"Patching the {STREAMS[stream]} at every layer and position",
        auto=p.auto, button=f"Patch the {STREAMS[stream]} at every layer and position")
    if result is None:
        return
    differing = prompts.compare_prompts(p.model, p.pairs[0].clean,
                                        p.pairs[0].corrupted).differing
    st.caption(words.POSITIONS)
    noise_or_darkest(result, "position's patch")
    fig = plots.position_patching_map(result.effect, result.values, result.col_labels,
                                      f"Patching the {STREAMS[stream]} by layer and position",
                                      words.SCALE_TITLE, differing, span=shown.FIXED_SPAN)
    ui.show_figure(fig, key="patch_positions", alt="Patching effect by layer and position")
    downloads(result, stream, p.selection.file_stem)


def attribution(p: Patched) -> None:
    """Attribution patching's estimate of every head against the exact patches."""
    estimate = ui.run_or_wait(patching.attribution_patching, p.model, p.pairs, None, p.metric,
                              "head", p.direction, name="attribution",
                              label="Attribution patching (one forward and one backward "
                                    "pass)",
                              auto=p.auto, button="Estimate by attribution patching")
    exact = ui.run_or_wait(patching.activation_patching, p.model, p.pairs, None, p.metric,
                           "head", p.direction, name="patch",
                           label="Exact patching of every head", auto=p.auto,
                           button="Patch every head exactly, to compare")
    if estimate is None or exact is None:
        return
    error = patching.estimate_error(estimate, exact)
    st.caption(words.ATTRIBUTION)
    fig = plots.attribution_scatter(estimate.normalized, exact.normalized, error["r"],
                                    error["worst"])
    ui.show_figure(fig, key="attribution", alt="Attribution estimate against exact patching")
    c1, c2 = st.columns(2)
    c1.metric("Correlation r (every head and pair)", f"{error['r']:.3f}")
    c2.metric("Largest error (normalized)", f"{error['max_abs']:.3f}")
    st.table({"worst-estimated head": error["worst"],
              "|estimate − exact|": [f"{g:.3f}" for g in error["worst_gaps"]]})
    downloads(estimate, "attribution", p.selection.file_stem)


def paths(p: Patched) -> None:
    """Path patching: each sender head's direct path into a receiver (the logits or a head's
    queries, keys or values)."""
    left, right = st.columns([2, 1])
    receiver = ui.synced(left.selectbox, "c_recv", "Receiver", "logits",
                         options=shown.receiver_names(p.model.info.n_layer,
                                                      p.model.info.n_head),
                         help=words.RECEIVER_HELP)
    part = ui.synced(right.radio, "c_part", "Receiver reads", "q", options=["q", "k", "v"],
                     horizontal=True, disabled=receiver == "logits", help=words.PART_HELP)
    receivers = shown.path_receivers(receiver, part)
    path_direction = "noise"  # Wang et al.'s: the clean run, one sender corrupted
    result = ui.run_or_wait(
        patching.path_patching, p.model, p.pairs, None, p.metric, receivers, path_direction,
        name="path", label=f"Path patching into {receiver}", auto=p.auto,
        button=f"Run path patching into {receiver}" + (f" ({part})" if receivers != "logits"
                                                        else ""))
    if result is None:
        st.caption(words.PATHS_WAIT)
        return
    st.caption(words.paths_caption(ui.md_escape(result.receivers)))
    noise_or_darkest(result, f"sender's path into {result.receivers}")
    fig = plots.patching_heatmap(result.effect, result.values,
                                 f"Path patching: senders → {result.receivers}",
                                 words.SCALE_TITLE, kv_heads=result.kv_heads,
                                 raw_name=f"patched {result.metric}",
                                 shown_name="moved (normalized)",
                                 layers_across=shown.layers_across(), span=shown.FIXED_SPAN)
    ui.show_figure(fig, key="paths", alt="Path patching effect of each sender head")
    downloads(result, "paths", p.selection.file_stem)


def circuit(p: Patched) -> None:
    """The circuit: every edge scored, the strongest kept and measured exactly, drawn, and
    its heads tested."""
    model, pairs = p.model, p.pairs
    try:
        check_attributable(model)
    except MhaVizError as error:
        ui.show_error(error)
        return
    scores = ui.run_or_wait(
        circuits.edge_attribution_patching, model, pairs, None, p.metric, name="edges",
        label="Edge attribution patching (every edge, one backward pass)", auto=p.auto,
        button="Score every edge")
    if scores is None:
        return
    top_k = ui.synced(st.slider, "c_edges", "Edges kept (strongest first)", 50, min_value=5,
                      max_value=min(500, scores.n_edges), step=5,
                      valid=lambda v: 5 <= int(v) <= 500, help=words.EDGES_HELP)
    found = ui.computed(
        circuits.circuit, model, pairs, None, p.metric, int(top_k), None, scores,
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
    meta["pairs"] = shown.pairs_digest(pairs)
    ui.show_figure(fig, key="circuit_graph",
                   on_select=partial(clicks.open_node, list(meta["nodes"]),
                                     int(meta["node_curve"]), pairs[0].clean),
                   alt="Circuit graph")
    st.caption(words.circuit_caption(found.faithfulness))
    st.table(shown.edge_table(found.edges))
    ui.download_csv(partial(export.table_csv, shown.edge_columns(found.edges)),
                    export.safe_filename(p.selection.file_stem, "circuit", top_k,
                                         suffix=".csv"),
                    "Circuit edges as CSV", key="dl_circuit")
    for note in found.notes:
        st.caption(ui.md_escape(note))
    circuit_test_view(p, found)


def circuit_test_view(p: Patched, found) -> None:
    """Faithfulness and necessity of the drawn circuit's heads (analysis.circuit_tests), with
    the ablation the person picks, over every pair, the pairs' corrupted prompts as the
    reference distribution."""
    tested_heads = circuit_heads(p.model, found)
    st.markdown(words.TESTED)
    if not tested_heads:
        st.caption(words.NO_HEADS)
        return
    ablation = ui.synced(st.radio, "c_ablation", "Ablation", "mean", options=list(ABLATIONS),
                         format_func=ABLATIONS.get, horizontal=True)
    tested = ui.computed(circuit_test, p.model, p.pairs, tested_heads, p.metric, ablation,
                         label=f"Ablating inside and outside the {len(tested_heads)}-head "
                               f"circuit")
    if tested is None:
        return
    faithful, needed = tested.spread("faithfulness"), tested.spread("necessity")
    c1, c2 = st.columns(2)
    c1.metric(words.FAITHFULNESS, f"{tested.faithfulness:.0%}", help="F(C) / F(M)")
    c2.metric(words.NECESSITY, f"{tested.necessity:.0%}", help="1 − F(M \\ C) / F(M)")
    st.caption(words.heads_test_caption(tested.faithfulness, tested.necessity,
                                        float(tested.without_circuit.mean()),
                                        float(tested.model_metric.mean())))
    st.caption(circuit_test_caption(tested, faithful, needed))
    for note in tested.notes:
        st.caption(ui.md_escape(note))


def circuit_test_caption(tested, faithful: dict, needed: dict) -> str:
    """The figures behind the two ratios, and their spread over pairs, in words."""
    spread = ""
    if tested.n_pairs > 1:
        spread = (f" Over the {tested.n_pairs} pairs, each pair's own ratio: faithfulness "
                  f"{faithful['mean']:.0%} ± {faithful['std']:.0%} (95% interval "
                  f"{faithful['ci95_low']:.0%} to {faithful['ci95_high']:.0%}), necessity "
                  f"{needed['mean']:.0%} ± {needed['std']:.0%}.")
    return (f"{len(tested.heads)} heads, {ABLATIONS[tested.ablation]} over the pairs' "
            f"corrupted prompts. F(M) = {tested.model_metric.mean():.3f}, F(C) = "
            f"{tested.circuit_metric.mean():.3f}, F(M \\ C) = "
            f"{tested.without_circuit.mean():.3f}, every head ablated "
            f"{tested.nothing_metric.mean():.3f} ({ui.md_escape(tested.metric)}).{spread}")


RESULTS = {"heads": heads, "positions": positions, "attribution": attribution,
           "paths": paths, "circuit": circuit}


def result_section(p: Patched) -> None:
    """The result chosen above."""
    RESULTS[p.view](p)


def footer(p: Patched) -> None:
    st.caption(ui.NUMBERING)
    ui.caveat()
