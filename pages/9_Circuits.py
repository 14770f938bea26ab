"""Circuits: which heads cause a prediction. Patch activations between a clean and a corrupted
prompt, trace paths between heads, and draw the circuit that carries the behaviour."""

import hashlib
from functools import partial

import streamlit as st

from mha_viz import TargetMetric
from mha_viz import analysis as A
from mha_viz import plots, ui
from mha_viz.analysis import circuits as C
from mha_viz.analysis import patching as P
from mha_viz.analysis import prompts
from mha_viz.analysis.attribution import check_attributable
from mha_viz.core.errors import MhaVizError
from mha_viz.server import export

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
TARGET, CONTRAST = " Mary", " John"
AUTO_TOKENS = 64  # one pair up to this long runs by itself; more waits for a button
MAX_IOI = 256
TOP_HEADS = 8
METRIC_HELP = {
    "logit_diff": "logit(target) − logit(contrast) at the last position: how much more the "
                  "model prefers the target (Wang et al. 2023's measure for the IOI task).",
    "logit": "The target's logit at the last position (before the softmax).",
    "logprob": "log p(target) at the last position: the logit after the softmax, so every "
               "other token's logit moves it too.",
}
DIRECTION_HELP = ("Denoising runs the corrupted prompt and restores one clean activation: a "
                  "component that alone brings the answer back is sufficient. Noising runs the "
                  "clean prompt and breaks one activation: a component whose loss hurts is "
                  "necessary. 0 on the colour scale is the corrupted run, 1 the clean run.")
VIEWS = {"heads": "Heads", "positions": "Positions", "attribution": "Attribution vs exact",
         "paths": "Path patching", "circuit": "Circuit graph"}
STREAMS = {"resid_pre": "residual stream entering the layer", "attn_out": "attention output",
           "mlp_out": "MLP output"}
SOURCES = {"one": "this pair", "ioi": "N generated IOI pairs", "file": "pairs from a file"}
KIND_TITLES = {"encoder": "Encoder self-attention", "decoder": "Decoder self-attention",
               "cross": "Cross-attention"}
AUTO_HEADS = 200  # an encoder-decoder with at most this many heads is patched by itself

ui.page_setup(
    "Circuits",
    "Which heads *cause* the model's answer? Type a clean prompt and a corrupted one that "
    "differs in one name, and patch: run one prompt with one component's activation taken "
    "from the other, for every head, position and path. The heads whose activation moves "
    "the answer form the circuit (Wang et al. 2023, the indirect-object circuit).",
)
selection = ui.sidebar(shows_saved_traces=False, encoder_decoders=True)

_OPEN_HEAD = "_mv_circuits_open_head"
if _OPEN_HEAD in st.session_state:  # a node of the circuit graph was clicked
    layer, head, text = st.session_state.pop(_OPEN_HEAD)
    ui.set_value("text", text)
    ui.set_value("layer", layer)
    ui.set_value("head", head)
    st.switch_page("pages/1_Attention_Maps.py")


@ui.callback
def set_target_from_pills() -> None:
    picked = st.session_state.get("_mv_circuit_pills")
    if picked:
        ui.set_value("c_target", picked)


@ui.callback
def receiver_from_map(n_head: int) -> None:
    """A click in the head map: that head becomes path patching's receiver."""
    points = ((st.session_state.get("patch_heads") or {}).get("selection") or {}).get(
        "points") or []
    for point in points:
        picked = plots.grid_point_to_head(point, n_head)
        if picked is not None and point.get("curve_number", 1) == 1:
            ui.set_value("c_recv", f"L{picked[0]}.H{picked[1]}")
            ui.set_value("c_view", "paths")
            return


@ui.callback
def open_node(names: list, node_curve: int, text: str) -> None:
    points = ((st.session_state.get("circuit_graph") or {}).get("selection") or {}).get(
        "points") or []
    for point in points:
        node = plots.circuit_point_to_node(point, names, node_curve)
        head = plots.node_to_head(node) if node else None
        if head is not None:
            st.session_state[_OPEN_HEAD] = (head[0], head[1], text)
            return


def pairs_digest(pairs) -> str:
    return hashlib.sha1(repr(tuple(pairs)).encode("utf-8", "replace")).hexdigest()[:12]


