"""Needles in a haystack (Kamradt 2023; as Wu et al. 2024 use them to find retrieval heads):
a sentence holding a fact no text around it tells (the needle) is put at a depth of a long
text (the haystack), and a question after the text asks for the fact. Teacher-forced, the
answer follows the question, and the copy accuracy is the share of the answer's tokens the
model predicts right, drawn by length x depth as the papers draw it.

The haystack is Python's documentation, which mha-viz ships (bundled/python-docs.txt.gz), cut
at sentence ends; the needle's words are drawn from a seed among words that documentation
does not use, so each of the answer's tokens occurs in the prompt once: in the needle."""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.errors import InputError
from .reading import check_causal, check_context, piece_ids, tokenized

HAYSTACK = Path(__file__).resolve().parents[2] / "bundled" / "python-docs.txt.gz"
NEEDLE = "The secret words of the lighthouse keeper are {words}."
QUESTION = "What are the secret words of the lighthouse keeper?"
# words Python's documentation never uses: the answer's tokens occur in the needle only
WORDS = ("giraffe", "mango", "volcano", "violin", "pelican", "saffron", "lantern", "walrus",
         "tulip", "meadow", "harbor", "falcon", "cactus", "banjo", "glacier", "orchid",
         "penguin", "velvet", "canyon", "otter", "papaya", "thunder", "jasmine", "kettle",
         "lobster", "marble", "nectar", "parrot", "quilt", "raven", "sapphire", "turnip",
         "zebra", "bison", "cherry", "dolphin", "emerald", "ferret", "ginger", "hazel",
         "iguana", "jaguar", "koala", "lemur", "mustard", "nutmeg", "oyster", "pumpkin")
N_WORDS = 3
DRAWS = 20  # tries for a needle whose answer holds a token found once in the prompt
MAX_HAYSTACK_CHARS = 4_000_000


@dataclass(frozen=True)
class NeedleCase:
    """One prompt: the haystack cut to fill ``length`` tokens in all, the needle at
    ``depth`` (0: first, 1: last, just before the question), the question; the answer
    follows it (teacher-forced)."""
    length: int
    depth: float
    needle: str
    question: str
    answer: str
    prompt_ids: tuple[int, ...]
    answer_ids: tuple[int, ...]
    needle_start: int  # the needle's first token in the prompt

    @property
    def n_tokens(self) -> int:
        """Tokens the model reads: the prompt and the answer after it."""
        return len(self.prompt_ids) + len(self.answer_ids)


def leading_specials(model) -> list[int]:
    """The special tokens the tokenizer puts before a text (a BOS), which every prompt
    starts with."""
    encoded = model.encode("x")
    lead = []
    for token, special in zip(encoded.input_ids, encoded.special_mask):
        if not special:
            break
        lead.append(int(token))
    return lead


def haystack_text() -> str:
    """The bundled text: paragraphs of CPython's documentation, one a line."""
    with gzip.open(HAYSTACK, "rt", encoding="utf-8") as handle:
        return handle.read()


def lengths_up_to(context: int, shortest: int, reserve: int = 0) -> list[int]:
    """Powers of two from shortest while they leave ``reserve`` tokens of the context, and
    the context less reserve itself when it is not one of them."""
    lengths, n, room = [], int(shortest), int(context) - int(reserve)
    while n <= room:
        lengths.append(n)
        n *= 2
    if room > (lengths[-1] if lengths else 0):
        lengths.append(room)
    return lengths


def needle_lengths(context: int, shortest: int = 256) -> list[int]:
    """The lengths a needle grid offers: powers of two from shortest up to the context, and
    the context itself (less a few tokens for the answer) when it is not one."""
    return lengths_up_to(context, shortest, N_WORDS * 4)


def text_lengths(context: int) -> list[int]:
    """The lengths of a long text a page offers: powers of two from 128, and the context."""
    return lengths_up_to(context, 128)


