"""Heads across training (docs/analyses.md, "Heads across training"): the statistics of every
checkpoint of a series, streamed (a checkpoint is loaded, measured and let go before the next
one), as arrays [step, layer, head] that save to .npz and reopen.

Per checkpoint, on the repeated-random-tokens probe (BOS R R, the ids of
roles.repeated_random_tokens): every head's induction score (roles.induction_pattern_scores,
the mean over the probe's sequences, as roles.induction_scores gives it), previous-token and
duplicate-token scores (roles.previous_token_scores, roles.duplicate_token_scores on the same
traces), and the loss on the first copy of R and on the repeated copy. On the texts (by
default the run's own held-out texts of its training distribution, which the series keeps in
held_out_texts.json): every head's entropy and mass on the first token (the sink)
(entropy_and_mass, the mean over the texts), the mean next-token loss, and the in-context
learning score of Olsson et al. (2022): the loss at a late token minus the loss at an early
one, averaged over the texts (icl_positions says which tokens).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from ..core.errors import InputError, LoadError
from ..models.series import checkpoint_series, load_checkpoint
from .roles import (duplicate_token_scores, induction_pattern_scores, previous_token_scores,
                    probe_description, repeated_random_tokens)
from .token_classes import entropy_and_mass

# [step, layer, head] arrays and [step] curves, by name
HEAD_ARRAYS = {"induction": "induction score (probe)",
               "previous_token": "previous-token score (probe)",
               "duplicate_token": "duplicate-token score (probe)",
               "entropy": "entropy on the texts (nats)",
               "sink_mass": "mass on the first token, on the texts"}
CURVES = {"text_loss": "loss on the texts (nats/token)",
          "icl_score": "in-context learning score (nats)",
          "probe_loss_first": "loss on the probe's first copy (nats/token)",
          "probe_loss_repeated": "loss on the probe's repeated copy (nats/token)"}
# Olsson et al. 2022 compare the loss of token 500 with that of token 50 (0-based positions,
# the loss of predicting that token), in contexts of 8,192 tokens
ICL_EARLY, ICL_LATE = 50, 500
PROBE_SEQ_LEN, PROBE_SEQS = 50, 8
FORMAT = "mha-viz training dynamics 1"


@dataclass
class TrainingDynamics:
    """Statistics of each checkpoint of a series: steps [S]; heads[name] [S, L, H] (names in
    HEAD_ARRAYS); curves[name] [S] (CURVES); info: the series, the probe, the texts' count and
    the ICL positions, as saved."""
    steps: np.ndarray
    heads: dict[str, np.ndarray]
    curves: dict[str, np.ndarray]
    info: dict = field(default_factory=dict)

    @property
    def n_layer(self) -> int:
        return int(next(iter(self.heads.values())).shape[1])

    @property
    def n_head(self) -> int:
        return int(next(iter(self.heads.values())).shape[2])

    def save(self, path) -> Path:
        """Write every array to an .npz (no pickled object: info is JSON text)."""
        path = Path(path)
        arrays = {"steps": np.asarray(self.steps, dtype=np.int64)}
        arrays.update({f"head/{k}": np.asarray(v, dtype=np.float64) for k, v in
                       self.heads.items()})
        arrays.update({f"curve/{k}": np.asarray(v, dtype=np.float64) for k, v in
                       self.curves.items()})
        arrays["info"] = np.array(json.dumps({"format": FORMAT, **self.info}))
        with path.open("wb") as handle:
            np.savez_compressed(handle, **arrays)
        return path

    @classmethod
    def load(cls, path) -> "TrainingDynamics":
        """Reopen what save() wrote; anything else is refused with a message."""
        try:
            with np.load(Path(path), allow_pickle=False) as data:
                info = json.loads(str(data["info"]))
                steps = data["steps"]
                heads = {k[5:]: data[k] for k in data.files if k.startswith("head/")}
                curves = {k[6:]: data[k] for k in data.files if k.startswith("curve/")}
        except (OSError, ValueError, KeyError, EOFError) as error:
            raise InputError(f"'{Path(path).name}' is not training dynamics written by "
                             f"mha-viz ({type(error).__name__})") from None
        if info.get("format") != FORMAT or not heads or any(
                v.shape[0] != steps.shape[0] for v in [*heads.values(), *curves.values()]):
            raise InputError(f"'{Path(path).name}' is not training dynamics written by mha-viz")
        info.pop("format")
        return cls(steps, heads, curves, info)

    def strongest_heads(self, name: str, k: int = 3, layer: int | None = None
                        ) -> list[tuple[int, int]]:
        """The k heads (layer, head) whose `name` score is highest at any step."""
        peak = self.heads[name].max(axis=0)
        if layer is not None:
            peak = np.where(np.arange(peak.shape[0])[:, None] == layer, peak, -np.inf)
        order = np.argsort(-peak, axis=None, kind="stable")[:k]
        return [tuple(int(i) for i in np.unravel_index(o, peak.shape)) for o in order]

    def induction_head(self) -> tuple[int, int] | None:
        """The head above layer 0 whose induction score peaks highest (an induction head
        reads what an earlier head wrote); None for a model of one layer."""
        return self._strongest("induction", range(1, self.n_layer))

    def previous_token_head(self, below: int) -> tuple[int, int] | None:
        """The head under layer `below` whose previous-token score peaks highest: the head
        an induction head of layer `below` can read (None under layer 0)."""
        return self._strongest("previous_token", range(0, min(int(below), self.n_layer)))

    def _strongest(self, name: str, layers: range) -> tuple[int, int] | None:
        if not len(layers):
            return None
        peak = self.heads[name].max(axis=0)[list(layers)]
        row, head = np.unravel_index(int(np.argmax(peak)), peak.shape)
        return int(layers[int(row)]), int(head)

    def phase_change(self) -> int | None:
        """The index of the checkpoint where the loss on the probe's repeated copy falls
        fastest per step on a log scale (the induction bump of Olsson et al.): the largest
        drop between neighbours divided by the log of their steps' ratio; None with fewer
        than two checkpoints, or steps that are not all positive."""
        steps = np.asarray(self.steps, dtype=np.float64)
        loss = np.asarray(self.curves["probe_loss_repeated"], dtype=np.float64)
        if steps.size < 2 or steps.min() <= 0:
            return None
        rate = -np.diff(loss) / np.diff(np.log(steps))
        return int(np.argmax(rate)) + 1


def next_token_losses(model, ids) -> np.ndarray:
    """[T - 1] each token's loss (nats) given the tokens before it, for pre-tokenized ids."""
    ids = torch.tensor([[int(i) for i in ids]], dtype=torch.long, device=model.network.device)
    with torch.inference_mode():
        last_hidden, _ = model.network(ids, torch.zeros_like(ids))
        logprobs = F.log_softmax(model.network.lm_logits(last_hidden)[0].float(), dim=-1)
        return -logprobs[:-1].gather(1, ids[0, 1:, None])[:, 0].cpu().numpy().astype(np.float64)