def layers_across() -> bool | None:
    """Head maps of a deep model run their layers across a wide screen, down a phone's."""
    size = ui.viewport()
    return False if size is not None and size["width"] < ui.STACKED_BELOW_PX else None


def show_tokens(comparison: prompts.PromptComparison) -> None:
    """Both prompts' tokens side by side, the differing positions highlighted."""
    left, right = st.columns(2)
    for column, name, tokens in ((left, "Clean", comparison.clean_tokens),
                                 (right, "Corrupted", comparison.corrupted_tokens)):
        chips = " ".join(
            (f":orange-background[**{i}:{ui.md_escape(t)}**]" if i in comparison.differing
             else f"`{i}:{ui.md_escape(t)}`") for i, t in enumerate(tokens))
        column.markdown(f"**{name}: {len(tokens)} tokens**  \n{chips}")


def pair_inputs(model):
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
    comparison = None
    try:
        comparison = prompts.compare_prompts(model, clean, corrupted)
    except MhaVizError as error:
        ui.show_error(error)
    if comparison is not None:
        show_tokens(comparison)
        with st.expander("Make a corrupted prompt: swap one token of the clean prompt"):
            swap_col, with_col, button_col = st.columns([2, 2, 1], vertical_alignment="bottom")
            position = swap_col.selectbox(
                "Token to replace", list(range(len(comparison.clean_tokens))),
                index=len(comparison.clean_tokens) - 1 if not comparison.differing
                else comparison.differing[0],
                format_func=lambda i: f"{i}: {comparison.clean_tokens[i]}", key="_mv_swap_pos")
            replacement = with_col.text_input("Replace it with", " John", key="_mv_swap_with",
                                              help="One token, e.g. ' John' (with the space "
                                                   "the word has in the text).")
            if button_col.button("Swap", key="_mv_swap"):
                try:
                    ui.set_value("corrupted", prompts.swap_token(model, clean, position,
                                                                 replacement))
                    st.rerun()
                except MhaVizError as error:
                    ui.show_error(error)
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
    if comparison is not None:
        predicted = ui.memo(model.predict, clean, key=(selection.model_name, "c_top", clean),
                            k=6)
        ids = [int(i) for i in predicted.top_ids[-1]]
        st.pills("The model's top predictions after the clean prompt (click one to make it "
                 "the target)", [model.tokenizer.decode([i]) for i in ids],
                 format_func=lambda t: t.replace(" ", "␣"), key="_mv_circuit_pills",
                 on_change=set_target_from_pills)
    metric_col, direction_col = st.columns(2)
    kind = ui.synced(metric_col.radio, "c_metric", "Metric", "logit_diff",
                     options=list(ui.METRIC_LABELS), format_func=ui.METRIC_LABELS.get,
                     horizontal=True, help=" ".join(METRIC_HELP.values()))
    metric_col.caption(METRIC_HELP[kind])
    direction = ui.synced(direction_col.radio, "c_dir", "Direction", "denoise",
                          options=list(P.DIRECTIONS), horizontal=True, help=DIRECTION_HELP)
    direction_col.caption(P.DIRECTIONS[direction].split(": ", 1)[1].capitalize() + ".")
    if source == "one":
        if comparison is None or not clean.strip() or not corrupted.strip():
            return None, kind, direction
        return [prompts.PromptPair(clean, corrupted, target,
                                   contrast if kind == "logit_diff" else None)], kind, direction
    if source == "ioi":
        n_col, seed_col = st.columns(2)
        n = ui.synced(n_col.number_input, "c_n", "Pairs", 16, min_value=1, max_value=MAX_IOI,
                      valid=lambda v: 1 <= int(v) <= MAX_IOI)
        seed = ui.synced(seed_col.number_input, "c_seed", "Seed", 0, min_value=0,
                         max_value=2**31 - 1, valid=lambda v: 0 <= int(v) < 2**31)
        pairs = ui.memo(prompts.ioi_pairs, model, key=(selection.model_name, "ioi"),
                        n=int(n), seed=int(seed))
        st.caption(f"{len(pairs)} indirect-object pairs (ABBA and BABA templates), each with "
                   f"its own target (the indirect object) and contrast (the subject); the "
                   f"first: “{ui.md_escape(pairs[0].clean)}”.")
        return pairs, kind, direction
    upload = st.file_uploader("Pairs file (.csv or .jsonl: clean, corrupted, target, contrast)",
                              type=["csv", "jsonl"], key="_mv_pairs_file")
    if upload is None:
        st.info("Upload a file of prompt pairs to patch over them.")
        return None, kind, direction
    data = upload.getvalue()
    pairs = ui.memo(prompts.read_pairs, data, key=("pairs file", hashlib.sha1(data).hexdigest()),
                    name=upload.name)
    st.caption(f"{len(pairs)} pairs from the file.")
    return pairs, kind, direction


