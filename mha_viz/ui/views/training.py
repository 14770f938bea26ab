"""The Training page's view: watch attention heads form across a training run's checkpoints:
the loss with the induction-head phase change marked, every head's role scores over steps, and
the maps at the step under a slider, which a play button walks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st

from ... import analysis as A
from ... import checkpoints, corpus, plots, ui
from ...core.errors import CheckpointNotFoundError
from ...analysis.heads import head_name
from ...models.series import BUNDLED_SERIES, checkpoint_series, load_checkpoint
from ..jobs import computed
from ..stores import memo
from ..messages import callback
from ..state import set_value, synced
from ..words import training as words

MAPS = ()  # the sets of maps the page reads (maps.sets): a run's checkpoints, not the sidebar's
INTRO = ("Every other page shows one frozen model. Here a model is shown **as it trained**: one "
         "checkpoint per step, each measured on the same inputs. In a two-layer model, "
         "suddenly, a **previous-token head** forms in layer 0 and an **induction head** in "
         "layer 1 that reads it; the loss on repeated text drops, and later tokens of a text "
         "become easier to predict than early ones: the phase change of Olsson et al. (2022), "
         "*In-context Learning and Induction Heads*.")
FOLDER_CHOICE = "folder"
SERIES_LABELS = {"induction-toy": "Bundled: 2-layer attention-only (induction-toy)",
                 "induction-toy-mlp": "Bundled: 2-layer with MLPs (induction-toy-mlp)",
                 FOLDER_CHOICE: "A folder of checkpoints…"}
N_TEXTS = 8  # paragraphs of the demo corpus, for a run that keeps no held-out texts
DEMO_ABOUT = (f"the first {N_TEXTS} paragraphs of the demo corpus (Python's documentation), "
              f"not known to be like this run's training text")
PLAY_SECONDS = 0.7  # each step's frame while playing (six charts drawn again)
SCORES = {"induction": "Induction score", "previous_token": "Previous-token score",
          "duplicate_token": "Duplicate-token score", "entropy": "Entropy (nats)",
          "sink_mass": "Mass on the first token"}
STEP = "tstep"
PREPARED = "dynamics.npz"  # a bundled run's dynamics on default_texts(), the default probe
# beside a bundled run: its induction head's composition at every checkpoint, on the probe's
# first sequence (python -m mha_viz dynamics SERIES --out ... --composition ...)
COMPOSITION = "composition.npz"
_PLAYING = "_mv_train_playing"  # while ▶ Play runs: the index of the step it shows next


def pick_series():
    """The sidebar's series choice -> CheckpointSeries (raises a SeriesError with the reason
    for an empty, mixed or misnamed folder)."""
    bar = st.sidebar
    synced(bar.toggle, "present", "Presentation mode", False,
           help="Large type and figures that fit one screen, for a projector.")
    choice = synced(bar.selectbox, "series", "Training run", "induction-toy",
                    options=[*BUNDLED_SERIES, FOLDER_CHOICE], format_func=SERIES_LABELS.get,
                    help="The two bundled runs were trained by mha-viz itself "
                         "(python -m mha_viz.toys.induction). A folder holds one checkpoint "
                         "folder per step (step1000/, checkpoint-2000/, ...), inside the "
                         "folders this server allows.")
    if choice != FOLDER_CHOICE:
        return _series(choice, None)
    folder = synced(bar.text_input, "sfolder", "Folder of step folders", "",
                    placeholder="/path/to/run").strip()
    if not folder:
        raise CheckpointNotFoundError("no folder given: type the path of a folder of "
                                      "checkpoint folders in the sidebar")
    return _series(folder, tuple(str(p) for p in checkpoints.allowed_dirs()))


def _series(name: str, allowed: tuple[str, ...] | None):
    from pathlib import Path

    return checkpoint_series(name, None if allowed is None else [Path(p) for p in allowed])


def default_texts() -> list[str]:
    return corpus.demo_texts(N_TEXTS)


def dynamics_of(series):
    """The series' TrainingDynamics, computed once (a job: progress, Cancel) and shared; a
    bundled run's are shipped beside it (PREPARED, what the same call gave: a slow test
    checks them against transformers' own model), so a class does not wait for 30
    checkpoints. The texts: the run's held-out texts of its training distribution when it
    keeps them (held_out_texts.json), else the demo corpus's first paragraphs."""
    if series.name in BUNDLED_SERIES and series.root is not None and \
            (series.root / PREPARED).is_file():
        return memo(A.TrainingDynamics.load, series.root / PREPARED)
    label = f"Measuring {len(series)} checkpoints, one at a time"
    if series.held_out is not None:
        return computed(A.training_dynamics, series, label=label)
    return computed(A.training_dynamics, series, memo(default_texts), texts_about=DEMO_ABOUT,
                    label=label)


