"""The Circuits page's parts (views/circuits.py reads them): its texts and choices, what it
runs by itself, what each of its choices shows, the callbacks of its clickable figures, the
widgets that make pairs from generated IOI prompts or a file (one pair's fields:
circuits_prompts.py), an encoder-decoder's view and the circuit's test.

The page's widget keys and URL parameters are named here as the page has always named them:
links and tests rely on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import streamlit as st

from ... import plots
from ...analysis import patching, prompts
from ...analysis.circuit_tests import circuit_heads, circuit_test
from ...analysis.encoder_decoder_ablation import total_heads
from ...analysis.encoder_decoder_patching import activation_patching_seq2seq, first_divergence
from ...analysis.heads import head_name, parse_head_name
from ...models.model import TargetMetric
from ...server import export
from ..jobs import computed, run_or_wait
from ..selection import Selection
from ..stores import memo
from ..traces import figure_tag
from ..messages import callback
from ..output import (STACKED_BELOW_PX, caveat, column_share, download_bytes, download_csv,
                     figure_columns, show_figure, viewport)
from ..settings import EXAMPLES, NUMBERING, md_escape, runs_on_open
from ..state import set_value, synced
from ..words import circuits as words
from ..words.circuits import ABLATIONS

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
                  "necessary. Either way a cell is how far the patch moved the metric on one "
                  "scale, 0 = the corrupted run, 1 = the clean run.")
FIXED_SPAN = 1.0  # every patching map: -1 (the whole way to corrupted) to +1 (to clean)
VIEWS = {"heads": "Heads", "positions": "Positions", "attribution": "Attribution vs exact",
         "paths": "Path patching", "circuit": "Circuit graph"}
STREAMS = {"resid_pre": "residual stream entering the layer", "attn_out": "attention output",
           "mlp_out": "MLP output"}
SOURCES = {"one": "this pair", "ioi": "N generated IOI pairs", "file": "pairs from a file"}
KIND_TITLES = {"encoder": "Encoder self-attention", "decoder": "Decoder self-attention",
               "cross": "Cross-attention"}
MAX_IOI = 256
_OPEN_HEAD = "_mv_circuits_open_head"  # (layer, head, text) of a clicked node of the graph
# this page's own parameters in the address (and the folded sections' "open"), which the
# link to another page leaves behind
PAGE_PARAMS = ("open", "c_pairs", "clean", "corrupted", "c_target", "c_contrast", "c_metric",
               "c_dir", "c_view", "c_stream", "c_recv", "c_part", "c_edges", "c_ablation",
               "c_n", "c_seed", "c_corrupted", "c_direction")


# --- keys and what runs by itself ------------------------------------------------------------


def pairs_digest(pairs) -> str:
    """A short name of the pairs a figure shows (its meta "pairs", for tests and benchmarks)."""
    return figure_tag(pairs)


def runs_by_itself(model, pairs) -> dict[str, bool]:
    """Which of the page's views (VIEWS) computes on opening, without waiting for a button:
    every view but path patching (one run per sender head), for one pair as short as
    settings.RUNS_ON_OPEN["circuits.patching"] says."""
    short = len(pairs) == 1 and runs_on_open("circuits.patching",
                                             len(model.encode(pairs[0].clean).input_ids))
    return {view: short and view != "paths" for view in VIEWS}


def seq2seq_runs_by_itself(model) -> bool:
    """An encoder-decoder is patched on opening when it has at most as many heads of every
    kind together (one run per head) as RUNS_ON_OPEN["circuits.seq2seq_patching"] says."""
    return runs_on_open("circuits.seq2seq_patching", total_heads(model))


# --- what a choice shows ---------------------------------------------------------------------


def effect_choices(n_pairs: int, pairs) -> dict:
    """The Heads view's "Show" options over several pairs, each with how it reads: "mean",
    "std" and each pair by its index (an int)."""
    labels = {"mean": f"mean over {n_pairs} pairs", "std": "spread: standard deviation over pairs"}
    labels.update({number: f"pair {number}: {pair.clean}" for number, pair in enumerate(pairs)})
    return labels


def effect_label(labels: dict, choice) -> str:
    """How the "Show" box reads ``choice``. The browser hands the box back an option's
    position; AppTest may name a pair as its label starts, "pair 2": both read alike."""
    named = {f"pair {number}": number for number in labels if isinstance(number, int)}
    return labels[named.get(choice, choice)]


@dataclass(frozen=True)
class ShownEffect:
    """What the head map shows for one "Show" choice."""
    values: np.ndarray  # the colours
    raw: np.ndarray  # the patched metric under each cell
    what: str
    unit: str  # the colour bar's title
    span: float | None = FIXED_SPAN  # the colour scale's half-width (None: the largest value)


def shown_effect(result: patching.PatchingResult, choice) -> ShownEffect:
    """The head map of ``choice``: "mean" (the effect over pairs), "std" (its spread) or a
    pair's index."""
    if choice == "mean":
        return ShownEffect(result.effect, result.values, "mean normalized effect",
                           words.SCALE_TITLE)
    if choice == "std":
        return ShownEffect(result.std, result.values, "std of the normalized effect", "std",
                           None)
    return ShownEffect(result.per_pair_effect[choice], result.per_pair[choice],
                       f"normalized effect on pair {choice}", words.SCALE_TITLE)


