"""The Training page's glue: which series (a bundled run or a folder of step folders), its
dynamics computed once as a job with progress, one checkpoint's probe map, and the play loop
that walks the steps."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import streamlit as st

from .. import analysis as A
from .. import checkpoints, corpus
from ..core.errors import CheckpointNotFoundError
from ..models.series import BUNDLED_SERIES, checkpoint_series, load_checkpoint
from .compute import computed, memo
from .state import set_value, synced

FOLDER_CHOICE = "folder"
SERIES_LABELS = {"induction-toy": "Bundled: 2-layer attention-only (induction-toy)",
                 "induction-toy-mlp": "Bundled: 2-layer with MLPs (induction-toy-mlp)",
                 FOLDER_CHOICE: "A folder of checkpoints…"}
N_TEXTS = 8  # paragraphs of the demo corpus for entropy, sink mass, loss and the ICL score
PLAY_SECONDS = 0.5  # each step's frame while playing
SCORES = {"induction": "Induction score", "previous_token": "Previous-token score",
          "duplicate_token": "Duplicate-token score", "entropy": "Entropy (nats)",
          "sink_mass": "Mass on the first token"}
STEP = "tstep"
PREPARED = "dynamics.npz"  # a bundled run's dynamics on default_texts(), the default probe


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
    recomputes them), so a class does not wait for 30 checkpoints."""
    if series.name in BUNDLED_SERIES and series.root is not None and \
            (series.root / PREPARED).is_file():
        return memo(A.TrainingDynamics.load, series.root / PREPARED)
    return computed(A.training_dynamics, series, memo(default_texts),
                    label=f"Measuring {len(series)} checkpoints, one at a time")


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


def phase_step(dynamics) -> int | None:
    index = dynamics.phase_change()
    return None if index is None else int(dynamics.steps[index])


def step_slider(steps: list[int]) -> int:
    """The step under the slider (synced: in the URL, kept across pages)."""
    return int(synced(st.select_slider, STEP, "Training step", steps[-1], options=steps,
                      valid=lambda v: v in steps, parse=int,
                      format_func=lambda s: f"{s:,}",
                      help="The maps below show the checkpoint of this step; ▶ Play walks "
                           "every step from the first."))


def play(steps: list[int], draw: Callable[[int], None], where) -> None:
    """Walk every step, drawing each frame in `where` (placeholders the page made), then
    leave the slider at the last step."""
    for step in steps:
        with where.container():
            draw(step)
        time.sleep(PLAY_SECONDS)
    set_value(STEP, steps[-1])
    st.rerun()


def named_heads(dynamics, score: str, k: int = 3) -> list[tuple[int, int]]:
    """The heads to name on a score's curves: the k with the highest peak (for entropy: the
    k with the lowest value at the last step, the most focused)."""
    if score == "entropy":
        last = dynamics.heads[score][-1]
        order = np.argsort(last, axis=None, kind="stable")[:k]
        return [tuple(int(i) for i in np.unravel_index(o, last.shape)) for o in order]
    return dynamics.strongest_heads(score, k)