def heads_view(model, pairs, kind, direction, auto):
    info = model.info
    result = ui.run_or_wait(
        ("patch", selection.model_name, tuple(pairs), kind, "head", direction),
        P.activation_patching, model, pairs, None, kind, "head", direction,
        label=f"Patching every head ({info.n_layer} × {info.n_head}) on {len(pairs)} pair(s)",
        auto=auto, button=f"Patch every head ({info.n_layer * info.n_head} heads × "
                          f"{len(pairs)} pair(s))")
    if result is None:
        return None
    shown_choices = ["mean"] + (["std"] if result.n_pairs > 1 else []) + [
        f"pair {i}" for i in range(result.n_pairs)]
    picked = "mean"
    if result.n_pairs > 1:
        def label(choice: str) -> str:
            if choice == "mean":
                return f"mean over {result.n_pairs} pairs"
            if choice == "std":
                return "spread: standard deviation over pairs"
            return f"{choice}: {pairs[int(choice.split()[1])].clean}"
        picked = st.selectbox("Show", shown_choices, key="_mv_circuit_show", format_func=label)
    if picked == "mean":
        shown, raw, what = result.effect, result.values, "mean normalised effect"
    elif picked == "std":
        shown, raw, what = result.std, result.values, "std of the normalised effect"
    else:
        i = int(picked.split()[1])
        shown, raw = result.per_pair_effect[i], result.per_pair[i]
        what = f"normalised effect on pair {i}"
    if direction == "denoise":
        st.caption(f"Each cell: the corrupted run with that head's output (before W_O) restored "
                   f"from the clean run, normalised: 0 = the corrupted run's metric "
                   f"({result.corrupted:.3f}), 1 = the clean run's ({result.clean:.3f}). Red "
                   f"heads bring the clean answer back by themselves. Click a head to trace "
                   f"the paths into it.")
    else:
        st.caption(f"Each cell: the clean run with that head's output (before W_O) taken from "
                   f"the corrupted run, as the change it makes, normalised: 0 = no change from "
                   f"the clean run's metric ({result.clean:.3f}), −1 = all the way to the "
                   f"corrupted run's ({result.corrupted:.3f}). Blue heads are necessary. "
                   f"Click a head to trace the paths into it.")
    fig = plots.patching_heatmap(
        shown, raw, f"{ 'Denoising' if direction == 'denoise' else 'Noising'}: {what}",
        "normalised" if picked != "std" else "std", kv_heads=result.kv_heads,
        raw_name=f"patched {result.metric}", shown_name=what, clickable=True,
        layers_across=layers_across())
    fig.layout.meta["pairs"] = pairs_digest(pairs)  # which pairs it shows (tests, benchmark)
    ui.show_figure(fig, key="patch_heads", on_select=partial(receiver_from_map, info.n_head),
                   alt="Patching effect of every head")
    ranked = P.strongest_components(result, TOP_HEADS)
    st.markdown(f"**Strongest heads** ({ui.md_escape(result.metric)}; "
                f"{result.n_pairs} pair(s)):")
    st.table({"head": [name for name, _, _ in ranked],
              "normalised effect": [f"{n:+.3f}" for _, n, _ in ranked],
              "patched metric": [f"{v:.3f}" for _, _, v in ranked]})
    for note in result.notes:
        st.caption(ui.md_escape(note))
    downloads(result, "heads")
    return result


def downloads(result, name: str) -> None:
    stem = export.safe_filename(selection.file_stem, "patching", name, result.direction)
    left, right = st.columns(2)
    with left:
        ui.download_csv(partial(export.patching_csv, result), stem + ".csv",
                        "Patching results as CSV", key=f"dl_{name}_csv")
    with right:
        ui.download_bytes(partial(export.npz_bytes, result.to_npz_dict()), stem + ".npz",
                          "⬇ Every pair's values (.npz)", key=f"dl_{name}_npz")