def composition_of(series, dynamics, reader: tuple[int, int]):
    """Head `reader`'s composition at every checkpoint on the probe's first sequence: a
    bundled run's is shipped beside it (COMPOSITION: a slow test checks it against the
    function), any other run's is measured once, a checkpoint at a time (a job: progress,
    Cancel; None when cancelled)."""
    shipped = None if series.root is None else series.root / COMPOSITION
    if series.name in BUNDLED_SERIES and shipped is not None and shipped.is_file():
        found = memo(A.CompositionOverTraining.load, shipped)
        if (found.layer, found.head) == tuple(reader):
            return found
    info = dynamics.info
    return computed(A.composition_over_training, series, *reader, seq_len=info["seq_len"],
                    seed=info["seed"],
                    label=f"Measuring {head_name(*reader)}'s composition at {len(series)} "
                          f"checkpoints, one at a time")


def composition_section(series, dynamics, steps: list[int], phase: int | None,
                        step: int) -> None:
    """The induction head's K-composition over the steps beside its induction score, the
    phase change and the step under the slider marked, and what it shows in words."""
    reader = dynamics.induction_head()
    if reader is None:
        st.caption("This model has one layer: no head reads another's output, so there is "
                   "no composition between heads to show.")
        return
    found = composition_of(series, dynamics, reader)
    if found is None:
        st.info("Cancelled: change the run or reload the page to measure the composition.")
        return
    previous = dynamics.previous_token_head(reader[0])
    name = head_name(*reader)
    shares = found.sources("k", words.SHOWN_SOURCE)
    labels, named = words.share_labels(list(shares), found.other.get("k", {}), reader,
                                       previous, dynamics.n_layer)
    largest, share = found.largest("k")
    ui.show_figure(plots.composition_over_steps(
        steps, dynamics.heads["induction"][:, reader[0], reader[1]],
        words.score_label(*reader), {labels[s]: v for s, v in shares.items()}, named, phase,
        step,
        title=f"How {name} became an induction head: where its keys come from",
        y_title="score or share"), key="train_composition",
        alt=f"{name}'s K-composition over training")
    st.caption(words.composition_caption(
        found, reader, previous, (words.source_words(dynamics.n_layer).get(largest, largest),
                                  share), phase))


def probe_map(series, index: int, layer: int, head: int, seq_len: int, n_seqs: int,
              seed: int) -> tuple[np.ndarray, list[str]]:
    """Head (layer, head)'s map on the probe's first sequence at checkpoint `index`, and
    its tokens (one checkpoint loaded, kept small: the maps of one short input)."""
    checkpoint = series.checkpoints[index]
    trace = memo(_probe_trace, checkpoint, seq_len=seq_len, n_seqs=n_seqs, seed=seed)
    return trace.head_map(layer, head), list(trace.display_tokens)


def _probe_trace(checkpoint, seq_len: int, n_seqs: int, seed: int):
    model = load_checkpoint(checkpoint)
    ids, _ = A.repeated_random_tokens(model, seq_len, n_seqs, seed)
    return model.trace_ids(ids[0])


def loss_curves(dynamics) -> dict[str, np.ndarray]:
    """The first figure's curves by label. A curve that may rise over training says why in
    its label: random tokens cannot be predicted, and text unlike the training data can get
    harder as the model fits its own."""
    held_out = bool(dynamics.info.get("held_out"))
    text = ("training loss on held-out text of its training distribution" if held_out else
            "loss on the texts\n(not known to be like its training text: such text may get "
            "harder)")
    return {text: dynamics.curves["text_loss"],
            "probe's repeated copy of R\n(predictable from the first copy)":
                dynamics.curves["probe_loss_repeated"],
            "probe's first copy of R\n(random tokens: nothing can predict them, it may rise)":
                dynamics.curves["probe_loss_first"]}


def icl_label(dynamics) -> str:
    info = dynamics.info
    return f"ICL score: loss at token {info['icl_late']} − loss at token {info['icl_early']}"