def heads_caption(result: patching.PatchingResult) -> str:
    """What a cell of the head map is, in the result's direction, with both runs' metrics."""
    runs = (f"The corrupted run's metric is {result.corrupted:.3f} (0 on the scale), the "
            f"clean run's {result.clean:.3f} (1).")
    if result.direction == "denoise":
        return (f"Each cell: the corrupted run with that head's output (before W_O) restored "
                f"from the clean run, and how far that moved the metric. {runs} A head that "
                f"brings the clean answer back by itself is sufficient. Click a head to trace "
                f"the paths into it.")
    return (f"Each cell: the clean run with that head's output (before W_O) taken from the "
            f"corrupted run, and how far that moved the metric. {runs} A head whose "
            f"corruption moves it toward the corrupted run is necessary. Click a head to "
            f"trace the paths into it.")


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


def heads_title(direction: str, what: str) -> str:
    return f"{'Denoising' if direction == 'denoise' else 'Noising'}: {what}"


def receiver_names(n_layer: int, n_head: int) -> list[str]:
    """Path patching's receivers: the logits, then every head above layer 0 (a head of
    layer 0 has no sender below it)."""
    return ["logits"] + [head_name(layer, head) for layer in range(1, n_layer)
                         for head in range(n_head)]


def path_receivers(receiver: str, part: str):
    """path_patching's receivers for a receiver name: "logits", or [(layer, head, part)]."""
    if receiver == "logits":
        return "logits"
    return [(*parse_head_name(receiver), part)]


def strongest_table(ranked) -> dict[str, list[str]]:
    """patching.strongest_components' (name, effect, patched metric) rows as table columns."""
    return {"head": [name for name, _, _ in ranked],
            "normalized effect": [f"{effect:+.3f}" for _, effect, _ in ranked],
            "patched metric": [f"{value:.3f}" for _, _, value in ranked]}


def edge_table(edges, n: int = 10) -> dict[str, list[str]]:
    """The first ``n`` edges of a circuit, as shown."""
    return {"edge": [f"{e.upstream} → {e.downstream}" for e in edges[:n]],
            "score": [f"{e.score:+.4f}" for e in edges[:n]]}


def edge_columns(edges) -> dict[str, list]:
    """Every edge of a circuit as the CSV's columns."""
    return {"upstream": [e.upstream for e in edges],
            "downstream": [e.downstream for e in edges],
            "score": [e.score for e in edges]}


def seq2seq_table(ranked, direction: str) -> dict[str, list]:
    """Seq2SeqPatching.strongest's (kind, layer, head, share) rows as table columns."""
    return {"head": [head_name(layer, head) for _, layer, head, _ in ranked],
            "kind": [KIND_TITLES[kind] for kind, _, _, _ in ranked],
            "share restored" if direction == "denoise" else "share lost":
                [round(value, 3) for _, _, _, value in ranked]}


def layers_across() -> bool | None:
    """Head maps of a deep model run their layers across a wide screen, down a phone's."""
    size = viewport()
    return False if size is not None and size["width"] < STACKED_BELOW_PX else None