def positions_view(model, pairs, kind, direction, auto):
    stream = ui.synced(st.radio, "c_stream", "Patch", "resid_pre", options=list(STREAMS),
                       format_func=STREAMS.get, horizontal=True,
                       help="The whole vector at one layer and one position.")
    result = ui.run_or_wait(
        ("patch", selection.model_name, tuple(pairs), kind, stream, direction),
        P.activation_patching, model, pairs, None, kind, stream, direction,
        label=f"Patching the {STREAMS[stream]} at every layer and position", auto=auto,
        button=f"Patch the {STREAMS[stream]} at every layer and position")
    if result is None:
        return
    differing = prompts.compare_prompts(model, pairs[0].clean, pairs[0].corrupted).differing
    st.caption("Each cell: the normalised change of the metric when that layer's vector at "
               "that position is patched (as in the Heads view). Information moves from the "
               "differing token (★) to the last position as the layers climb.")
    fig = plots.position_patching_map(result.effect, result.values, result.col_labels,
                                      f"Patching the {STREAMS[stream]} by layer and position",
                                      "normalised", differing)
    ui.show_figure(fig, key="patch_positions", alt="Patching effect by layer and position")
    downloads(result, stream)


def attribution_view(model, pairs, kind, direction, auto):
    key = (selection.model_name, tuple(pairs), kind, "head", direction)
    estimate = ui.run_or_wait(("attribution",) + key, P.attribution_patching, model, pairs,
                              None, kind, "head", direction,
                              label="Attribution patching (one forward and one backward pass)",
                              auto=auto, button="Estimate by attribution patching")
    exact = ui.run_or_wait(("patch",) + key, P.activation_patching, model, pairs, None, kind,
                           "head", direction, label="Exact patching of every head", auto=auto,
                           button="Patch every head exactly, to compare")
    if estimate is None or exact is None:
        return
    error = P.estimate_error(estimate, exact)
    st.caption("Attribution patching estimates every head's effect from one backward pass "
               "(a first-order Taylor step from the run being patched). Where the points leave "
               "the diagonal the estimate cannot be trusted: usually heads whose patch moves "
               "the metric far, through a softmax or a norm.")
    fig = plots.attribution_scatter(estimate.normalized, exact.normalized, error["r"],
                                    error["worst"])
    ui.show_figure(fig, key="attribution", alt="Attribution estimate against exact patching")
    c1, c2 = st.columns(2)
    c1.metric("Correlation r (every head and pair)", f"{error['r']:.3f}")
    c2.metric("Largest error (normalised)", f"{error['max_abs']:.3f}")
    st.table({"worst-estimated head": error["worst"],
              "|estimate − exact|": [f"{g:.3f}" for g in error["worst_gaps"]]})
    downloads(estimate, "attribution")


def path_view(model, pairs, kind, direction):
    info = model.info
    receiver_names = ["logits"] + [f"L{l}.H{h}" for l in range(1, info.n_layer)
                                   for h in range(info.n_head)]
    left, right = st.columns([2, 1])
    receiver = ui.synced(left.selectbox, "c_recv", "Receiver", "logits",
                         options=receiver_names,
                         help="Logits: each sender head's effect through paths that reach the "
                              "output without passing another head. A head: its effect on "
                              "that head's input (click a head in the Heads view).")
    part = ui.synced(right.radio, "c_part", "Receiver reads", "q", options=["q", "k", "v"],
                     horizontal=True, disabled=receiver == "logits",
                     help="Which input of the receiver head takes the senders' paths: "
                          "queries, keys or values.")
    receivers = "logits"
    if receiver != "logits":
        layer, head = plots.node_to_head(receiver)
        receivers = [(layer, head, part)]
    path_direction = "noise"  # Wang et al.'s: the clean run, one sender corrupted
    result = ui.run_or_wait(
        ("path", selection.model_name, tuple(pairs), kind, str(receivers)),
        P.path_patching, model, pairs, None, kind, receivers, path_direction,
        label=f"Path patching into {receiver}", auto=False,
        button=f"Run path patching into {receiver}" + (f" ({part})" if receivers != "logits"
                                                        else ""))
    if result is None:
        st.caption("Path patching runs the clean prompt with one sender head's output taken "
                   "from the corrupted run while every other head is frozen at its clean "
                   "output, so only the sender's direct path to the receiver changes: one "
                   "run per sender head.")
        return
    st.caption(f"Each cell: the change of the metric, normalised, when that sender's path "
               f"into {ui.md_escape(result.receivers)} is corrupted (0 = no change from the "
               f"clean run, −1 = all the way to the corrupted run): blue senders feed the "
               f"receiver what the answer needs.")
    fig = plots.patching_heatmap(result.effect, result.values,
                                 f"Path patching: senders → {result.receivers}", "normalised",
                                 kv_heads=result.kv_heads,
                                 raw_name=f"patched {result.metric}",
                                 layers_across=layers_across())
    ui.show_figure(fig, key="paths", alt="Path patching effect of each sender head")
    downloads(result, "paths")


