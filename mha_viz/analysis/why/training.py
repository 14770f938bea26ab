"""Composition across training: one head's composition on one input at every checkpoint of
a series (docs/analyses.md, "Heads across training" and "Why a head attends"), the curve
beside the induction score: Olsson et al. 2022 watch the induction head form by
K-composition with a previous-token head, and this measures that composition at each step.
The result saves to an .npz and reopens (the Training page opens a bundled run's from the
file beside it, which `python -m mha_viz dynamics SERIES --composition OUT` writes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...core.errors import InputError, LoadError
from ...models.series import checkpoint_series, load_checkpoint
from ..dynamics import probe_length
from ..heads import head_name
from ..roles import probe_description, repeated_random_tokens
from .composition import KINDS, text_composition
from .stream import encoded_ids

FORMAT = "mha-viz composition over training 1"


@dataclass
class CompositionOverTraining:
    """steps [S]; q, k, v [S, L, H]: each earlier head's share of head (layer, head)'s
    scores (Q, K) and output (V) on `ids` at each checkpoint (text_composition); other:
    {kind: {source: [S]}} the shares of the sources that are not heads (the embeddings,
    each MLP, the bias); input: in words."""
    steps: np.ndarray
    layer: int
    head: int
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    ids: list[int]
    input: str
    other: dict = field(default_factory=dict)

    def share(self, kind: str, layer: int, head: int) -> np.ndarray:
        """[S] the share of head (layer, head) in the composition `kind` at every step."""
        if kind not in KINDS:
            raise InputError(f"composition is one of {', '.join(KINDS)}, got {kind!r}")
        values = getattr(self, kind)
        if not (0 <= int(layer) < self.layer and 0 <= int(head) < values.shape[2]):
            raise InputError(f"head L{layer}.H{head} is not before layer {self.layer}")
        return values[:, int(layer), int(head)]

    def sources(self, kind: str, at_least: float = 0.0) -> dict[str, np.ndarray]:
        """[S] shares by source: every earlier head's (named L0.H0, ...), then each source
        that is not a head (other) whose share reaches at_least at some step."""
        found = {head_name(m, h): self.share(kind, m, h) for m in range(self.layer)
                 for h in range(getattr(self, kind).shape[2])}
        found.update({name: np.asarray(values) for name, values in
                      self.other.get(kind, {}).items() if np.max(values) >= at_least})
        return found

    def largest(self, kind: str, index: int = -1) -> tuple[str, float]:
        """The source (head or not) with the largest share at checkpoint `index`, and it."""
        return max(((name, float(values[index])) for name, values in
                    self.sources(kind).items()), key=lambda item: item[1])

    def save(self, path) -> Path:
        """Write every array to an .npz (no pickled object: the rest is JSON text)."""
        path = Path(path)
        arrays = {"steps": np.asarray(self.steps, dtype=np.int64)}
        arrays.update({kind: np.asarray(getattr(self, kind), dtype=np.float64)
                       for kind in KINDS})
        arrays.update({f"other/{kind}/{source}": np.asarray(values, dtype=np.float64)
                       for kind, sources in self.other.items()
                       for source, values in sources.items()})
        arrays["info"] = np.array(json.dumps({"format": FORMAT, "layer": int(self.layer),
                                              "head": int(self.head), "ids": self.ids,
                                              "input": self.input}))
        with path.open("wb") as handle:
            np.savez_compressed(handle, **arrays)
        return path

    @classmethod
    def load(cls, path) -> "CompositionOverTraining":
        """Reopen what save() wrote; anything else is refused with a message."""
        refused = InputError(f"'{Path(path).name}' is not composition over training written "
                             f"by mha-viz")
        try:
            with np.load(Path(path), allow_pickle=False) as data:
                info = json.loads(str(data["info"]))
                steps = data["steps"]
                maps = [data[kind] for kind in KINDS]
                other = {}
                for name in data.files:
                    if name.startswith("other/"):
                        _, kind, source = name.split("/", 2)
                        other.setdefault(kind, {})[source] = data[name]
        except (OSError, ValueError, KeyError, EOFError):
            raise refused from None
        if info.get("format") != FORMAT or any(m.ndim != 3 or m.shape[0] != steps.shape[0]
                                               for m in maps):
            raise refused
        return cls(steps, int(info["layer"]), int(info["head"]), *maps,
                   ids=[int(i) for i in info["ids"]], input=str(info["input"]), other=other)


def composition_over_training(series, layer: int, head: int, ids=None,
                              seq_len: int | None = None, seed: int = 0, local_dirs=None,
                              progress=None) -> CompositionOverTraining:
    """Head (layer, head)'s Q-, K- and V-composition with every earlier head at each
    checkpoint of a series (a CheckpointSeries or what checkpoint_series takes), one
    checkpoint loaded at a time, on token ids or a text (tokenized once, by the first
    checkpoint; default: the first sequence of the repeated-random-tokens probe, BOS R R,
    seq_len as training_dynamics takes it, drawn with `seed`, where an induction head does
    its work). progress(done, total), if given, is called after each checkpoint."""
    series = checkpoint_series(series, local_dirs)
    steps, maps = [], {kind: [] for kind in KINDS}
    other: dict[str, dict[str, list[float]]] = {kind: {} for kind in KINDS}
    described = "the given token ids"
    for done, checkpoint in enumerate(series.checkpoints, start=1):
        try:
            model = load_checkpoint(checkpoint)
        except LoadError as error:
            raise type(error)(f"step {checkpoint.step} ({checkpoint.name}): {error}") from None
        if ids is None:
            length = probe_length(model.info.max_positions, seq_len)
            ids = repeated_random_tokens(model, length, 1, seed)[0][0]
            described = f"the probe's first sequence ({probe_description(length, 1, seed)})"
        elif isinstance(ids, str):
            described = f"the text {ids[:40]!r}" + ("..." if len(ids) > 40 else "")
            ids = encoded_ids(model, ids)[0]
        found = text_composition(model, ids, layer, head)
        del model  # one model held at a time
        steps.append(checkpoint.step)
        for kind in KINDS:
            maps[kind].append(found.of(kind))
            for source, share in found.other[kind].items():
                other[kind].setdefault(source, []).append(share)
        if progress is not None:
            progress(done, len(series))
    return CompositionOverTraining(np.asarray(steps, dtype=np.int64), int(layer), int(head),
                                   *(np.stack(maps[kind]) for kind in KINDS),
                                   ids=[int(i) for i in ids], input=described,
                                   other={kind: {source: np.asarray(values)
                                                 for source, values in sources.items()}
                                          for kind, sources in other.items()})
