"""Prompt pairs for causal interventions: a clean and a corrupted prompt of equal token length,
each with the target and contrast its metric compares (docs/analyses.md, "Causal
interventions").

    from mha_viz.analysis.prompts import PromptPair, ioi_pairs, read_pairs
    pair = PromptPair("When Mary and John went to the store, John gave a drink to",
                      "When Mary and John went to the store, Mary gave a drink to",
                      target=" Mary", contrast=" John")
    pairs = ioi_pairs(model, 16, seed=0)          # ABBA and BABA templates
    pairs = read_pairs(data, "pairs.jsonl")       # columns clean, corrupted, target, contrast

encode_pairs checks what a patching run needs and says what is wrong with which pair: token
counts that differ, identical prompts, a target that is several tokens or that lacks the
leading space the text implies.
"""

from __future__ import annotations

import csv
import io
import json
import random
from collections.abc import Iterable, Sized
from dataclasses import dataclass

import numpy as np
import torch

from ..core.errors import InputError
from ..core.text import decode_text_file

MAX_PAIRS = 1024  # a patching run over more pairs belongs in batches of its own
MAX_PAIRS_FILE_BYTES = 5 * 2**20
PAIR_COLUMNS = ("clean", "corrupted", "target", "contrast")


@dataclass(frozen=True)
class PromptPair:
    clean: str | tuple[int, ...]  # a text, or token ids (used as given: no special tokens added)
    corrupted: str | tuple[int, ...]
    target: str | int | None = None  # None: a metric that reads no target (a KL divergence)
    contrast: str | int | None = None
    position: int = -1  # the position whose prediction the metric reads (-1: the last)


@dataclass(frozen=True)
class EncodedPair:
    """A pair as token ids, checked: equal lengths, single-token target and contrast."""
    index: int  # its place in the list given
    clean_ids: tuple[int, ...]
    corrupted_ids: tuple[int, ...]
    position: int  # non-negative
    target: int | None
    contrast: int | None

    @property
    def n_tokens(self) -> int:
        return len(self.clean_ids)

    @property
    def first_difference(self) -> int:
        return next(i for i, (a, b) in enumerate(zip(self.clean_ids, self.corrupted_ids))
                    if a != b)


def token_ids(value) -> tuple[int, ...] | None:
    """value as token ids, if it is a sequence of whole numbers (a list, a tuple, a 1-D
    numpy array or tensor); None if it is not."""
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Sized):
        return None
    if isinstance(value, (np.ndarray, torch.Tensor)):
        if value.ndim != 1 or not str(value.dtype).replace("torch.", "").startswith(
                ("int", "uint")):
            return None
        value = value.tolist()
    items = list(value)
    if not items or not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        return None
    return tuple(items)


