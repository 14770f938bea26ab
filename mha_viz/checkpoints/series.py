"""A series of checkpoints of one training run, as one object (CheckpointSeries): a folder of
step folders (step1000/, checkpoint-2000/, ...), a list of checkpoint folders, a bundled run
("induction-toy", "induction-toy-mlp": trained by mha_viz.toys.induction), or a hub id whose
revisions are steps (Pythia's step143000 branches), listed when the hub can be reached.

A checkpoint's step is read from its folder's name (or revision's), else from the
trainer_state.json the Hugging Face Trainer writes into it (global_step). Only where each
checkpoint is and what it is are read here (config.json): nothing is loaded, so a series
holds no model; the analysis layer loads one checkpoint at a time.

Beside the checkpoints a run may keep held_out_texts.json, {"about": words, "texts": [...]}:
texts of its training distribution it never trained on (the bundled runs do), on which the
training dynamics measure the loss and the in-context learning score.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import CheckpointNotFoundError, LoadError, OfflineError

# name -> (folder inside the mha_viz package, description)
BUNDLED_SERIES = {
    "induction-toy": ("bundled/induction-toy", "a two-layer attention-only transformer "
                      "(GPT-NeoX format) trained by mha-viz in the open on repeated passages "
                      "of characters, half from Python's documentation, half random "
                      "(mha_viz/toys/induction.py)"),
    "induction-toy-mlp": ("bundled/induction-toy-mlp", "the same two-layer transformer with "
                          "MLPs, trained by mha-viz on the same text and seed "
                          "(mha_viz/toys/induction.py)"),
}
# step1000, step_1000, checkpoint-2000, global_step300, iter_0004000, ckpt-5, 1500
STEP_NAME = re.compile(r"^(?:step|checkpoint|global_step|iter|ckpt|revision)?[-_]?(\d+)$",
                       re.IGNORECASE)
STATE_FILE = "trainer_state.json"
HELD_OUT_FILE = "held_out_texts.json"
HELD_OUT_MAX_BYTES = 4 << 20  # a visitor's folder is read: no larger file is opened
NAMES_HINT = ("folders named by their step (step1000/, checkpoint-2000/, global_step300/), or "
              "each holding the trainer_state.json the Hugging Face Trainer writes")


class SeriesError(CheckpointNotFoundError):
    """A series that cannot be read: empty, misnamed, of mixed architectures, not found."""


@dataclass(frozen=True)
class Checkpoint:
    step: int
    location: str  # a folder, or a hub id
    revision: str | None = None  # the hub revision (branch) holding this step

    @property
    def name(self) -> str:
        return self.revision or Path(self.location).name

    def folder(self) -> Path:
        """Where its files are: the folder, or the hub revision downloaded into the cache."""
        if self.revision is None:
            return Path(self.location)
        return _hub_revision(self.location, self.revision)


@dataclass(frozen=True)
class CheckpointSeries:
    name: str
    checkpoints: tuple[Checkpoint, ...]  # in order of step
    source: str  # in words, for a page's caption
    model_type: str = ""  # when read ("" for a hub series before any is loaded)
    n_layer: int = 0
    n_head: int = 0
    training_log: Path | None = None  # a trainer_state.json with the training loss
    root: Path | None = None  # the folder holding the checkpoints (a local series)
    held_out: Path | None = None  # a held_out_texts.json (see the module docstring)

    @property
    def steps(self) -> list[int]:
        return [c.step for c in self.checkpoints]

    def __len__(self) -> int:
        return len(self.checkpoints)

    def training_loss(self) -> tuple[list[int], list[float]]:
        """(steps, loss) of the training run's own log (trainer_state.json's log_history),
        empty when the series has none."""
        if self.training_log is None:
            return [], []
        return read_training_loss(self.training_log)

    def held_out_texts(self) -> tuple[list[str], str] | None:
        """(texts, what they are in words) of the run's held_out_texts.json, None when it
        has none; a file that is not one gets a SeriesError saying so."""
        return None if self.held_out is None else read_held_out(self.held_out)


def read_held_out(path: Path) -> tuple[list[str], str]:
    bad = f"'{path.name}' must hold {{\"about\": text, \"texts\": [non-empty texts]}}"
    try:
        too_large = path.stat().st_size > HELD_OUT_MAX_BYTES
        found = None if too_large else json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise SeriesError(f"{bad}: it cannot be read as JSON") from None
    if too_large:
        raise SeriesError(f"'{path.name}' is over {HELD_OUT_MAX_BYTES >> 20} MB")
    texts = found.get("texts") if isinstance(found, dict) else None
    about = found.get("about", "") if isinstance(found, dict) else None
    if not isinstance(texts, list) or not texts or not isinstance(about, str) or not all(
            isinstance(t, str) and t.strip() for t in texts):
        raise SeriesError(bad)
    return texts, about or f"{len(texts)} held-out texts of the run"


def read_training_loss(path: Path) -> tuple[list[int], list[float]]:
    try:
        history = json.loads(Path(path).read_text(encoding="utf-8")).get("log_history") or []
        rows = [(int(r["step"]), float(r["loss"])) for r in history
                if isinstance(r, dict) and "loss" in r and "step" in r]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return [], []
    return [s for s, _ in rows], [v for _, v in rows]


def step_of(folder: Path) -> int | None:
    """The step of a checkpoint folder: from its name, else from its trainer_state.json."""
    found = STEP_NAME.match(folder.name)
    if found:
        return int(found.group(1))
    state = folder / STATE_FILE
    if state.is_file():
        try:
            step = json.loads(state.read_text(encoding="utf-8")).get("global_step")
        except (OSError, ValueError, AttributeError):
            return None
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            return step
    return None


def _shape_of(folder: Path) -> tuple[str, int, int]:
    from . import read_config

    config = read_config(folder)
    decoder = getattr(config, "decoder", config)  # an encoder-decoder's decoder stack
    return str(config.model_type), int(decoder.n_layer), int(decoder.n_head)


def _local(path: Path, local_dirs: list[Path] | None) -> Path:
    from . import _local_for_visitor

    if local_dirs is not None:
        return _local_for_visitor(path, local_dirs)
    if not path.exists():
        raise SeriesError(f"'{path}' does not exist: give a folder of checkpoint folders "
                          f"({NAMES_HINT})")
    return path.resolve()


def series_from_folders(folders, name: str = "", source: str = "",
                        local_dirs: list[Path] | None = None) -> CheckpointSeries:
    """A series from a list of checkpoint folders, each with its step in its name or its
    trainer_state.json. Refuses an empty list, a folder whose step cannot be read, two
    checkpoints of one step and checkpoints of different architectures or shapes."""
    folders = [_local(Path(f).expanduser(), local_dirs) for f in folders]
    if not folders:
        raise SeriesError(f"the series holds no checkpoints: give {NAMES_HINT}")
    checkpoints, shapes = [], {}
    for folder in folders:
        if not (folder / "config.json").is_file():
            raise SeriesError(f"'{folder.name}' is not a checkpoint folder: it has no "
                              f"config.json")
        step = step_of(folder)
        if step is None:
            raise SeriesError(f"the step of '{folder.name}' cannot be read: a series needs "
                              f"{NAMES_HINT}")
        try:
            shapes[folder.name] = _shape_of(folder)
        except LoadError as error:
            raise SeriesError(f"'{folder.name}' cannot be read: {error}") from None
        checkpoints.append(Checkpoint(step, str(folder)))
    distinct = sorted(set(shapes.values()))
    if len(distinct) > 1:
        first = next(n for n, s in shapes.items() if s == distinct[0])
        other = next(n for n, s in shapes.items() if s == distinct[1])
        raise SeriesError(
            f"the checkpoints are not of one model: '{first}' is {_shape_words(distinct[0])} "
            f"but '{other}' is {_shape_words(distinct[1])}. A series is one training run.")
    checkpoints.sort(key=lambda c: c.step)
    steps = [c.step for c in checkpoints]
    if len(set(steps)) < len(steps):
        twice = sorted({s for s in steps if steps.count(s) > 1})
        raise SeriesError(f"two checkpoints claim step {twice[0]}: a series has one "
                          f"checkpoint per step")
    model_type, n_layer, n_head = distinct[0]
    common = os.path.commonpath([str(f) for f in folders])
    log, held_out = Path(common) / STATE_FILE, Path(common) / HELD_OUT_FILE
    return CheckpointSeries(name or Path(common).name, tuple(checkpoints),
                            source or f"{len(checkpoints)} checkpoint folders", model_type, n_layer,
                            n_head, log if log.is_file() else None, Path(common),
                            held_out if held_out.is_file() else None)


def _shape_words(shape: tuple[str, int, int]) -> str:
    model_type, n_layer, n_head = shape
    return f"a {model_type} of {n_layer} layers x {n_head} heads"


def series_from_folder(folder, local_dirs: list[Path] | None = None,
                       name: str = "", source: str = "") -> CheckpointSeries:
    """The series in a folder: its sub-folders holding a config.json are the checkpoints."""
    folder = _local(Path(folder).expanduser(), local_dirs)
    if not folder.is_dir():
        raise SeriesError(f"'{folder.name}' is not a folder: a series is a folder of "
                          f"checkpoint folders ({NAMES_HINT})")
    if (folder / "config.json").is_file():
        raise SeriesError(f"'{folder.name}' is one checkpoint, not a series: give the folder "
                          f"that holds its step folders")
    try:
        children = sorted(p for p in folder.iterdir()
                          if p.is_dir() and (p / "config.json").is_file())
    except OSError:
        raise SeriesError(f"'{folder.name}' cannot be read") from None
    if not children:
        raise SeriesError(f"'{folder.name}' holds no checkpoints: a series is a folder of "
                          f"{NAMES_HINT}, each with config.json and the weights")
    return series_from_folders(children, name or folder.name,
                               source or f"the folder {folder.name}", local_dirs)


def _bundled_series(name: str) -> CheckpointSeries:
    relative, description = BUNDLED_SERIES[name]
    folder = Path(__file__).resolve().parents[1] / relative
    if not folder.is_dir():
        raise SeriesError(f"the bundled series '{name}' is missing from this installation "
                          f"(mha_viz/{relative}); train it again with python -m "
                          f"mha_viz.toys.induction")
    return series_from_folder(folder, None, name, description)


def bundled_run_checkpoint(name) -> "ResolvedCheckpoint | None":
    """A bundled run's name ("induction-toy") -> its last checkpoint, as load_model reads a
    checkpoint (the model picker lists the runs under their names); None for any other
    name."""
    text = str(name).strip().lower()
    if text not in BUNDLED_SERIES:
        return None
    from . import ResolvedCheckpoint

    last = _bundled_series(text).checkpoints[-1]
    return ResolvedCheckpoint(last.folder(), f"{BUNDLED_SERIES[text][1]}, its last checkpoint "
                              f"(step {last.step:,}; every checkpoint is on the Training page)",
                              text)


def hub_revisions(repo_id: str) -> list[tuple[int, str]]:
    """(step, revision) of a hub repository's branches named by their step, in order."""
    from huggingface_hub import constants, list_repo_refs

    from . import _hub_reachable

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or \
            not _hub_reachable(constants.ENDPOINT):
        raise OfflineError(
            f"the checkpoints of '{repo_id}' are its revisions on the Hugging Face hub, and "
            f"the hub cannot be reached: listing them needs the network. Offline, download "
            f"them once into folders named by their step and open that folder as a series.")
    try:
        refs = list_repo_refs(repo_id)
    except Exception as error:  # the hub library raises several kinds
        raise SeriesError(f"the revisions of '{repo_id}' could not be listed: "
                          f"{type(error).__name__}") from None
    found = [(int(m.group(1)), b.name) for b in refs.branches
             if (m := STEP_NAME.match(b.name))]
    return sorted(found)