# --- clicks ----------------------------------------------------------------------------------


def open_clicked_head() -> None:
    """After a click on a head of the circuit graph: open its attention map on the text.
    The link carries what the page will show (the sidebar's settings, the text, the head),
    so that page writes nothing new into the address, and one Back press returns here (each
    change of the address is a step of the browser's history)."""
    if _OPEN_HEAD in st.session_state:
        layer, head, text = st.session_state.pop(_OPEN_HEAD)
        set_value("text", text)
        set_value("layer", layer)
        set_value("head", head)
        carried = {name: value for name, value in st.query_params.to_dict().items()
                   if name not in PAGE_PARAMS}
        st.switch_page("pages/1_Attention_Maps.py",
                       query_params={**carried, "text": text, "layer": str(layer),
                                     "head": str(head)})


def _selected_points(key: str) -> list:
    return ((st.session_state.get(key) or {}).get("selection") or {}).get("points") or []


@callback
def receiver_from_map(n_head: int) -> None:
    """A click in the head map: that head becomes path patching's receiver."""
    for point in _selected_points("patch_heads"):
        picked = plots.grid_point_to_head(point, n_head)
        if picked is not None and point.get("curve_number", 1) == 1:
            set_value("c_recv", head_name(*picked))
            set_value("c_view", "paths")
            return


@callback
def open_node(names: list, node_curve: int, text: str) -> None:
    for point in _selected_points("circuit_graph"):
        node = plots.circuit_point_to_node(point, names, node_curve)
        head = plots.node_to_head(node) if node else None
        if head is not None:
            st.session_state[_OPEN_HEAD] = (head[0], head[1], text)
            return


# --- widgets ---------------------------------------------------------------------------------


def ioi_pairs_input(model) -> list[prompts.PromptPair]:
    """N generated indirect-object pairs, from a number and a seed."""
    n_col, seed_col = st.columns(2)
    n = synced(n_col.number_input, "c_n", "Pairs", 16, min_value=1, max_value=MAX_IOI,
               valid=lambda v: 1 <= int(v) <= MAX_IOI)
    seed = synced(seed_col.number_input, "c_seed", "Seed", 0, min_value=0,
                  max_value=2**31 - 1, valid=lambda v: 0 <= int(v) < 2**31)
    pairs = memo(prompts.ioi_pairs, model, n=int(n), seed=int(seed))
    st.caption(f"{len(pairs)} indirect-object pairs (ABBA and BABA templates), each with "
               f"its own target (the indirect object) and contrast (the subject); the "
               f"first: “{md_escape(pairs[0].clean)}”.")
    return pairs


def pairs_file_input() -> list[prompts.PromptPair] | None:
    """The pairs of an uploaded file (None until one is uploaded)."""
    upload = st.file_uploader("Pairs file (.csv or .jsonl: clean, corrupted, target, contrast)",
                              type=["csv", "jsonl"], key="_mv_pairs_file")
    if upload is None:
        st.info("Upload a file of prompt pairs to patch over them.")
        return None
    data = upload.getvalue()
    pairs = memo(prompts.read_pairs, data, name=upload.name)
    st.caption(f"{len(pairs)} pairs from the file.")
    return pairs


def downloads(result: patching.PatchingResult, name: str, file_stem: str) -> None:
    """A patching result as CSV and every pair's values as .npz."""
    stem = export.safe_filename(file_stem, "patching", name, result.direction)
    left, right = st.columns(2)
    with left:
        download_csv(partial(export.patching_csv, result), stem + ".csv",
                     "Patching results as CSV", key=f"dl_{name}_csv")
    with right:
        download_bytes(partial(export.npz_bytes, result.to_npz_dict()), stem + ".npz",
                       "⬇ Every pair's values (.npz)", key=f"dl_{name}_npz")


# --- an encoder-decoder ----------------------------------------------------------------------