def as_pairs(clean, corrupted=None, target=None, contrast=None, position=-1,
             needs_target: bool = True) -> list[PromptPair]:
    """The pairs in any of a researcher's spellings -> a list of PromptPairs.

    - two texts (or two lists of token ids), with the target (and contrast) the metric
      measures;
    - a PromptPair, or a list of them (each with its own target and contrast);
    - a list of (clean, corrupted) tuples of texts or of token ids, with one target for all;
    - two lists of equal length, clean prompts and corrupted prompts, with one target.
    A list mixes no spellings: a message names the first pair that differs. needs_target=False:
    the metric reads no target token (a KL divergence), so none need be given."""
    if isinstance(clean, PromptPair):
        return [clean]
    clean_ids = token_ids(clean)
    if isinstance(clean, str) or clean_ids is not None:
        corrupted_ids = token_ids(corrupted)
        if clean_ids is not None and corrupted_ids is None:
            raise InputError("the clean prompt is token ids: give the corrupted prompt as token "
                             "ids too (or a list of PromptPair)")
        if clean_ids is None and not isinstance(corrupted, str):
            raise InputError("give a corrupted prompt beside the clean one (or a list of "
                             "PromptPair)")
        if needs_target:
            _check_target(target)
        if clean_ids is not None:
            return [PromptPair(clean_ids, corrupted_ids, target, contrast, position)]
        return [PromptPair(clean, corrupted, target, contrast, position)]
    if isinstance(clean, (bytes, dict)) or not isinstance(clean, Iterable):
        raise InputError(f"the pairs are a {type(clean).__name__}: give two texts, a "
                         f"PromptPair, a list of them, (clean, corrupted) tuples or two lists")
    pairs = list(clean)
    if not pairs:
        raise InputError("the list of prompt pairs is empty")
    if len(pairs) > MAX_PAIRS:
        raise InputError(f"{len(pairs):,} prompt pairs is more than one run takes "
                         f"({MAX_PAIRS:,}): split them into runs of at most {MAX_PAIRS:,}")
    if corrupted is not None:  # two lists: clean prompts and corrupted prompts
        if isinstance(corrupted, str) or not isinstance(corrupted, Iterable):
            raise InputError(f"the corrupted prompts are a {type(corrupted).__name__}: give a "
                             f"list of them, as long as the clean prompts")
        corrupted = list(corrupted)
        if len(corrupted) != len(pairs):
            raise InputError(f"{len(pairs)} clean prompts but {len(corrupted)} corrupted ones: "
                             f"pair {min(len(pairs), len(corrupted))} has no partner")
        for index, (a, b) in enumerate(zip(pairs, corrupted)):
            if not ((isinstance(a, str) and isinstance(b, str))
                    or (token_ids(a) is not None and token_ids(b) is not None)):
                raise InputError(f"pair {index} is a {type(a).__name__} and a "
                                 f"{type(b).__name__}: two lists hold texts (or token ids)")
        pairs = list(zip(pairs, corrupted))
    first = _spelling(pairs[0], 0)
    for index, pair in enumerate(pairs):
        if _spelling(pair, index) != first:
            raise InputError(f"pair {index} is a {_spelling(pair, index)} but pair 0 a {first}: "
                             f"give every pair the same way")
    if first == "PromptPair":
        if needs_target:
            for index, pair in enumerate(pairs):
                if pair.target is None:
                    raise InputError(f"pair {index} names no target, and the metric reads one")
        return pairs
    if needs_target:
        _check_target(target)
    if first == "(clean, corrupted) tuple of token ids":
        return [PromptPair(token_ids(a), token_ids(b), target, contrast, position)
                for a, b in pairs]
    return [PromptPair(a, b, target, contrast, position) for a, b in pairs]


def _spelling(pair, index: int) -> str:
    if isinstance(pair, PromptPair):
        return "PromptPair"
    if isinstance(pair, (tuple, list)) and len(pair) == 2:
        if all(isinstance(text, str) for text in pair):
            return "(clean, corrupted) tuple"
        if all(token_ids(ids) is not None for ids in pair):
            return "(clean, corrupted) tuple of token ids"
    raise InputError(f"pair {index} is a {type(pair).__name__}, not a PromptPair or a "
                     f"(clean, corrupted) tuple of two texts or two lists of token ids")


def _check_target(target) -> None:
    if target is None:
        raise InputError("give the token the metric reads: metric=TargetMetric(-1, ' Mary', "
                         "' John') (position, target, contrast; its kind any metric), or "
                         "PromptPairs with their own target; a metric function that reads no "
                         "target (Metric(..., needs_target=False)) needs none")


