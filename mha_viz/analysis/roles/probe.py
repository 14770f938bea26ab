"""The repeated-random-tokens probe for induction heads (Olsson et al. 2022, ARENA)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...core.errors import InputError
from .scores import NORMALIZATIONS, _check_int, _check_normalization, induction_pattern_scores


def _special_ids(tokenizer) -> set[int]:
    ids = getattr(tokenizer, "all_special_ids", None) or []
    return {int(i) for i in ids if i is not None}


def _frame(model, prepend_bos: bool = True) -> tuple[list[int], list[int]]:
    """The ids the probe puts before and after R R: a bidirectional model reads
    [CLS] R R [SEP], a causal one BOS R R; a model that says what frames its input (an
    encoder-decoder's stack: probe_frame) is read as it says."""
    if not prepend_bos:
        return [], []
    frame = getattr(model, "probe_frame", None)
    if frame is not None:
        return [int(i) for i in frame[0]], [int(i) for i in frame[1]]
    tokenizer = model.tokenizer
    if not model.info.causal:
        cls_id = getattr(tokenizer, "cls_token_id", None)
        sep_id = getattr(tokenizer, "sep_token_id", None)
        if cls_id is None or sep_id is None:
            raise InputError("this BERT tokenizer has no [CLS]/[SEP] ids; "
                             "call induction_scores with prepend_bos=False")
        return [int(cls_id)], [int(sep_id)]
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if bos_id is None:
        bos_id = getattr(tokenizer, "eos_token_id", None)
    if bos_id is None:
        raise InputError("this tokenizer has no BOS or EOS token; "
                         "call induction_scores with prepend_bos=False")
    return [int(bos_id)], []


def longest_probe(model, prepend_bos: bool = True) -> int:
    """The longest R (seq_len) whose probe input, R twice in its frame, fits the model's
    context (less than 2: no probe fits)."""
    prefix, suffix = _frame(model, prepend_bos)
    return (int(model.info.max_positions) - len(prefix) - len(suffix)) // 2


def repeated_random_tokens(model, seq_len: int = 50, n_seqs: int = 10, seed: int = 0,
                           prepend_bos: bool = True) -> tuple[list[list[int]], int]:
    """The inputs of the repeated-random-tokens probe: (one id list per sequence, the number
    of prefix tokens before R R). See induction_scores for how they are drawn."""
    seq_len = _check_int(seq_len, "seq_len", 2)
    n_seqs = _check_int(n_seqs, "n_seqs", 1)
    seed = _check_int(seed, "seed", 0)
    info, tokenizer = model.info, model.tokenizer
    vocab_size = int(info.vocab_size)
    prefix, suffix = _frame(model, prepend_bos)
    extra = len(prefix) + len(suffix)
    max_positions = getattr(info, "max_positions", None)
    if max_positions is not None and 2 * seq_len + extra > int(max_positions):
        largest = (int(max_positions) - extra) // 2
        raise InputError(f"seq_len = {seq_len} needs {2 * seq_len + extra} positions but the "
                         f"model's context is {max_positions}; use seq_len <= {largest}")
    candidates = np.setdiff1d(np.arange(vocab_size), np.fromiter(_special_ids(tokenizer), int))
    if candidates.size < seq_len:
        raise InputError(f"only {candidates.size} non-special token ids to draw {seq_len} "
                         f"distinct ones from; use a smaller seq_len")
    rng = np.random.default_rng(seed)
    sequences = []
    for _ in range(n_seqs):
        repeated = rng.choice(candidates, size=seq_len, replace=False).tolist()
        sequences.append([int(i) for i in prefix + repeated + repeated + suffix])
    return sequences, len(prefix)


def probe_description(seq_len: int, n_seqs: int, seed: int) -> str:
    """How the probe is named on pages and in role tables."""
    return (f"repeated random tokens, seq_len {seq_len}, seed {seed}, "
            f"{n_seqs} sequence{'s' if n_seqs != 1 else ''}")


@dataclass(frozen=True)
class InductionProbe:
    """The repeated-random-tokens probe, run once, scored every way.

    scores(normalization, drop_special) -> [L, H]: the mean over the sequences of
    induction_pattern_scores (drop_special leaves out the prefix BOS / [CLS] and the suffix
    [SEP], rows renormalized). ``trace`` is the first sequence's trace (to look at one
    head's map on the probe), ``ids`` every sequence's token ids.
    """

    seq_len: int
    n_seqs: int
    seed: int
    offset: int  # prefix tokens before R R (1 with a BOS / [CLS], else 0)
    ids: list[list[int]]
    trace: object  # AttentionTrace of the first sequence
    causal: bool = True
    _scores: dict = field(repr=False, default_factory=dict)

    def scores(self, normalization: str = "ours", drop_special: bool = False) -> np.ndarray:
        _check_normalization(normalization)
        return self._scores[(normalization, bool(drop_special))]

    @property
    def frame_tokens(self) -> list[str]:
        """The tokens the probe puts around R R (BOS; [CLS] and [SEP]; a decoder's start)."""
        tokens = list(self.trace.display_tokens)
        return tokens[:self.offset] + tokens[self.offset + 2 * self.seq_len:]

    @property
    def frame(self) -> str:
        """The probe's input in words: "<|endoftext|> R R", "[CLS] R R [SEP]", "R R </s>"."""
        tokens = list(self.trace.display_tokens)
        return " ".join([*tokens[:self.offset], "R", "R",
                         *tokens[self.offset + 2 * self.seq_len:]])

    def keep_mask(self, drop_special: bool = True) -> np.ndarray:
        """bool [T] of the probe's input: False for the prefix and suffix (BOS, [CLS], [SEP])
        when drop_special, else all True."""
        keep = np.ones(len(self.ids[0]), dtype=bool)
        if drop_special:
            keep[:self.offset] = False
            keep[self.offset + 2 * self.seq_len:] = False
        return keep

    def uniform_score(self, normalization: str = "ours", drop_special: bool = False) -> float:
        """The score uniform attention over the visible keys would get on this probe (the
        floor to compare with: about 1 / position for a causal model, 1 / T otherwise)."""
        n = len(self.ids[0])
        visible = np.tril(np.ones((n, n))) if self.causal else np.ones((n, n))
        uniform = visible / visible.sum(axis=1, keepdims=True)
        return float(induction_pattern_scores(
            uniform, self.seq_len, self.offset, normalization=normalization,
            exclude=~self.keep_mask(drop_special)))

    @property
    def description(self) -> str:
        return probe_description(self.seq_len, self.n_seqs, self.seed)


def induction_probe(model, seq_len: int = 50, n_seqs: int = 10, seed: int = 0,
                    prepend_bos: bool = True, progress=None,
                    weights: str = "attention") -> InductionProbe:
    """Run the repeated-random-tokens probe (see induction_scores) and keep its scores in
    both normalizations, with and without the prefix / suffix tokens, and the first
    sequence's trace. progress(done, total), if given, is called after each sequence.
    weights: "attention" (the softmax's weights) or "value" (what each head moves:
    Model.trace_ids(ids, weights="value"), as every statistic reads it)."""
    sequences, offset = repeated_random_tokens(model, seq_len, n_seqs, seed, prepend_bos)
    seq_len, n_seqs, seed = int(seq_len), int(n_seqs), int(seed)
    variants = [(norm, drop) for norm in NORMALIZATIONS for drop in (False, True)]
    sums = {v: None for v in variants}
    first = None
    for done, ids in enumerate(sequences, start=1):
        # a stack that reads only weights (an encoder-decoder's) is asked as before
        trace = model.trace_ids(ids) if weights == "attention" else \
            model.trace_ids(ids, weights=weights)
        if first is None:
            first = trace
        outside = np.ones(len(ids), dtype=bool)
        outside[offset:offset + 2 * seq_len] = False
        for norm, drop in variants:
            score = induction_pattern_scores(trace.attentions, seq_len, offset=offset,
                                             exclude=outside if drop else None,
                                             normalization=norm)
            sums[(norm, drop)] = score if sums[(norm, drop)] is None else \
                sums[(norm, drop)] + score
        if progress is not None:
            progress(done, n_seqs)
    scores = {v: total / n_seqs for v, total in sums.items()}
    return InductionProbe(seq_len, n_seqs, seed, offset, sequences, first,
                          bool(getattr(first, "causal", True)), scores)


def induction_scores(model, seq_len: int = 50, n_seqs: int = 10, seed: int = 0,
                     prepend_bos: bool = True, *, drop_special: bool = False,
                     normalization: str = "ours") -> np.ndarray:
    """Induction scores from the repeated-random-tokens probe (Olsson et al. 2022, ARENA).
    -> [L, H], the mean of induction_pattern_scores over ``n_seqs`` sequences.

    Each sequence: R = ``seq_len`` distinct token ids drawn (numpy default_rng(seed), without
    replacement, so every token's previous occurrence is unique) from the vocabulary
    [0, model.info.vocab_size) minus model.tokenizer.all_special_ids; the input is R R.
    With ``prepend_bos``: a causal model (GPT-2) gets a BOS first (tokenizer.bos_token_id,
    else eos_token_id: <|endoftext|> for GPT-2), a BERT model gets [CLS] R R [SEP]. The input
    must fit the context (2 * seq_len + 2 <= model.info.max_positions), else InputError.
    drop_special: leave the BOS / [CLS] / [SEP] out of the maps (rows renormalized).
    normalization: see induction_pattern_scores.

    model: anything with .info (causal, vocab_size, max_positions), .tokenizer and
        .trace_ids(list[int]) -> AttentionTrace.
    """
    _check_normalization(normalization)
    return induction_probe(model, seq_len, n_seqs, seed, prepend_bos).scores(
        normalization, drop_special)