def icl_caption(dynamics) -> str:
    """What the ICL score compares, on which texts, and how its positions were scaled."""
    info = dynamics.info
    early, late, context = info["icl_early"], info["icl_late"], info.get("icl_context")
    scaled = (f"Olsson et al. (2022) compare token 500 with token 50 of 8,192-token "
              f"contexts; here token {late} with token {early}"
              + (f", scaled to the {context}-token texts (the same ratio)" if context and
                 late < 500 else "") + ". ")
    if info.get("held_out"):
        return (f"{scaled}On the held-out texts above, of the run's own training "
                f"distribution, as Olsson et al. measure it: it falls when the model starts to "
                f"use what came before, at the phase change.")
    texts = info.get("texts") or f"{info.get('n_texts', 0)} texts"
    return (f"{scaled}On {texts}: these are not known to be like the run's training text, so "
            f"it need not fall.")


def phase_step(dynamics) -> int | None:
    index = dynamics.phase_change()
    return None if index is None else int(dynamics.steps[index])


def step_slider(steps: list[int], frame: int | None) -> int:
    """The step under the slider (synced: in the URL, kept across pages). While ▶ Play runs
    (frame: the index of the step drawn) a slider that cannot be moved stands in for it,
    at the frame's step: the synced one comes back, at the step Play stopped on, after."""
    if frame is not None:
        return int(st.select_slider("Training step", options=steps, value=steps[frame],
                                    format_func=lambda s: f"{s:,}", disabled=True,
                                    help="▶ Play is walking the steps: ■ Stop holds one."))
    return int(synced(st.select_slider, STEP, "Training step", steps[-1], options=steps,
                      valid=lambda v: v in steps, parse=int,
                      format_func=lambda s: f"{s:,}",
                      help="Every chart marks this step and the maps below show its "
                           "checkpoint; ▶ Play walks every step from the first."))


@callback
def start_playing(first: int) -> None:
    st.session_state[_PLAYING] = 0
    set_value(STEP, first)


@callback
def stop_playing() -> None:
    st.session_state.pop(_PLAYING, None)


def playing_frame(steps: list[int]) -> int | None:
    """While ▶ Play runs: the index of the step this run draws, the next run's already
    counted (a frame cut short by the next one is skipped, never repeated); the slider is
    set to it before it is drawn, so the slider and every chart's marker move with the maps.
    None when not playing."""
    index = st.session_state.get(_PLAYING)
    if index is None or not 0 <= index < len(steps):
        st.session_state.pop(_PLAYING, None)
        return None
    if index + 1 < len(steps):
        st.session_state[_PLAYING] = index + 1
    else:  # the last frame ends the walk, leaving the slider on the last step
        st.session_state.pop(_PLAYING, None)
    set_value(STEP, steps[index])
    return int(index)


def play_control(where, steps: list[int], index: int | None) -> None:
    """▶ Play, or while playing ■ Stop with the step being drawn beside it."""
    if index is None:
        where.button("▶ Play", key="train_play", width="stretch", on_click=start_playing,
                     args=(steps[0],), help="Walk every checkpoint from the first, "
                                            f"{PLAY_SECONDS:g} s each: the slider, every "
                                            f"chart's step marker and the maps move together.")
        return
    where.button("■ Stop", key="train_stop", width="stretch", on_click=stop_playing,
                 help="Stop on the step shown.")
    where.markdown(f"**Playing: step {steps[index]:,}** ({index + 1} of {len(steps)})")


def named_heads(dynamics, score: str, k: int = 3) -> list[tuple[int, int]]:
    """The heads to name on a score's curves: the k with the highest peak (for entropy: the
    k with the lowest value at the last step, the most focused)."""
    if score == "entropy":
        return A.rank_heads(dynamics.heads[score][-1], descending=False)[:k]
    return dynamics.strongest_heads(score, k)


def show() -> None:
    with ui.guard():
        series = pick_series()
        st.caption(f"**{ui.md_escape(series.name)}**: {ui.md_escape(series.source)}; "
                   f"{len(series)} checkpoints, steps {series.steps[0]:,} to {series.steps[-1]:,}.")
        dynamics = dynamics_of(series)
        if dynamics is None:
            st.info("Cancelled: change the run or reload the page to measure it again.")
            st.stop()
        # ▶ Play: the part of the page under the slider runs again every PLAY_SECONDS, each
        # run one frame (a fragment; reruns of the whole script would stack the old charts
        # under the new until the last one ends)
        timed = _PLAYING in st.session_state
        st.fragment(ui.as_page_run(steps_view),  # its reruns run without app.py
                    run_every=PLAY_SECONDS if timed else None)(series, dynamics, timed)