def encode_pairs(model, pairs: list[PromptPair], needs_contrast: bool) -> list[EncodedPair]:
    """Tokenize and check every pair; the first problem found is raised, naming the pair."""
    encoded = []
    for index, pair in enumerate(pairs):
        name = f"pair {index}" if len(pairs) > 1 else "the pair"
        clean = _encoded(model, pair.clean, name)
        corrupted = _encoded(model, pair.corrupted, name)
        if clean.truncated or corrupted.truncated:
            raise InputError(f"{name} is longer than the model's context of "
                             f"{model.info.max_positions} tokens")
        n_clean, n_corr = len(clean.input_ids), len(corrupted.input_ids)
        if n_clean != n_corr:
            raise InputError(f"{name}: the clean prompt is {n_clean} tokens and the corrupted "
                             f"prompt {n_corr}; patching compares position by position, so both "
                             f"must have the same number of tokens")
        if clean.input_ids == corrupted.input_ids:
            raise InputError(f"{name}: the clean and corrupted prompts are the same tokens, so "
                             f"nothing can be patched (and the normalized effect, which divides "
                             f"by their difference, is undefined)")
        position = pair.position + n_clean if pair.position < 0 else pair.position
        if not 0 <= position < n_clean:
            raise InputError(f"{name}: position {pair.position} is outside its {n_clean} tokens")
        if needs_contrast and pair.contrast is None:
            raise InputError(f"{name}: the logit difference needs a contrast token")
        text = pair.clean if isinstance(pair.clean, str) else ""  # ids: no spelling rule
        target = (None if pair.target is None
                  else metric_token(model, pair.target, text, name, "target"))
        contrast = (None if pair.contrast is None
                    else metric_token(model, pair.contrast, text, name, "contrast"))
        if contrast is not None and contrast == target:
            raise InputError(f"{name}: the target and the contrast are the same token")
        encoded.append(EncodedPair(index, tuple(clean.input_ids), tuple(corrupted.input_ids),
                                   position, target, contrast))
    return encoded


@dataclass(frozen=True)
class _Ids:
    """Token ids given by the caller, as an encoding: used as they are."""
    input_ids: tuple[int, ...]
    truncated: bool = False


def _encoded(model, prompt, name: str):
    if isinstance(prompt, str):
        return model.encode(prompt)
    try:
        return _Ids(tuple(model._check_ids(list(prompt))))
    except InputError as error:
        raise InputError(f"{name}: {error}") from None


@dataclass(frozen=True)
class PromptComparison:
    """Two prompts as the model reads them, side by side (what a person checks before
    patching): their display tokens and where they differ."""
    clean_tokens: list[str]
    corrupted_tokens: list[str]
    differing: list[int]  # positions (of the shorter) whose tokens differ

    @property
    def same_length(self) -> bool:
        return len(self.clean_tokens) == len(self.corrupted_tokens)


def compare_prompts(model, clean: str, corrupted: str) -> PromptComparison:
    """Tokenize both prompts (an empty one raises InputError) and mark the positions where
    their tokens differ."""
    clean_ids = model.encode(clean).input_ids
    corrupted_ids = model.encode(corrupted).input_ids
    differing = [i for i, (a, b) in enumerate(zip(clean_ids, corrupted_ids)) if a != b]
    return PromptComparison(model.display_tokens(list(clean_ids)),
                            model.display_tokens(list(corrupted_ids)), differing)


def metric_token(model, token, text: str, name: str = "the pair", role: str = "target") -> int:
    """A metric token by id or by label, with the tokenizer's own rules: a label that is
    several tokens, or that lacks the leading space a new word takes after this text
    ("Mary" where the model would write " Mary"), is refused with the spelling to use."""
    try:
        token_id = model.token_id(token)
    except InputError as error:
        raise InputError(f"{name}: the {role} {error}") from None
    if isinstance(token, str) and not token[:1].isspace() and text and (
            text[-1].isalnum() or text[-1] in ",.;:!?"):
        spaced = " " + token
        try:
            spaced_id = model.token_id(spaced)
        except InputError:
            return token_id
        if spaced_id != token_id and model.encode(text + spaced, max_tokens=None).input_ids[
                -1] == spaced_id:
            raise InputError(
                f"{name}: the {role} '{token}' has no leading space, but after '…{text[-12:]}' "
                f"the model writes the next word with one: use '{spaced}' (token "
                f"{spaced_id}), or give the id {token_id} if you mean '{token}' itself")
    return token_id


# --- reading pairs from a file --------------------------------------------------------------


def read_pairs(data: bytes, name: str) -> list[PromptPair]:
    """Pairs from a .csv (a header with clean, corrupted, target, contrast and optionally
    position) or a .jsonl (one object per line with those fields)."""
    text = decode_text_file(data, name, MAX_PAIRS_FILE_BYTES,
                            "a file of prompt pairs may have")
    kind = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if kind == "csv":
        rows = _csv_rows(text, name)
    elif kind in ("jsonl", "ndjson"):
        rows = _jsonl_rows(text, name)
    else:
        raise InputError(f"{name}: prompt pairs come as .csv or .jsonl")
    if not rows:
        raise InputError(f"{name} holds no prompt pairs")
    return as_pairs([_pair_of(row, f"{name}, pair {index}") for index, row in enumerate(rows)])


