"""Retrieval heads (Wu et al. 2024, "Retrieval Head Mechanistically Explains Long-Context
Factuality"), teacher-forced: the answer follows its prompt, and for each answer token that
occurs exactly once in the prompt and that the model predicts right, a head scores a hit
when its strongest attention, from the query that predicts the token, falls on the token's
occurrence in the prompt. A head's retrieval score is its share of hits over those tokens;
Wu et al. call heads over 0.1 retrieval heads (3-6% of heads in the models they read).

One forward per prompt keeps each layer's input; only the rows that predict answer tokens
are rebuilt (maps.ondemand), so a 4,096-token prompt costs a forward and a few rows, not
L x H x T x T numbers. The same forward gives the copy accuracy (the share of answer tokens
predicted right): needle_study reads both in one pass over the needle cases."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.errors import InputError
from ..heads import rank_heads
from .needles import NeedleCase, NeedleGrid, check_cases, grid_of
from .reading import (check_causal, check_context, hidden_and_maps, last_hidden, piece_ids,
                      predicted, prompt_ids)

RETRIEVAL_THRESHOLD = 0.1  # Wu et al.: a retrieval head scores over 0.1


@dataclass(frozen=True)
class RetrievalCounts:
    """hits[l, h]: answer tokens whose occurrence head (l, h) attended most; counted: the
    answer tokens that took part (found once in the prompt, and predicted right when
    correct_only); tokens: every answer token read; right: those predicted right."""
    hits: np.ndarray  # [L, H] int64
    counted: int
    tokens: int
    right: int
    correct_only: bool = True

    @property
    def scores(self) -> np.ndarray:
        """[L, H] hits / counted: each head's retrieval score."""
        if not self.counted:
            which = "predicted right and " if self.correct_only else ""
            raise InputError(f"no answer token was {which}found exactly once in its prompt "
                             f"({self.tokens} answer tokens read, {self.right} predicted "
                             f"right): a retrieval score counts tokens copied from the prompt")
        return self.hits / self.counted

    def retrieval_heads(self, threshold: float = RETRIEVAL_THRESHOLD) -> np.ndarray:
        """[L, H] bools: heads scoring over threshold."""
        return self.scores > threshold

    def heads_over(self, threshold: float = RETRIEVAL_THRESHOLD) -> list[tuple[int, int]]:
        """(layer, head) of the heads scoring over threshold, the highest first."""
        scores = self.scores
        return [(l, h) for l, h in rank_heads(scores) if scores[l, h] > threshold]


@dataclass(frozen=True)
class NeedleStudy:
    """One pass over needle cases: copy accuracy by length x depth and the retrieval
    counts of every head."""
    grid: NeedleGrid
    retrieval: RetrievalCounts