def circuit_view(model, pairs, kind, auto):
    try:
        check_attributable(model)
    except MhaVizError as error:
        ui.show_error(error)
        return
    scores = ui.run_or_wait(
        ("edges", selection.model_name, tuple(pairs), kind), C.edge_attribution_patching,
        model, pairs, None, kind, label="Edge attribution patching (every edge, one backward "
                                       "pass)", auto=auto, button="Score every edge")
    if scores is None:
        return
    top_k = ui.synced(st.slider, "c_edges", "Edges kept (strongest first)", 50, min_value=5,
                      max_value=min(500, scores.n_edges), step=5,
                      valid=lambda v: 5 <= int(v) <= 500,
                      help="The circuit is the strongest edges by |score|; its faithfulness "
                           "is measured exactly with everything else corrupted.")
    found = ui.computed(("circuit", selection.model_name, tuple(pairs), kind, int(top_k)),
                        C.circuit, model, pairs, None, kind, int(top_k), None, scores,
                        label=f"Measuring the {top_k}-edge circuit exactly")
    if found is None:
        return
    c1, c2, c3 = st.columns(3)
    c1.metric("Faithfulness", f"{found.faithfulness:.2f}",
              help="(metric of the circuit alone − corrupted) / (clean − corrupted): 1 when "
                   "the kept edges alone do what the whole model does, 0 when they do nothing.")
    c2.metric("Edges kept", f"{found.n_edges} of {scores.n_edges:,}")
    c3.metric("Nodes", f"{len(found.nodes)}")
    fig = plots.circuit_graph(found.edges, model.info.n_layer, model.info.n_head,
                              f"The {found.n_edges} strongest edges", found.faithfulness)
    meta = fig.layout.meta
    meta["pairs"] = pairs_digest(pairs)
    ui.show_figure(fig, key="circuit_graph",
                   on_select=partial(open_node, list(meta["nodes"]), int(meta["node_curve"]),
                                     pairs[0].clean),
                   alt="Circuit graph")
    st.caption("Click a head to open its attention map on the clean prompt.")
    st.table({"edge": [f"{e.upstream} → {e.downstream}" for e in found.edges[:10]],
              "score": [f"{e.score:+.4f}" for e in found.edges[:10]]})
    ui.download_csv(partial(export.table_csv, {
        "upstream": [e.upstream for e in found.edges],
        "downstream": [e.downstream for e in found.edges],
        "score": [e.score for e in found.edges]}),
        export.safe_filename(selection.file_stem, "circuit", top_k, suffix=".csv"),
        "Circuit edges as CSV", key="dl_circuit")
    for note in found.notes:
        st.caption(ui.md_escape(note))