def shortest_prompt(model) -> int:
    """The fewest tokens a needle prompt takes here: its leading special tokens, the
    longest needle and the question, and one token of haystack."""
    question = piece_ids(model, "\n\nQuestion: " + QUESTION + "\nAnswer:")
    needle = max(len(piece_ids(model, " " + _needle([w] * N_WORDS)[0])) for w in WORDS)
    return len(leading_specials(model)) + len(question) + needle + 1


def needle_length_options(model) -> list[int]:
    """The needle lengths that fit this model: room for a needle, and within its context."""
    least = shortest_prompt(model)
    return [n for n in needle_lengths(model.info.max_positions) if n >= least]


def needle_depths(count: int) -> tuple[float, ...]:
    """count depths evenly from 0 (the haystack's start) to 1 (its end)."""
    if int(count) < 1:
        raise InputError("give at least one depth")
    if int(count) == 1:
        return (0.5,)
    return tuple(round(float(d), 4) for d in np.linspace(0.0, 1.0, int(count)))


def haystack_ids(model, n_tokens: int) -> tuple[int, ...]:
    """The first n_tokens of the bundled documentation as the model reads it (a long text
    every machine has), with the tokenizer's leading special tokens."""
    n_tokens = int(n_tokens)
    if not 2 <= n_tokens <= model.info.max_positions:
        raise InputError(f"a text of {n_tokens:,} tokens: give 2 to the model's context of "
                         f"{model.info.max_positions:,}")
    lead = leading_specials(model)
    ids = []
    for piece in _sentences(model, haystack_text(), n_tokens):
        ids += piece
    if len(lead) + len(ids) < n_tokens:
        raise InputError(f"the bundled documentation holds {len(ids):,} tokens, fewer than "
                         f"{n_tokens:,}")
    return tuple([*lead, *ids][:n_tokens])


def _sentences(model, text: str, need: int) -> list[list[int]]:
    """The haystack's sentences as ids (each with its leading space), at least need tokens in
    all when the text holds them."""
    pieces = [p for p in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if p]
    found, total, batch = [], 0, 64
    for start in range(0, len(pieces), batch):
        for piece in pieces[start:start + batch]:
            ids = tokenized(model, " " + piece, False)
            found.append(ids)
            total += len(ids)
        if total >= need:
            break
    return found


def _check_grid(lengths, depths) -> tuple[list[int], list[float]]:
    lengths = [int(n) for n in np.atleast_1d(lengths)]
    depths = [float(d) for d in np.atleast_1d(depths)]
    if not lengths or not depths:
        raise InputError("give at least one length and one depth")
    bad = [d for d in depths if not 0.0 <= d <= 1.0 or not np.isfinite(d)]
    if bad:
        raise InputError(f"a depth is a fraction of the haystack from 0 (its start) to 1 (its "
                         f"end), got {bad[0]:g}")
    return lengths, depths


def _needle(words: list[str]) -> tuple[str, str]:
    return NEEDLE.format(words=" ".join(words)), " " + " ".join(words)


def _placed(sentences: list[list[int]], budget: int, depth: float):
    """(haystack ids before the needle, after it): budget tokens of whole sentences, the last
    one cut, the needle between sentences at the fraction depth of them."""
    hay, ends = [], []
    for ids in sentences:
        if len(hay) >= budget:
            break
        hay += ids
        ends.append(min(len(hay), budget))
    hay = hay[:budget]
    cut = min([0, *ends], key=lambda end: abs(end - depth * budget))
    return hay[:cut], hay[cut:]


