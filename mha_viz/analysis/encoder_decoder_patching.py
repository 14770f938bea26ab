"""Activation patching in an encoder-decoder (docs/analyses.md, "Causal interventions"): a
clean and a corrupted source, one target read teacher-forced by both, and for every head of
the encoder's self-attention, the decoder's self-attention and the cross-attention, the
score of one run with that head's output (its z, before W_O) taken from the other run.

Denoising runs the corrupted source with one clean head: a head that alone brings the clean
answer back carries what the corruption removed. Noising runs the clean source with one
corrupted head. The score is a target metric at one target position (pair_score), or the
target's teacher-forced loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..core.errors import InputError
from ..engine.interventions import Interventions
from ..models.seq2seq import KINDS
from .encoder_decoder_ablation import ABLATION_BATCH, head_shapes, pair_score

# kind -> the point holding a head's z, and whether the encoder runs it
_Z_POINT = {"encoder": "z", "decoder": "z", "cross": "cross_z"}


@dataclass
class Seq2SeqPatching:
    """values[kind] [L, H]: the score with that head patched; clean and corrupted: the score
    of each run unpatched; normalized[kind] = (values - corrupted) / (clean - corrupted), 1
    where the patch gives the clean score back. Encoder heads are patched only when the two
    sources have the same number of tokens (encoder_patched); otherwise their values are
    NaN, as a source position of one has no counterpart in the other."""
    values: dict[str, np.ndarray]
    clean: float
    corrupted: float
    direction: str
    description: str
    encoder_patched: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def normalized(self) -> dict[str, np.ndarray]:
        span = self.clean - self.corrupted
        return {kind: (v - self.corrupted) / span for kind, v in self.values.items()}

    @property
    def effect(self) -> dict[str, np.ndarray]:
        """What each patch changed on the same scale (0 = the corrupted run, 1 = the clean
        run): normalized minus the run being patched (0 when denoising, 1 when noising);
        +1 moved the metric the whole way to the clean run, -1 to the corrupted one."""
        base = 0.0 if self.direction == "denoise" else 1.0
        return {kind: v - base for kind, v in self.normalized.items()}

    def strongest(self, k: int = 10) -> list[tuple[str, int, int, float]]:
        """The k heads of any kind whose patch moves the metric most toward the other run
        (kind, layer, head, the share of the way moved: restored when denoising, lost when
        noising), strongest first; unpatched heads skipped."""
        toward = 1.0 if self.direction == "denoise" else -1.0
        found = [(kind, l, h, toward * float(v[l, h])) for kind, v in self.effect.items()
                 for l in range(v.shape[0]) for h in range(v.shape[1])
                 if np.isfinite(v[l, h])]
        return sorted(found, key=lambda item: -item[3])[:k]

    def table(self) -> dict[str, list]:
        """Every head as columns: kind, layer, head, normalized, metric."""
        rows = [(kind, l, h, float(self.normalized[kind][l, h]), float(v[l, h]))
                for kind, v in self.values.items() for l in range(v.shape[0])
                for h in range(v.shape[1])]
        return {name: [row[i] for row in rows]
                for i, name in enumerate(("kind", "layer", "head", "normalized", "metric"))}


def activation_patching_seq2seq(model, clean: str, corrupted: str, target: str | None = None,
                                metric=None, direction: str = "denoise") -> Seq2SeqPatching:
    """Every head of every kind patched from one source's run into the other's, the target
    teacher-forced in both (the model's greedy output for the clean source when target is
    None). metric: as pair_score (a TargetMetric at a target position; None: the loss)."""
    if direction not in ("denoise", "noise"):
        raise InputError(f"direction must be 'denoise' or 'noise', got {direction!r}")
    score = pair_score(model, clean, target, metric)
    corrupted_ids, _ = model.encode_source(corrupted)
    if corrupted_ids == score.source_ids:
        raise InputError("the clean and corrupted sources are the same: there is nothing to "
                         "patch (the normalized effect would divide by 0)")
    base_ids, from_ids = ((corrupted_ids, score.source_ids) if direction == "denoise"
                          else (score.source_ids, corrupted_ids))
    net = model.network
    same_length = len(base_ids) == len(from_ids)
    with torch.inference_mode():
        taken_enc = Interventions(capture=("z",))
        taken_dec = Interventions(capture=("z", "cross_z"))
        from_value = float(score.run(net, [from_ids], encoder_hooks=taken_enc,
                                     decoder_hooks=taken_dec)[0])
        base_value = float(score.run(net, [base_ids])[0])
        taken = {"encoder": taken_enc.captured, "decoder": taken_dec.captured,
                 "cross": taken_dec.captured}
        shapes = head_shapes(model)
        values = {}
        for kind in KINDS:
            if kind == "encoder" and not same_length:
                values[kind] = np.full(shapes[kind], np.nan)
                continue
            values[kind] = _patch_kind(net, kind, shapes[kind], taken[kind], base_ids, score)
    clean_value, corrupted_value = ((from_value, base_value) if direction == "denoise"
                                    else (base_value, from_value))
    if abs(clean_value - corrupted_value) < 1e-9:
        raise InputError("the metric is the same on both sources: the corruption changes "
                         "nothing it measures, so no effect can be normalized (pick "
                         "another position or contrast)")
    notes = [] if same_length else [
        f"The sources have {len(score.source_ids)} and {len(corrupted_ids)} tokens: encoder "
        f"heads are patched only between sources of one length, so they are left out."]
    return Seq2SeqPatching(values, clean_value, corrupted_value, direction, score.description,
                           same_length, notes)


def _patch_kind(net, kind: str, shape: tuple[int, int], taken: dict, base_ids: list,
                score) -> np.ndarray:
    """[L, H]: the score of the base run with each head of one kind given the other run's z,
    in batches of copies (copy r patches head r)."""
    n_layer, n_head = shape
    point = _Z_POINT[kind]
    heads = [(l, h) for l in range(n_layer) for h in range(n_head)]
    out = np.zeros(shape)
    for start in range(0, len(heads), ABLATION_BATCH):
        chunk = heads[start:start + ABLATION_BATCH]
        hooks = Interventions()
        for layer in range(n_layer):
            mask = torch.zeros(len(chunk), n_head, 1, 1, dtype=torch.bool, device=net.device)
            for row, (l, h) in enumerate(chunk):
                if l == layer:
                    mask[row, h] = True
            if mask.any():
                hooks.replace(point, layer, taken[(point, layer)], mask)
        sources = [base_ids] * len(chunk)
        found = (score.run(net, sources, encoder_hooks=hooks) if kind == "encoder"
                 else score.run(net, sources, decoder_hooks=hooks))
        for (l, h), value in zip(chunk, found.tolist()):
            out[l, h] = value
    return out


def first_divergence(model, clean: str, corrupted: str, target: str | None = None
                     ) -> tuple[int, int, int] | None:
    """Where the corruption first changes the decoder's answer, teacher-forced on the clean
    source's target: (target position, the clean target's token there, the token the
    decoder prefers there given the corrupted source), or None where it prefers the same
    token everywhere. The natural metric to patch: logit(clean token) - logit(that token)."""
    forced = model.teacher_forcing(clean, target)
    corrupted_ids, _ = model.encode_source(corrupted)
    with torch.inference_mode():
        logits = model._logits(corrupted_ids, forced.labels)  # [T, vocab]
    preferred = logits.argmax(-1).tolist()
    for position, (wanted, got) in enumerate(zip(forced.labels, preferred)):
        if wanted != got:
            return position, int(wanted), int(got)
    return None