@dataclass(frozen=True)
class Frame:
    """What every section under the slider reads: the run, its dynamics, the steps, the
    phase change and the step shown (frame: the step ▶ Play shows now, or None)."""
    series: object
    dynamics: object
    steps: list[int]
    phase: int | None
    step: int
    frame: int | None

    @property
    def info(self) -> dict:
        return self.dynamics.info


def frame_of(series, dynamics) -> Frame:
    """The step under the slider (or ▶ Play's), with the slider and the play button."""
    steps = [int(s) for s in dynamics.steps]
    frame_index = playing_frame(steps)
    step_col, play_col = st.columns([5, 1], vertical_alignment="bottom")
    with step_col:
        step = step_slider(steps, frame_index)
    play_control(play_col, steps, frame_index)
    return Frame(series, dynamics, steps, phase_step(dynamics), step, frame_index)


def curves_section(f: Frame) -> None:
    """The loss and the in-context learning score, the phase change and the step marked."""
    dynamics, phase = f.dynamics, f.phase
    ui.show_figure(plots.training_curves(f.steps, loss_curves(dynamics), phase, f.step,
                                         training=f.series.training_loss()), key="train_loss")
    st.caption(words.probe_caption(phase, ui.md_escape(f.info["probe"]),
                                   ui.md_escape(f.info.get("texts", ""))))
    ui.show_figure(plots.training_curves(
        f.steps, {icl_label(dynamics): dynamics.curves["icl_score"]}, phase, f.step,
        # the reading in the title: an axis title this long was cut at 1280x720
        title="In-context learning score (lower: later tokens gain more)", y_title="nats"),
        key="train_icl")
    st.caption(ui.md_escape(icl_caption(dynamics)))


def composition_step_section(f: Frame) -> None:
    composition_section(f.series, f.dynamics, f.steps, f.phase, f.step)


def heads_section(f: Frame) -> None:
    """Each head's score over the steps, every head's at the step and one head on the probe
    at the step."""
    dynamics, step = f.dynamics, f.step
    score = ui.synced(st.selectbox, "tscore", "Score", "induction", options=list(SCORES),
                      format_func=SCORES.get)
    named = named_heads(dynamics, score)
    ui.show_figure(plots.head_scores_over_steps(f.steps, dynamics.heads[score], SCORES[score],
                                                named, f.phase, step),
                   key="train_heads")
    st.caption(words.named_caption(", ".join(plots.head_name(*h) for h in named)))
    best = dynamics.strongest_heads("induction", 1)[0]
    chosen = ui.synced(st.selectbox, "thead", "Head shown on the probe", plots.head_name(*best),
                       options=A.head_names(dynamics.n_layer, dynamics.n_head))
    layer, head = A.parse_head_name(chosen)
    k = f.steps.index(step)
    left, right = st.columns(2)
    with left:
        ui.show_figure(plots.layer_head_heatmap(
            dynamics.heads[score][k], f"{SCORES[score]} at step {step:,}",
            SCORES[score], zmin=0.0, zmax=max(1.0, float(dynamics.heads[score].max()))
            if score != "entropy" else None), key="train_grid", share=0.5)
    with right:
        weights, tokens = probe_map(f.series, k, layer, head, f.info["seq_len"],
                                    f.info["n_seqs"], f.info["seed"])
        ui.show_figure(plots.head_heatmap(
            weights, tokens, f"{chosen} on the probe at step {step:,}", causal=True),
            key="train_probe", share=0.5)
    st.caption(words.PROBE_MAP)
    ui.caveat()


SECTIONS = [curves_section, composition_step_section, heads_section]


def steps_view(series, dynamics, timed: bool) -> None:
    """Everything under the slider: the step, ▶ Play, the curves with the step marked and
    the maps at the step. timed: whether it runs again by itself (▶ Play); when that no
    longer matches whether Play runs, the whole page runs again to start or stop it."""
    with ui.guard():
        if timed != (_PLAYING in st.session_state):
            st.rerun(scope="app")
        frame = frame_of(series, dynamics)
        ui.show_sections(frame, SECTIONS)
        if frame.frame is not None and _PLAYING not in st.session_state:
            st.rerun(scope="app")  # the last frame: stop running again by itself