def _csv_rows(text: str, name: str) -> list[dict]:
    try:
        reader = csv.DictReader(io.StringIO(text))
        rows = list(reader)
    except csv.Error as error:
        raise InputError(f"{name} is not a readable CSV file ({error})") from None
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in PAIR_COLUMNS[:3] if c not in header]
    if missing:
        raise InputError(f"{name} lacks the column(s) {', '.join(missing)}; its header is "
                         f"{', '.join(header) or '(empty)'}")
    return [{k.strip(): v for k, v in row.items() if k} for row in rows]


def _jsonl_rows(text: str, name: str) -> list[dict]:
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            raise InputError(f"{name}, line {number}, is not valid JSON") from None
        if not isinstance(item, dict):
            raise InputError(f"{name}, line {number}, is not an object with the fields "
                             f"{', '.join(PAIR_COLUMNS)}")
        rows.append(item)
    return rows


def _pair_of(row: dict, where: str) -> PromptPair:
    values = {}
    for column in PAIR_COLUMNS:
        value = row.get(column)
        if value is None or value == "":
            if column == "contrast":
                values[column] = None
                continue
            raise InputError(f"{where} has no {column}")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise InputError(f"{where}: {column} must be text or a token id")
        values[column] = value
    if not isinstance(values["clean"], str) or not isinstance(values["corrupted"], str):
        raise InputError(f"{where}: clean and corrupted must be text")
    position = row.get("position", -1)
    try:
        position = int(position) if position not in (None, "") else -1
    except (TypeError, ValueError):
        raise InputError(f"{where}: position must be a whole number") from None
    return PromptPair(values["clean"], values["corrupted"], values["target"],
                      values["contrast"], position)


def pairs_to_jsonl(pairs: list[PromptPair]) -> str:
    return "".join(json.dumps({"clean": p.clean, "corrupted": p.corrupted, "target": p.target,
                               "contrast": p.contrast, "position": p.position}) + "\n"
                   for p in pairs)


# --- the indirect-object task (Wang et al. 2023) ------------------------------------------

# {A} is the indirect object (the answer), {B} the subject, who appears twice. ABBA templates
# name A first, BABA templates B first; the corrupted prompt names A where the clean one
# repeats B, so the answer flips (the clean prompt favours A, the corrupted one B).
IOI_TEMPLATES = (
    "When {A} and {B} went to the {PLACE}, {B} gave a {OBJECT} to",
    "When {B} and {A} went to the {PLACE}, {B} gave a {OBJECT} to",
    "After {A} and {B} went to the {PLACE}, {B} gave a {OBJECT} to",
    "After {B} and {A} went to the {PLACE}, {B} gave a {OBJECT} to",
    "Then, {A} and {B} had a long day at the {PLACE}. {B} gave a {OBJECT} to",
    "Then, {B} and {A} had a long day at the {PLACE}. {B} gave a {OBJECT} to",
    "While {A} and {B} were working at the {PLACE}, {B} handed a {OBJECT} to",
    "While {B} and {A} were working at the {PLACE}, {B} handed a {OBJECT} to",
)
IOI_NAMES = ("Mary", "John", "Tom", "James", "Paul", "Mark", "Anna", "Sarah", "Michael",
             "David", "Lisa", "Kate", "Peter", "Emma", "Alice", "Bob", "Jack", "Laura",
             "Dan", "Ben", "Sam", "Max", "Lucy", "Rose", "Adam", "Eric", "Jane", "Kevin")
IOI_PLACES = ("store", "park", "school", "office", "station", "garden", "hospital",
              "restaurant", "market", "library")
IOI_OBJECTS = ("drink", "book", "ring", "bag", "letter", "basketball", "kiss", "snack",
               "necklace", "computer")