def _hub_revision(repo_id: str, revision: str) -> Path:
    from huggingface_hub import snapshot_download

    from . import HUB_FILES

    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=HUB_FILES + [
            "model.safetensors", "model.safetensors.index.json", "model-*.safetensors"]))
    except Exception as error:
        raise SeriesError(f"could not download revision '{revision}' of '{repo_id}': "
                          f"{type(error).__name__}") from None


def hub_series(repo_id: str, steps=None) -> CheckpointSeries:
    """A hub repository's step revisions (all, or those of `steps`) as a series; each is
    downloaded when its turn comes."""
    found = hub_revisions(repo_id)
    if steps is not None:
        wanted = {int(s) for s in steps}
        found = [(s, r) for s, r in found if s in wanted]
    if not found:
        raise SeriesError(f"'{repo_id}' has no revisions named by their step (such as "
                          f"Pythia's step143000)" + (" among the steps asked for" if steps
                                                     is not None else ""))
    return CheckpointSeries(repo_id, tuple(Checkpoint(s, repo_id, r) for s, r in found),
                            f"Hugging Face hub '{repo_id}', {len(found)} revisions")


def checkpoint_series(spec, local_dirs: list[Path] | None = None, steps=None
                      ) -> CheckpointSeries:
    """A bundled series name, a folder of step folders, a list of checkpoint folders, or a
    hub id with step revisions (the hub must be reachable) -> CheckpointSeries.
    local_dirs: as load_model takes it (the app limits its visitors' folders)."""
    if isinstance(spec, CheckpointSeries):
        return spec
    if isinstance(spec, (list, tuple)):
        return series_from_folders(spec, local_dirs=local_dirs)
    text = str(spec).strip()
    if not text:
        raise SeriesError(f"no series given: a bundled one ({', '.join(BUNDLED_SERIES)}), a "
                          f"folder of {NAMES_HINT}, or a hub id with step revisions")
    if text.lower() in BUNDLED_SERIES:
        return _bundled_series(text.lower())
    from . import HUB_ID, _is_local_path

    path = Path(text).expanduser() if local_dirs is None else Path(text)
    if _is_local_path(text, path, local_dirs is not None) or not HUB_ID.match(text):
        return series_from_folder(path, local_dirs)
    return hub_series(text, steps)
