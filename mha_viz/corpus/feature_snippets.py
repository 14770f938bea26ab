"""A corpus job for a dictionary's features: each feature's strongest activations over a
stream of texts, with the snippet around each (the max-activating examples of a feature's
dashboard). Texts are cut into segments as every corpus statistic cuts them; the k largest
per feature are kept as the segments go by (memory: features x k snippets), and results of
shards merge exactly (FeatureSnippets.merge: the k largest of the union).

    snippets = corpus.feature_snippets(model, sae, corpus.open_texts("texts.jsonl"),
                                       features=[12, 40], k=10)
    snippets.snippet(12, 0)        # (display tokens, the position it fires at, activation)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from ..analysis.features.activations import check_model_site, site_activations
from ..core.errors import InputError
from ..models.segments import iter_segments

BEFORE, AFTER = 12, 4  # tokens of context kept before and after the firing position


@dataclass
class FeatureSnippets:
    """features [F]; values [F, k] the k largest activations of each (descending; -inf where
    fewer fired); windows [F, k, BEFORE + 1 + AFTER] token ids around each (-1: outside the
    segment), the firing token at index BEFORE; n_segments, n_tokens read."""
    features: list[int]
    values: np.ndarray
    windows: np.ndarray
    n_segments: int = 0
    n_tokens: int = 0

    @classmethod
    def empty(cls, features: Sequence[int], k: int) -> "FeatureSnippets":
        return cls(list(features), np.full((len(features), k), -np.inf, dtype=np.float32),
                   np.full((len(features), k, BEFORE + 1 + AFTER), -1, dtype=np.int64))

    def merge(self, other: "FeatureSnippets") -> "FeatureSnippets":
        """The k largest of both, per feature (exact, in any order of merging)."""
        if other.features != self.features:
            raise InputError("snippets of different features do not merge")
        values = np.concatenate([self.values, other.values], 1)
        windows = np.concatenate([self.windows, other.windows], 1)
        order = np.argsort(-values, axis=1, kind="stable")[:, :self.values.shape[1]]
        return FeatureSnippets(self.features, np.take_along_axis(values, order, 1),
                               np.take_along_axis(windows, order[:, :, None], 1),
                               self.n_segments + other.n_segments,
                               self.n_tokens + other.n_tokens)

    def snippet(self, model, feature: int, rank: int = 0) -> tuple[list[str], int, float]:
        """(display tokens of the window, the firing position in it, the activation)."""
        row = self.features.index(int(feature))
        window = self.windows[row, int(rank)]
        kept = window >= 0
        position = int(kept[:BEFORE].sum())
        return (model.display_tokens(window[kept].tolist()), position,
                float(self.values[row, int(rank)]))


def feature_snippets(model, sae, texts: Iterable[str], features: Sequence[int] | None = None,
                     k: int = 10, seg_len: int = 128, batch_segments: int = 16,
                     max_segments: int | None = None,
                     progress: Callable[[int, int], None] | None = None) -> FeatureSnippets:
    """The k strongest activations of each of `features` (default: every feature) of
    dictionary `sae` over the texts, with their snippets (see the module docstring).
    progress(segments, tokens) after each batch; raising from it stops the run."""
    sae.check_model(model)
    check_model_site(model, sae.site, sae.layer)
    chosen = list(range(sae.d_sae)) if features is None else [int(f) for f in features]
    if not chosen or min(chosen) < 0 or max(chosen) >= sae.d_sae:
        raise InputError(f"features must be among 0..{sae.d_sae - 1}")
    if int(k) < 1:
        raise InputError(f"k must be at least 1, got {k}")
    result = FeatureSnippets.empty(chosen, int(k))
    index = torch.tensor(chosen, device="cpu")  # the dictionary's activations are on the CPU
    batch: list[list[int]] = []

    def run(segments: list[list[int]]) -> None:
        nonlocal result
        by_length: dict[int, list[list[int]]] = {}
        for segment in segments:
            by_length.setdefault(len(segment), []).append(segment)
        for length, group in by_length.items():
            ids = torch.tensor(group, device="cpu")
            values = site_activations(model, ids, [(sae.site, sae.layer)])[0]
            acts = sae.encode(values)[..., index].float()  # [B, T, F]
            flat = acts.permute(2, 0, 1).reshape(len(chosen), -1)  # [F, B * T]
            top = torch.topk(flat, min(int(k), flat.shape[1]), dim=1)
            part = FeatureSnippets.empty(chosen, int(k))
            take = top.values.shape[1]
            part.values[:, :take] = top.values.numpy()
            part.values[part.values <= 0] = -np.inf  # a feature that did not fire
            rows, positions = top.indices // length, top.indices % length
            padded = torch.nn.functional.pad(ids, (BEFORE, AFTER), value=-1)
            offsets = torch.arange(BEFORE + 1 + AFTER, device="cpu")
            part.windows[:, :take] = padded[rows[..., None], positions[..., None]
                                            + offsets].numpy()
            part.n_segments, part.n_tokens = len(group), len(group) * length
            result = result.merge(part)
        if progress is not None:
            progress(result.n_segments, result.n_tokens)

    for segment in iter_segments(model, texts, seg_len, max_segments=max_segments):
        batch.append(segment)
        if len(batch) >= batch_segments:
            run(batch)
            batch = []
    if batch:
        run(batch)
    if not result.n_segments:
        raise InputError("the texts gave no segment to read")
    return result


def feature_snippets_job(model, sae, texts: Sequence[str], features: Sequence[int] | None = None,
                         k: int = 10, seg_len: int = 128, max_segments: int | None = None,
                         progress: Callable[[int, int], None] | None = None) -> FeatureSnippets:
    """feature_snippets as a job with a progress bar runs it: the texts' segments are counted
    first (tokenizing only, against a forward per segment), so that progress(segments read,
    segments in all) can say how far it is; raising from progress stops the run."""
    texts = list(texts)
    total = sum(1 for _ in iter_segments(model, texts, seg_len, max_segments=max_segments))
    report = None if progress is None else (lambda done, _tokens: progress(done, total))
    return feature_snippets(model, sae, texts, features, k, seg_len,
                            max_segments=max_segments, progress=report)