def encoder_decoder_view(model) -> None:
    """An encoder-decoder: the sidebar's source is clean, a corrupted source is typed here,
    and every head of every kind is patched between the two runs of one target."""
    example = next((e for e in ui.EXAMPLES.values() if e["text"] == selection.text), {})
    st.caption("The sidebar's source is the clean one; type a corrupted source that differs "
               "in one word (or digit). The decoder reads the same target after both: the "
               "sidebar's target, or the model's own output for the clean source.")
    corrupted = ui.synced(st.text_input, "c_corrupted", "Corrupted source",
                          example.get("corrupted", ""),
                          placeholder="the source with one word changed")
    if not corrupted.strip():
        st.info("Type a corrupted source above to patch.")
        st.stop()
    found = ui.memo(A.first_divergence, model, key=(selection.key[:-1], corrupted, "diverge"),
                    clean=selection.text, corrupted=corrupted, target=selection.target)
    if found is None:
        st.info("The decoder writes the same tokens after both sources (teacher-forced on "
                "the clean target): the corruption changes no answer, so there is nothing "
                "to patch. Change another word.")
        st.stop()
    position, clean_token, corrupted_token = found
    shown = model.display_tokens([clean_token, corrupted_token])
    direction = ui.synced(st.radio, "c_direction", "Patch", "denoise",
                          options=["denoise", "noise"], horizontal=True,
                          format_func={"denoise": "clean into corrupted (denoising)",
                                       "noise": "corrupted into clean (noising)"}.get,
                          help=DIRECTION_HELP)
    metric = TargetMetric(position, clean_token, corrupted_token)
    st.markdown(f"**Measured:** logit('{ui.md_escape(shown[0])}') − "
                f"logit('{ui.md_escape(shown[1])}') at target position {position}, the first "
                f"token the corruption changes.")
    total_heads = A.total_heads(model)
    result = ui.run_or_wait(
        ("patch_seq2seq", selection.model_name, selection.text, corrupted, selection.target,
         direction), A.activation_patching_seq2seq, model, selection.text, corrupted,
        selection.target, metric, direction, label="Patching every head of every kind",
        auto=total_heads <= AUTO_HEADS, button=f"Patch every head ({total_heads} runs)")
    if result is None:
        st.stop()
    st.caption(f"Clean run: {result.clean:.3f}; corrupted run: {result.corrupted:.3f}. Each "
               f"cell: the metric with one head's output (its z, before W_O) taken from the "
               f"other run, as a share of the way from corrupted (0) to clean (1). The three "
               f"maps share one colour scale, −1 to 1.")
    for note in result.notes:
        st.caption(note)
    columns = ui.figure_columns(3)
    for column, (kind, values) in zip(columns, result.normalized.items()):
        with column:
            fig = plots.layer_head_heatmap(values, KIND_TITLES[kind], "patched (0 → 1)",
                                           fmt=".2f", diverging=True, zmax=1.0)
            ui.show_figure(fig, key=f"patch_{kind}", share=ui.column_share(1 / 3),
                           alt=f"Patching effect of every {kind} head")
    ranked = result.strongest()
    st.markdown("**The heads that carry the difference**, of every kind")
    st.dataframe({"head": [plots.head_name(l, h) for _, l, h, _ in ranked],
                  "kind": [KIND_TITLES[kind] for kind, _, _, _ in ranked],
                  "share restored" if direction == "denoise" else "share lost":
                      [round(v, 3) for _, _, _, v in ranked]},
                 hide_index=True, width="stretch")
    ui.download_csv(partial(export.table_csv, result.table()),
        export.safe_filename(selection.file_stem, "patching", direction, suffix=".csv"),
        "Every head as CSV", key="dl_patch_seq2seq")
    st.caption(ui.NUMBERING)
    ui.caveat()


with ui.guard():
    model = selection.model
    if model is None:
        ui.show_error(selection.model_error)
        st.stop()
    if model.info.encoder_decoder:
        encoder_decoder_view(model)
        st.stop()
    if not (model.info.causal and model.info.has_lm_head):
        st.warning(f"**{ui.md_escape(model.info.name)}** is not a causal language model "
                   f"(it has no next-token prediction to measure), so there is no answer to "
                   f"patch. Pick SmolLM2 or GPT-2 in the sidebar.")
        st.stop()
    st.caption("This page takes its own two prompts; the sidebar's text is for the other "
               "pages.")
    pairs, kind, direction = pair_inputs(model)
    if pairs is None:
        st.stop()
    try:  # tokenization only: says what is wrong with which pair before anything runs
        P.prepare_pairs(model, pairs, None, kind)
    except MhaVizError as error:
        ui.show_error(error)
        st.stop()
    longest = max(len(model.encode(p.clean).input_ids) for p in pairs)
    auto = len(pairs) == 1 and longest <= AUTO_TOKENS
    st.divider()
    view = ui.synced(st.radio, "c_view", "Result", "heads", options=list(VIEWS),
                     format_func=VIEWS.get, horizontal=True)
    if view == "heads":
        heads_view(model, pairs, kind, direction, auto)
    elif view == "positions":
        positions_view(model, pairs, kind, direction, auto)
    elif view == "attribution":
        attribution_view(model, pairs, kind, direction, auto)
    elif view == "paths":
        path_view(model, pairs, kind, direction)
    else:
        circuit_view(model, pairs, kind, auto)
    st.caption(ui.NUMBERING)
    ui.caveat()