def needle_cases(model, lengths=(512, 1024), depths=(0.0, 0.25, 0.5, 0.75, 1.0),
                 per_cell: int = 1, seed: int = 0, haystack: str | None = None
                 ) -> list[NeedleCase]:
    """Prompts of ``lengths`` tokens (the whole prompt: haystack, needle and question) with a
    needle at each of ``depths`` (fractions from 0 to 1), per_cell needles a cell, their
    words drawn from ``seed``: [NeedleCase], length-major. haystack: text to fill the
    prompts with (default: the bundled Python documentation). Raises InputError in words
    when a length cannot hold the needle and the question, a length and its answer pass the
    model's context, a depth lies outside 0-1, or the haystack is too short."""
    check_causal(model, "a needle in a haystack")
    lengths, depths = _check_grid(lengths, depths)
    if int(per_cell) < 1:
        raise InputError("per_cell must be at least 1")
    lead = leading_specials(model)
    question = piece_ids(model, "\n\nQuestion: " + QUESTION + "\nAnswer:")
    fixed = shortest_prompt(model) - 1
    for length in lengths:
        if length <= fixed:
            raise InputError(f"a length of {length} tokens cannot hold the needle and the "
                             f"question ({fixed} tokens): give a length over {fixed}")
        check_context(model, length + N_WORDS, f"a prompt of {length:,} tokens and its answer")
    text = haystack_text() if haystack is None else str(haystack)[:MAX_HAYSTACK_CHARS]
    sentences = _sentences(model, text, max(lengths))
    if sum(len(s) for s in sentences) < max(lengths):
        raise InputError(f"the haystack holds {sum(len(s) for s in sentences):,} tokens, "
                         f"fewer than the longest prompt's {max(lengths):,}")
    rng = np.random.default_rng(int(seed))
    cases = []
    for length in lengths:
        for depth in depths:
            for _ in range(int(per_cell)):
                cases.append(_case(model, sentences, lead, question, length, depth, rng))
    return cases


def _case(model, sentences, lead, question, length: int, depth: float, rng) -> NeedleCase:
    for _ in range(DRAWS):
        needle, answer = _needle(list(rng.choice(WORDS, N_WORDS, replace=False)))
        needle_ids, answer_ids = piece_ids(model, " " + needle), piece_ids(model, answer)
        before, after = _placed(sentences, length - len(lead) - len(question)
                                - len(needle_ids), depth)
        prompt = [*lead, *before, *needle_ids, *after, *question]
        check_context(model, len(prompt) + len(answer_ids),
                      f"a prompt of {length:,} tokens and its answer")
        if any(prompt.count(token) == 1 for token in answer_ids):
            return NeedleCase(length, depth, needle, QUESTION, answer, tuple(prompt),
                              tuple(answer_ids), len(lead) + len(before))
    raise InputError("no needle drawn has a word this tokenizer writes as a token found once "
                     "in the prompt: the haystack uses every word of the needles")


@dataclass(frozen=True)
class NeedleGrid:
    """Copy accuracy by length x depth: accuracy[i, j] is the mean over the cases of length
    lengths[i] and depth depths[j] of the share of answer tokens predicted right."""
    lengths: tuple[int, ...]
    depths: tuple[float, ...]
    accuracy: np.ndarray  # [len(lengths), len(depths)]
    per_case: np.ndarray  # [n_cases] in the order of the cases

    @property
    def mean(self) -> float:
        return float(np.mean(self.per_case))


def grid_of(cases: list[NeedleCase], per_case) -> NeedleGrid:
    """Per-case accuracies laid out by length x depth (a cell's cases averaged)."""
    lengths = tuple(sorted({c.length for c in cases}))
    depths = tuple(sorted({c.depth for c in cases}))
    sums = np.zeros((len(lengths), len(depths)))
    counts = np.zeros_like(sums)
    for case, value in zip(cases, per_case):
        cell = lengths.index(case.length), depths.index(case.depth)
        sums[cell] += value
        counts[cell] += 1
    with np.errstate(invalid="ignore"):
        return NeedleGrid(lengths, depths, sums / counts, np.asarray(per_case, dtype=float))


def check_cases(cases) -> list[NeedleCase]:
    cases = list(cases)
    if not cases or not all(isinstance(c, NeedleCase) for c in cases):
        raise InputError("give needle cases (needle_cases(model, ...))")
    return cases