def ioi_pairs(model, n: int = 16, seed: int = 0, templates: str = "both",
              corruption: str = "name") -> list[PromptPair]:
    """n indirect-object pairs: names the model writes as one token after a space, a place
    and an object drawn with ``seed``; templates "abba", "baba" or "both" (alternating).
    Each pair: target " A" (the indirect object), contrast " B" (the subject). corruption
    "name": the corrupted prompt names A where the clean one repeats B (the answer flips);
    "abc": it names a third person C there (Wang et al. 2023's ABC distribution, the
    reference their mean ablation reads). The same seed draws the same clean prompts."""
    if corruption not in ("name", "abc"):
        raise InputError("corruption must be 'name' or 'abc'")
    if not 1 <= int(n) <= MAX_PAIRS:
        raise InputError(f"the number of pairs must be between 1 and {MAX_PAIRS}")
    chosen = {"abba": IOI_TEMPLATES[0::2], "baba": IOI_TEMPLATES[1::2],
              "both": IOI_TEMPLATES}.get(templates)
    if chosen is None:
        raise InputError("templates must be 'abba', 'baba' or 'both'")
    names = [name for name in IOI_NAMES if _one_token(model, " " + name)]
    needed = 3 if corruption == "abc" else 2
    if len(names) < needed:
        raise InputError(f"this model's tokenizer writes fewer than {needed} of the template "
                         f"names as one token, so it cannot make these indirect-object pairs")
    rng = random.Random(seed)
    pairs = []
    for index in range(int(n)):
        a, b = rng.sample(names, 2)
        template = chosen[index % len(chosen)]
        fill = dict(PLACE=rng.choice(IOI_PLACES), OBJECT=rng.choice(IOI_OBJECTS))
        clean = template.format(A=a, B=b, **fill)
        # the subject's second mention becomes the indirect object's name (or a third
        # person's): the same token count
        head, _, tail = template.rpartition("{B}")
        c = (random.Random(f"{seed}:{index}").choice([x for x in names if x not in (a, b)])
             if corruption == "abc" else None)
        corrupted = (head + ("{A}" if corruption == "name" else "{C}") + tail).format(
            A=a, B=b, C=c, **fill)
        pairs.append(PromptPair(clean, corrupted, " " + a, " " + b))
    return pairs


def _one_token(model, text: str) -> bool:
    try:
        model.token_id(text)
        return True
    except InputError:
        return False


def _check_leading_space(model, replaced: int, replacement, index: int) -> None:
    """A word that replaces one written after a space takes the space too: "Alice" for
    " John" would glue it to the word before ("park,Alice"). Refused with the spelling to
    use, as metric_token refuses a target without its space."""
    if not isinstance(replacement, str) or replacement[:1].isspace():
        return
    shown = model.display_tokens([int(replaced)])[0]
    if shown[:1] not in ("␣", "▁", "Ġ"):
        return
    spaced = " " + replacement
    try:
        spaced_id = model.token_id(spaced)
    except InputError:
        return
    raise InputError(f"the token at position {index}, '{shown}', starts with a space and "
                     f"'{replacement}' has none, so the text would run the two words "
                     f"together: use '{spaced}' (token {spaced_id})")


def swap_token(model, text: str, position: int, replacement: str | int) -> str:
    """A corrupted prompt: ``text`` with its token at ``position`` replaced by another single
    token (a label such as " John", or an id); the result has the same token count."""
    encoding = model.encode(text)
    ids = list(encoding.input_ids)
    n = len(ids)
    index = position + n if position < 0 else position
    if not 0 <= index < n:
        raise InputError(f"position {position} is outside the text's {n} tokens")
    if encoding.special_mask[index]:
        raise InputError(f"token {index} is a special token of the model; pick a word")
    new_id = model.token_id(replacement)
    _check_leading_space(model, ids[index], replacement, index)
    ids[index] = new_id
    start = 1 if encoding.special_mask[0] else 0
    stop = n - 1 if encoding.special_mask[-1] and n > 1 else n
    corrupted = model.tokenizer.decode(ids[start:stop])
    again = model.encode(corrupted).input_ids
    if len(again) != n:
        raise InputError(f"with {model.display_tokens([new_id])[0]} at position {index} the "
                         f"text re-tokenizes to {len(again)} tokens, not {n}: pick a "
                         f"replacement that stays one token in place")
    return corrupted
