"""Head-role scores (ANALYSES.md section 3; Olsson et al. 2022, TransformerLens head_detector,
the ARENA course).

All functions take attentions [..., T, T] (normally [L, H, T, T]) or an AttentionTrace, or a
list of them (several texts), and return the leading shape ([L, H]); with a list, the mean
over inputs. Layers and heads are numbered from 0. Nothing here assumes a causal map.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ._inputs import as_arrays, is_many, per_input

__all__ = ["previous_token_scores", "next_token_scores", "duplicate_token_scores",
           "induction_pattern_scores", "induction_scores"]


def _diagonal_mean(array: np.ndarray, offset: int) -> np.ndarray:
    """Mean of A[i, i - offset] over the rows where that key exists."""
    n = array.shape[-1]
    if n < 2:
        raise InputError(f"need at least 2 tokens for this score, got T = {n}")
    return np.diagonal(array, offset=-offset, axis1=-2, axis2=-1).mean(axis=-1, dtype=np.float64)


def previous_token_scores(attentions) -> np.ndarray:
    """Previous-token score: mean over query rows i >= 1 of A[i, i - 1]. -> [L, H]

    1 for a head that always attends to the previous token; 1/T for uniform bidirectional
    attention over T keys.
    """
    arrays = as_arrays(attentions)
    return np.mean([_diagonal_mean(a, 1) for a in arrays], axis=0)


def next_token_scores(attentions) -> np.ndarray:
    """Next-token score: mean over query rows i < T - 1 of A[i, i + 1]. -> [L, H]

    Always 0 for a causal (GPT-2) model; meaningful for bidirectional models (BERT).
    """
    arrays = as_arrays(attentions)
    return np.mean([_diagonal_mean(a, -1) for a in arrays], axis=0)


def _duplicate_one(array: np.ndarray, token_ids, include_later: bool):
    n = array.shape[-1]
    ids = np.asarray(token_ids)
    if ids.ndim != 1 or ids.shape[0] != n:
        raise InputError(f"token_ids must have one id per token (T = {n}), "
                         f"got shape {list(ids.shape)}")
    same = ids[:, None] == ids[None, :]
    np.fill_diagonal(same, False)
    if not include_later:
        same &= np.tri(n, k=-1, dtype=bool)  # keys j < i only
    queries = same.any(axis=1)
    if not queries.any():
        return None
    mass = np.einsum("...ij,ij->...i", array, same.astype(array.dtype), dtype=np.float64)
    return mass[..., queries].mean(axis=-1)


def duplicate_token_scores(attentions, token_ids=None, include_later: bool = False) -> np.ndarray:
    """Duplicate-token score: mean, over the queries i whose token also occurs at an earlier
    position (include_later=True: at any other position), of the mass A[i, D(i)] on those
    positions D(i) = {j < i : id_j = id_i}. -> [L, H]

    token_ids: the ids [T] (taken from the trace when a trace is passed and this is None);
        with a list of inputs, one id list per input.
    A head scores 0 on an input where no query has a duplicate. With a list of inputs, the
    mean over the inputs that have at least one duplicated query (0 if none has).
    """
    arrays = as_arrays(attentions)
    items = list(attentions) if is_many(attentions) else [attentions]
    ids_list = per_input(attentions, token_ids)
    scores = []
    for item, array, ids in zip(items, arrays, ids_list):
        if ids is None:
            ids = getattr(item, "token_ids", None)
        if ids is None:
            raise InputError("duplicate_token_scores needs token_ids (or a trace that has them)")
        score = _duplicate_one(array, ids, include_later)
        if score is not None:
            scores.append(score)
    if not scores:
        return np.zeros(arrays[0].shape[:-2], dtype=np.float64)
    return np.mean(scores, axis=0)


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def induction_pattern_scores(attentions, seq_len: int, offset: int = 0) -> np.ndarray:
    """Induction score on a repeated sequence R R. -> [L, H]

    The input holds R (s = seq_len tokens) twice, starting at position ``offset`` (e.g. 1
    after a BOS or [CLS]; anything after the second copy, such as [SEP], is ignored). For
    query offset + s + k in the second copy (token R[k]) the induction target is the token
    that followed the previous occurrence of R[k], at offset + k + 1. The score is the mean
    over k = 0 .. s - 2 of A[offset + s + k, offset + k + 1] (the last query, k = s - 1, is
    left out: its target would be the first token of the second copy).
    An exact induction head scores 1; uniform attention scores about 1/position.
    """
    seq_len = _check_int(seq_len, "seq_len", 2)
    offset = _check_int(offset, "offset", 0)
    arrays = as_arrays(attentions)
    k = np.arange(seq_len - 1)
    queries, keys = offset + seq_len + k, offset + k + 1
    scores = []
    for array in arrays:
        n = array.shape[-1]
        if queries[-1] >= n:
            raise InputError(f"an R R input with seq_len = {seq_len} after {offset} prefix "
                             f"token(s) needs at least {queries[-1] + 1} tokens, got T = {n}")
        scores.append(array[..., queries, keys].mean(axis=-1, dtype=np.float64))
    return np.mean(scores, axis=0)


def _special_ids(tokenizer) -> set[int]:
    ids = getattr(tokenizer, "all_special_ids", None) or []
    return {int(i) for i in ids if i is not None}


def induction_scores(model, seq_len: int = 50, n_seqs: int = 10, seed: int = 0,
                     prepend_bos: bool = True) -> np.ndarray:
    """Induction scores from the repeated-random-tokens probe (Olsson et al. 2022, ARENA).
    -> [L, H], the mean of induction_pattern_scores over ``n_seqs`` sequences.

    Each sequence: R = ``seq_len`` distinct token ids drawn (numpy default_rng(seed), without
    replacement, so every token's previous occurrence is unique) from the vocabulary
    [0, model.info.vocab_size) minus model.tokenizer.all_special_ids; the input is R R.
    With ``prepend_bos``: a causal model (GPT-2) gets a BOS first (tokenizer.bos_token_id,
    else eos_token_id: <|endoftext|> for GPT-2), a BERT model gets [CLS] R R [SEP]. The input
    must fit the context (2 * seq_len + 2 <= model.info.max_positions), else InputError.

    model: anything with .info (arch, vocab_size, max_positions), .tokenizer and
        .trace_ids(list[int]) -> AttentionTrace.
    """
    seq_len = _check_int(seq_len, "seq_len", 2)
    n_seqs = _check_int(n_seqs, "n_seqs", 1)
    info, tokenizer = model.info, model.tokenizer
    # A bidirectional model reads [CLS] R R [SEP]; a causal one BOS R R.
    causal = bool(getattr(info, "causal", str(getattr(info, "arch", "")).lower() != "bert"))
    vocab_size = int(info.vocab_size)
    prefix, suffix = [], []
    if prepend_bos:
        if not causal:
            cls_id = getattr(tokenizer, "cls_token_id", None)
            sep_id = getattr(tokenizer, "sep_token_id", None)
            if cls_id is None or sep_id is None:
                raise InputError("this BERT tokenizer has no [CLS]/[SEP] ids; "
                                 "call induction_scores with prepend_bos=False")
            prefix, suffix = [int(cls_id)], [int(sep_id)]
        else:
            bos_id = getattr(tokenizer, "bos_token_id", None)
            if bos_id is None:
                bos_id = getattr(tokenizer, "eos_token_id", None)
            if bos_id is None:
                raise InputError("this tokenizer has no BOS or EOS token; "
                                 "call induction_scores with prepend_bos=False")
            prefix = [int(bos_id)]
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
    scores = []
    for _ in range(n_seqs):
        repeated = rng.choice(candidates, size=seq_len, replace=False).tolist()
        ids = prefix + repeated + repeated + suffix
        trace = model.trace_ids([int(i) for i in ids])
        scores.append(induction_pattern_scores(trace.attentions, seq_len, offset=len(prefix)))
    return np.mean(scores, axis=0)
