"""A dictionary's site read from the engine: one forward up to the site's layer, the point
captured, in the layout the dictionary reads ([..., d_in]; hook_z as heads concatenated,
TransformerLens's "(n_head d_head)" order)."""

from __future__ import annotations

from typing import Iterable, Iterator

import torch

from ...core.errors import InputError
from ...dictionaries import SITES, check_site, hook_name_of
from ...engine.interventions import Interventions, run_with_hooks
from ...models.segments import iter_segments

# Position 0 of a segment is where causal models park attention (a sink: its stream is
# unlike every other position's, often by orders of magnitude); training and the quality
# figures leave it out, as SAELens's trainers commonly leave out the BOS.
SKIPPED_POSITIONS = 1


def check_model_site(model, site: str, layer) -> tuple[str, int]:
    check_site(site)
    info = model.info
    if getattr(info, "encoder_decoder", False) or not hasattr(model.network, "blocks"):
        raise InputError("dictionaries read the stack of a decoder-only or encoder-only "
                         "model; this one is an encoder-decoder")
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < info.n_layer:
        raise InputError(f"layer must be 0..{info.n_layer - 1}, got {layer!r}")
    return site, layer


def site_activations(model, ids: torch.Tensor, sites) -> list[torch.Tensor]:
    """[[B, T, d_in] float32 for each (site, layer)] for token ids [B, T] (one length),
    from one forward of the layers up to the last layer asked."""
    points = [(SITES[site][1], layer) for site, layer in sites]
    hooks = Interventions(capture=points)
    network = model.network
    with torch.inference_mode():
        run_with_hooks(network, ids.to(network.device), hooks,
                       stop=max(layer for _, layer in sites) + 1)
    found = []
    for point in points:
        value = hooks.captured[point]
        if point[0] == "z":  # [B, H, T, d_k] -> [B, T, H * d_k]
            value = value.transpose(1, 2).reshape(value.shape[0], value.shape[2], -1)
        found.append(value.float().cpu())
    return found


def activation_rows(model, texts: Iterable[str], sites, seg_len: int = 128,
                    batch_segments: int = 16, max_tokens: int | None = None,
                    skip_segments: int = 0, counter: dict | None = None
                    ) -> Iterator[list[torch.Tensor]]:
    """The activations of each (site, layer) over a stream of texts, [[n, d_in] per site] a
    batch of segments at a time (position 0 of every segment left out; every site's rows
    are the same tokens in the same order): texts cut as the corpus cuts them
    (models.segments), never all held at once. skip_segments: segments already used (a
    resumed run); counter["segments"] / ["tokens"] follow along."""
    sites = [check_model_site(model, site, layer) for site, layer in sites]
    counter = {} if counter is None else counter
    counter.setdefault("segments", skip_segments)
    counter.setdefault("tokens", 0)
    pending: list[list[int]] = []
    for index, segment in enumerate(iter_segments(model, texts, seg_len)):
        if index < skip_segments:
            continue
        pending.append(segment)
        if len(pending) >= batch_segments:
            yield from _run_batch(model, pending, sites, counter)
            pending = []
        if max_tokens is not None and counter["tokens"] >= max_tokens:
            return
    if pending:
        yield from _run_batch(model, pending, sites, counter)


def _run_batch(model, segments: list[list[int]], sites, counter):
    by_length: dict[int, list[list[int]]] = {}
    for segment in segments:
        by_length.setdefault(len(segment), []).append(segment)
    for length, group in sorted(by_length.items()):
        if length <= SKIPPED_POSITIONS:
            continue
        values = site_activations(model, torch.tensor(group, device="cpu"), sites)
        rows = [v[:, SKIPPED_POSITIONS:].reshape(-1, v.shape[-1]) for v in values]
        counter["segments"] += len(group)
        counter["tokens"] += rows[0].shape[0]
        yield rows


class RowCache:
    """A run's activations kept on disk (float16, safetensors chunks of about CHUNK_ROWS
    rows: {hook name: [n, d_in]}), so later epochs read them instead of running the model
    again. meta.json says which sites, segment length and model wrote them, and "complete"
    once the stream ended: a later run with the same settings reads a complete cache whole."""

    CHUNK_ROWS = 4096

    def __init__(self, folder, model_name: str, sites, seg_len: int, max_tokens):
        from pathlib import Path

        self.folder = Path(folder)
        self.keys = [hook_name_of(site, layer) for site, layer in sites]
        self.identity = {"model": model_name, "sites": [list(s) for s in sites],
                         "seg_len": int(seg_len), "max_tokens": max_tokens}

    def _meta(self) -> dict:
        import json

        path = self.folder / "meta.json"
        try:
            return json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, ValueError):
            return {}

    @property
    def complete(self) -> bool:
        meta = self._meta()
        return bool(meta.get("complete")) and all(
            meta.get(key) == value for key, value in self.identity.items())

    def chunks(self) -> list:
        return sorted(self.folder.glob("rows-*.safetensors"))

    def read(self, counter: dict) -> Iterator[list[torch.Tensor]]:
        from safetensors.torch import load_file

        for path in self.chunks():
            tensors = load_file(str(path))
            rows = [tensors[key].float() for key in self.keys]
            counter["tokens"] = counter.get("tokens", 0) + rows[0].shape[0]
            yield rows

    def write(self, stream: Iterator[list[torch.Tensor]]) -> Iterator[list[torch.Tensor]]:
        """Pass the stream through, keeping its rows in chunks; marked complete at its end."""
        import json

        from safetensors.torch import save_file

        self.folder.mkdir(parents=True, exist_ok=True)
        for old in self.chunks():
            old.unlink()
        (self.folder / "meta.json").write_text(json.dumps({**self.identity, "complete": False}))
        pending, count, index = [[] for _ in self.keys], 0, 0
        for rows in stream:
            for kept, value in zip(pending, rows):
                kept.append(value)
            count += rows[0].shape[0]
            if count >= self.CHUNK_ROWS:
                save_file({k: torch.cat(v).half().contiguous() for k, v in zip(self.keys, pending)},
                          str(self.folder / f"rows-{index:05d}.safetensors"))
                pending, count, index = [[] for _ in self.keys], 0, index + 1
            yield rows
        if count:
            save_file({k: torch.cat(v).half().contiguous() for k, v in zip(self.keys, pending)},
                      str(self.folder / f"rows-{index:05d}.safetensors"))
        (self.folder / "meta.json").write_text(json.dumps({**self.identity, "complete": True}))