def icl_positions(context: int, early: int | None = None, late: int | None = None
                  ) -> tuple[int, int]:
    """The ICL score's two token positions in texts of `context` tokens. late: as given or
    Olsson et al.'s 500, at most the context's last position (so in a context of 64 tokens,
    63); early: as given or a tenth of late, rounded (their ratio: 50 for 500, 6 for 63),
    and a tenth of late when a given one is not before it."""
    late = min(ICL_LATE if late is None else int(late), int(context) - 1)
    early = max(1, round(late * ICL_EARLY / ICL_LATE)) if early is None else int(early)
    if early >= late:
        early = max(1, late // 10)
    if not 1 <= early < late:
        raise InputError(f"the in-context learning score compares an early token with a later "
                         f"one: got positions {early} and {late} (texts of {context} tokens)")
    return early, late


def texts_context(model, texts: list[str]) -> int:
    """The tokens of the shortest text (within the model's context): the ICL score's
    positions are pulled inside it, so every text counts."""
    limit = int(model.info.max_positions)
    return min(len(model.encode(t, None, limit).input_ids) for t in texts)


def probe_length(max_positions: int, seq_len: int | None = None) -> int:
    """The probe's length of R: as given, else PROBE_SEQ_LEN or what a short context holds
    (a BOS and R twice)."""
    return int(seq_len) if seq_len is not None else min(PROBE_SEQ_LEN,
                                                        (int(max_positions) - 1) // 2)


def _probe(model, seq_len: int | None, n_seqs: int, seed: int):
    """The probe run on one checkpoint: (R's length, its sequences, their offset, their
    traces, the induction scores [L, H], the mean over the sequences)."""
    info = model.info
    seq_len = probe_length(info.max_positions, seq_len)
    if not info.causal or not info.has_lm_head:
        raise InputError(f"training dynamics read a causal language model; "
                         f"'{info.name}' is not one")
    sequences, offset = repeated_random_tokens(model, seq_len, n_seqs, seed)
    traces = [model.trace_ids(ids) for ids in sequences]
    induction = np.mean([induction_pattern_scores(t.attentions, seq_len, offset=offset)
                         for t in traces], axis=0)
    return seq_len, sequences, offset, traces, induction


@dataclass(frozen=True)
class ProbeInduction:
    """One checkpoint's induction scores [L, H] on the probe, as the Training page measures
    every checkpoint (checkpoint_statistics), and the head above layer 0 they name."""
    scores: np.ndarray

    def head(self) -> tuple[int, int]:
        """The head above layer 0 with the highest score (layer 0 reads no earlier head);
        refused for a model of one layer."""
        if self.scores.shape[0] < 2:
            raise InputError("an induction head reads an earlier layer: this model has one")
        above = np.asarray(self.scores, dtype=float).copy()
        above[0] = -np.inf
        layer, head = np.unravel_index(int(np.argmax(above)), above.shape)
        return int(layer), int(head)

    def peers(self, layer: int, head: int, within: float = 0.05) -> list[tuple[int, int]]:
        """The other heads above layer 0 scoring within ``within`` of (layer, head): heads
        that do the same job as well (the Training page may follow one of them)."""
        mine = float(self.scores[layer, head])
        return [(int(l), int(h)) for l, h in zip(*np.nonzero(
            np.abs(self.scores - mine) <= within)) if l >= 1 and (l, h) != (layer, head)]


def probe_induction(model, seq_len: int | None = None, n_seqs: int = PROBE_SEQS,
                    seed: int = 0) -> ProbeInduction:
    """A model's induction scores on the Training page's probe (checkpoint_statistics's,
    same R, sequences and seed): what the page shows at a checkpoint, for one model."""
    return ProbeInduction(_probe(model, seq_len, n_seqs, seed)[4])


def checkpoint_statistics(model, texts: list[str], seq_len: int | None = None,
                          n_seqs: int = PROBE_SEQS, seed: int = 0, early: int | None = None,
                          late: int | None = None) -> tuple[dict, dict]:
    """One checkpoint's ({head array: [L, H]}, {curve: float}) (see the module docstring).
    The texts are truncated to the model's context; seq_len None: probe_length's; the ICL
    positions: icl_positions within the shortest text (texts_context)."""
    seq_len, sequences, offset, traces, induction = _probe(model, seq_len, n_seqs, seed)
    losses = np.array([next_token_losses(model, ids) for ids in sequences])
    # loss[:, j] predicts token j + 1: the first copy's tokens after its first (positions
    # offset + 1 .. offset + seq_len - 1), the repeated copy's likewise (its first token
    # follows nothing it could copy)
    first = losses[:, offset:offset + seq_len - 1].mean()
    repeated = losses[:, offset + seq_len:offset + 2 * seq_len - 1].mean()
    heads = {"induction": induction, "previous_token": previous_token_scores(traces),
             "duplicate_token": duplicate_token_scores(traces)}
    early, late = icl_positions(texts_context(model, texts), early, late)
    entropies, sinks, text_losses, icl = [], [], [], []
    for text in texts:
        trace = model.trace(text, max_tokens=int(model.info.max_positions))
        measured = entropy_and_mass(trace)
        entropies.append(measured["entropy"])
        sinks.append(measured["mass"]["first token"])
        loss = next_token_losses(model, trace.token_ids)
        text_losses.append(loss)
        icl.append(loss[late - 1] - loss[early - 1])  # loss[j - 1] is token j's
    heads["entropy"] = np.mean(entropies, axis=0)
    heads["sink_mass"] = np.mean(sinks, axis=0)
    curves = {"text_loss": float(np.concatenate(text_losses).mean()),
              "icl_score": float(np.mean(icl)),
              "probe_loss_first": float(first), "probe_loss_repeated": float(repeated)}
    return heads, curves


def training_dynamics(series, texts=None, seq_len: int | None = None,
                      n_seqs: int = PROBE_SEQS, seed: int = 0, early: int | None = None,
                      late: int | None = None, local_dirs=None, progress=None,
                      texts_about: str | None = None) -> TrainingDynamics:
    """Every checkpoint's statistics (checkpoint_statistics), one checkpoint loaded at a time.

    series: a CheckpointSeries, or what checkpoints.series.checkpoint_series takes (a bundled
        series, a folder of step folders, a list of folders, a hub id with step revisions).
    texts: a text or a list of them (entropy, sink mass, loss, ICL score); None: the run's
        held-out texts of its training distribution (its held_out_texts.json), which the
        ICL score of Olsson et al. reads; texts_about says in words what given texts are.
    early, late: the ICL score's positions (None: icl_positions's, scaled to the context).
    seq_len: the probe's length of R (None: 50, or what the context holds).
    progress(done, total), if given, is called after each checkpoint (it may raise to stop)."""
    series = checkpoint_series(series, local_dirs)
    own_held_out = texts is None
    if own_held_out:
        held_out = series.held_out_texts()
        if held_out is None:
            raise InputError(f"'{series.name}' keeps no held-out texts of its training "
                             f"distribution (held_out_texts.json): give the texts to measure on")
        texts, texts_about = held_out
    texts = [texts] if isinstance(texts, str) else [str(t) for t in texts]
    if not texts or not all(t.strip() for t in texts):
        raise InputError("training dynamics need at least one non-empty text")
    heads, curves, shape = {k: [] for k in HEAD_ARRAYS}, {k: [] for k in CURVES}, None
    for done, checkpoint in enumerate(series.checkpoints, start=1):
        try:
            model = load_checkpoint(checkpoint)
        except LoadError as error:
            raise type(error)(f"step {checkpoint.step} ({checkpoint.name}): {error}") from None
        if shape is None:  # the first checkpoint fixes what every one is measured on
            context = texts_context(model, texts)
            early, late = icl_positions(context, early, late)
            seq_len = probe_length(model.info.max_positions, seq_len)
        one_heads, one_curves = checkpoint_statistics(model, texts, seq_len, n_seqs, seed,
                                                      early, late)
        if shape is None:
            shape = one_heads["induction"].shape
        elif one_heads["induction"].shape != shape:
            raise InputError(f"step {checkpoint.step} has {one_heads['induction'].shape} "
                             f"layers x heads, the first checkpoint {shape}: a series is one "
                             f"model")
        del model  # one model held at a time
        for k in HEAD_ARRAYS:
            heads[k].append(one_heads[k])
        for k in CURVES:
            curves[k].append(one_curves[k])
        if progress is not None:
            progress(done, len(series))
    info = {"series": series.name, "source": series.source,
            "probe": probe_description(seq_len, n_seqs, seed), "seq_len": int(seq_len),
            "n_seqs": int(n_seqs), "seed": int(seed), "n_texts": len(texts),
            "texts": texts_about or f"{len(texts)} text{'s' if len(texts) != 1 else ''} given",
            "held_out": own_held_out,
            "icl_early": early, "icl_late": late, "icl_context": context}
    return TrainingDynamics(np.asarray(series.steps, dtype=np.int64),
                            {k: np.stack(v) for k, v in heads.items()},
                            {k: np.asarray(v, dtype=np.float64) for k, v in curves.items()},
                            info)