def encoder_decoder_view(selection: Selection, model) -> None:
    """An encoder-decoder: the sidebar's source is clean, a corrupted source is typed here,
    and every head of every kind is patched between the two runs of one target."""
    example = next((e for e in EXAMPLES.values() if e["text"] == selection.text), {})
    st.caption("The sidebar's source is the clean one; type a corrupted source that differs "
               "in one word (or digit). The decoder reads the same target after both: the "
               "sidebar's target, or the model's own output for the clean source.")
    corrupted = synced(st.text_input, "c_corrupted", "Corrupted source",
                       example.get("corrupted", ""),
                       placeholder="the source with one word changed")
    if not corrupted.strip():
        st.info("Type a corrupted source above to patch.")
        st.stop()
    found = memo(first_divergence, model, clean=selection.text, corrupted=corrupted,
                 target=selection.target)
    if found is None:
        st.info("The decoder writes the same tokens after both sources (teacher-forced on "
                "the clean target): the corruption changes no answer, so there is nothing "
                "to patch. Change another word.")
        st.stop()
    position, clean_token, corrupted_token = found
    shown = model.display_tokens([clean_token, corrupted_token])
    direction = synced(st.radio, "c_direction", "Patch", "denoise",
                       options=["denoise", "noise"], horizontal=True,
                       format_func={"denoise": "clean into corrupted (denoising)",
                                    "noise": "corrupted into clean (noising)"}.get,
                       help=DIRECTION_HELP)
    metric = TargetMetric(position, clean_token, corrupted_token)
    st.markdown(f"**Measured:** logit('{md_escape(shown[0])}') − "
                f"logit('{md_escape(shown[1])}') at target position {position}, the first "
                f"token the corruption changes.")
    result = run_or_wait(
        activation_patching_seq2seq, model, selection.text, corrupted, selection.target, metric,
        direction, name="patch_seq2seq", label="Patching every head of every kind",
        auto=seq2seq_runs_by_itself(model),
        button=f"Patch every head ({total_heads(model)} runs)")
    if result is None:
        st.stop()
    st.caption(f"Clean run: {result.clean:.3f} (1 on the scale); corrupted run: "
               f"{result.corrupted:.3f} (0). Each cell: the metric with one head's output (its "
               f"z, before W_O) taken from the other run, and how far that moved it: "
               f"**red** toward the clean run (+1 the whole way), **blue** toward the corrupted "
               f"one (−1). The three maps share one colour scale, −1 to 1.")
    for note in result.notes:
        st.caption(note)
    for column, (kind, values) in zip(figure_columns(3), result.effect.items()):
        with column:
            fig = plots.layer_head_heatmap(values, KIND_TITLES[kind], words.SCALE_TITLE,
                                           fmt=".2f", diverging=True, zmax=FIXED_SPAN)
            show_figure(fig, key=f"patch_{kind}", share=column_share(1 / 3),
                        alt=f"Patching effect of every {kind} head")
    st.markdown("**The heads that carry the difference**, of every kind")
    st.dataframe(seq2seq_table(result.strongest(), direction), hide_index=True, width="stretch")
    download_csv(partial(export.table_csv, result.table()),
                 export.safe_filename(selection.file_stem, "patching", direction, suffix=".csv"),
                 "Every head as CSV", key="dl_patch_seq2seq")
    st.caption(NUMBERING)
    caveat()


# --- the drawn circuit's heads, tested -------------------------------------------------------


def circuit_test_view(model, pairs, kind: str, found) -> None:
    """Faithfulness and necessity of the drawn circuit's heads (analysis.circuit_tests), with
    the ablation the person picks, over every pair, the pairs' corrupted prompts as the
    reference distribution."""
    heads = circuit_heads(model, found)
    st.markdown("**The circuit's heads, tested** (Wang et al. 2023: ablate every head outside "
                "the circuit, then the circuit's heads alone)")
    if not heads:
        st.caption("The drawn circuit holds no attention head (only the embeddings, MLPs "
                   "and the logits): there is nothing to ablate.")
        return
    ablation = synced(st.radio, "c_ablation", "Ablation", "mean", options=list(ABLATIONS),
                      format_func=ABLATIONS.get, horizontal=True)
    tested = computed(circuit_test, model, pairs, heads, kind, ablation,
                      label=f"Ablating inside and outside the {len(heads)}-head circuit")
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
        st.caption(md_escape(note))


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
            f"{tested.nothing_metric.mean():.3f} ({md_escape(tested.metric)}).{spread}")