def _pairs(model, prompts, answers) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids) of each prompt: texts, ids, or needle cases (answers None)."""
    if isinstance(prompts, (str, NeedleCase)):
        prompts = [prompts]
        answers = None if answers is None else [answers]
    prompts = list(prompts)
    if answers is None:
        cases = check_cases(prompts)
        return [(list(c.prompt_ids), list(c.answer_ids)) for c in cases]
    answers = list(answers)
    if len(answers) != len(prompts) or not prompts:
        raise InputError(f"give one answer per prompt ({len(prompts)} prompts, {len(answers)} "
                         f"answers)")
    found = []
    for index, (prompt, answer) in enumerate(zip(prompts, answers)):
        ids = prompt_ids(model, prompt, f"prompt {index}")
        answer_ids = piece_ids(model, answer)
        if not answer_ids:
            raise InputError(f"answer {index} is empty")
        check_context(model, len(ids) + len(answer_ids), f"prompt {index} and its answer")
        if not set(answer_ids) & set(ids):
            raise InputError(f"answer {index} ({answer!r:.60}) never occurs in its prompt: a "
                             f"retrieval score counts tokens copied from the prompt")
        found.append((ids, answer_ids))
    return found


def _read_one(model, ids: list[int], answer: list[int], correct_only: bool, with_maps: bool):
    """(right [n] bools, hits [L, H], counted) of one teacher-forced prompt."""
    n_prompt = len(ids)
    tokens = ids + answer
    rows = np.arange(n_prompt - 1, len(tokens) - 1)  # the query predicting each answer token
    info = model.info
    hits = np.zeros((info.n_layer, info.n_head), dtype=np.int64)
    if not with_maps:
        return predicted(model, last_hidden(model, tokens), rows) == np.asarray(answer), hits, 0
    hidden, maps = hidden_and_maps(model, tokens)
    right = predicted(model, hidden, rows) == np.asarray(answer)
    where = {}
    for position, token in enumerate(ids):
        where[token] = position if token not in where else -1  # -1: more than once
    counted = [(t, where[token]) for t, token in enumerate(answer)
               if where.get(token, -1) >= 0 and (right[t] or not correct_only)]
    if counted:
        index = np.array([t for t, _ in counted])
        targets = np.array([position for _, position in counted])
        for layer in range(info.n_layer):
            strongest = maps.gather_rows(layer, rows[index]).argmax(-1)  # [H, r]
            hits[layer] = (strongest == targets[None, :]).sum(1)
    return right, hits, len(counted)


def _read(model, pairs, correct_only: bool, with_maps: bool, progress=None):
    info = model.info
    hits = np.zeros((info.n_layer, info.n_head), dtype=np.int64)
    counted = tokens = right = 0
    per_prompt = []
    for done, (ids, answer) in enumerate(pairs, 1):
        correct, found, n = _read_one(model, ids, answer, correct_only, with_maps)
        hits += found
        counted, tokens, right = counted + n, tokens + len(answer), right + int(correct.sum())
        per_prompt.append(float(correct.mean()))
        if progress is not None:
            progress(done, len(pairs))
    return RetrievalCounts(hits, counted, tokens, right, correct_only), per_prompt


def retrieval_counts(model, prompts, answers=None, correct_only: bool = True,
                     progress=None) -> RetrievalCounts:
    """Every head's retrieval hits over teacher-forced prompts (texts or token ids, each
    followed by its answer; or needle cases, with answers None). correct_only=False counts
    every answer token found once in its prompt, predicted right or not. progress(done,
    total) after each prompt. InputError when an answer never occurs in its prompt."""
    check_causal(model, "a retrieval score")
    return _read(model, _pairs(model, prompts, answers), correct_only, True, progress)[0]


def retrieval_scores(model, prompts, answers=None, correct_only: bool = True,
                     progress=None) -> np.ndarray:
    """[L, H] each head's retrieval score (Wu et al. 2024, teacher-forced): the share of the
    answer tokens found once in their prompt and predicted right on whose occurrence the
    head's strongest attention falls. See retrieval_counts."""
    return retrieval_counts(model, prompts, answers, correct_only, progress).scores


def copy_accuracy(model, cases, head_mask=None, progress=None) -> np.ndarray:
    """[n_cases] the share of each case's answer tokens the model predicts right, teacher-
    forced, with the heads where head_mask [L, H] is 0 switched off (none by default)."""
    check_causal(model, "a copy accuracy")
    cases = check_cases(cases)
    found = []
    for done, case in enumerate(cases, 1):
        tokens = list(case.prompt_ids) + list(case.answer_ids)
        rows = np.arange(len(case.prompt_ids) - 1, len(tokens) - 1)
        hidden = last_hidden(model, tokens, head_mask)
        found.append(float((predicted(model, hidden, rows) == np.asarray(case.answer_ids))
                           .mean()))
        if progress is not None:
            progress(done, len(cases))
    return np.asarray(found)


def needle_grid(model, cases, head_mask=None, progress=None) -> NeedleGrid:
    """The copy accuracy by length x depth (the papers' needle-in-a-haystack grid)."""
    return grid_of(check_cases(cases), copy_accuracy(model, cases, head_mask, progress))


def needle_study(model, cases, progress=None) -> NeedleStudy:
    """The copy accuracy grid and every head's retrieval counts of needle cases, from one
    forward per case."""
    check_causal(model, "a needle in a haystack")
    cases = check_cases(cases)
    counts, per_case = _read(model, _pairs(model, cases, None), True, True, progress)
    return NeedleStudy(grid_of(cases, per_case), counts)
