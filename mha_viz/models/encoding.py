"""Text to token ids: Encoding, clean_text and the TextInput mixin (encode, pre-tokenized
ids), shared by every model class."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import InputError
from .tokens import Tokenizing

# Pasted books are cut before tokenizing; the context is far shorter than this anyway.
MAX_TEXT_CHARS = 200_000


@dataclass
class Encoding:
    """A tokenized input, ready for the network."""
    input_ids: list[int]
    token_type_ids: list[int]
    special_mask: list[bool]
    truncated: bool
    n_tokens_before_truncation: int
    # characters of the text as given, when it was longer than MAX_TEXT_CHARS (only that
    # many were tokenized); None otherwise
    n_chars_given: int | None = None


def clean_text(text) -> str:
    """Reject what cannot be traced; make odd Unicode safe for the tokenizer."""
    if text is None:
        raise InputError("no text given: type a sentence to trace")
    if not isinstance(text, str):
        raise InputError(f"text must be a string, got {type(text).__name__}")
    # Lone surrogates (from broken copy-paste) cannot be encoded as UTF-8: make them U+FFFD.
    text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if not text.strip():
        raise InputError("the text is empty: type a sentence to trace")
    return text[:MAX_TEXT_CHARS]


class TextInput(Tokenizing):
    """Tokenizing as the checkpoint does, within the model's context (needs self.info)."""

    # --- tokenizing ----------------------------------------------------------------------

    def encode(self, text: str, text_pair: str | None = None,
               max_tokens: int | None = None) -> Encoding:
        """Tokenize as the checkpoint's tokenizer does, truncating to the context (or
        max_tokens) and recording that it did."""
        n_chars = len(text) if isinstance(text, str) else 0
        text = clean_text(text)
        if text_pair is not None and not str(text_pair).strip():
            text_pair = None
        if text_pair is not None:
            if self.info.causal:
                raise InputError("sentence pairs are a BERT feature; a causal model reads one "
                                 "text")
            text_pair = clean_text(text_pair)
        limit = self.info.max_positions if max_tokens is None else min(
            int(max_tokens), self.info.max_positions)
        if limit < 2:
            raise InputError("max_tokens must be at least 2")
        with self._tokenizer_lock:
            full = self.tokenizer(text, text_pair, add_special_tokens=True, truncation=False,
                                  verbose=False)
            n_before = len(full["input_ids"])
            encoded = full
            if n_before > limit:
                encoded = self.tokenizer(text, text_pair, add_special_tokens=True,
                                         truncation=True, max_length=limit)
        ids = list(encoded["input_ids"])
        types = list(encoded.get("token_type_ids") or [0] * len(ids))
        special = [i in self._special_ids for i in ids]
        if all(special):
            raise InputError("the text has no tokens this model's tokenizer keeps (it dropped "
                             "every character, e.g. control characters only)")
        cut = n_chars > MAX_TEXT_CHARS
        return Encoding(ids, types, special, n_before > limit or cut, n_before,
                        n_chars if cut else None)

    def n_tokens(self, text: str, text_pair: str | None = None,
                 max_tokens: int | None = None) -> int:
        """How many tokens trace(text, text_pair, max_tokens) reads: the text's tokens, cut
        to the context (or max_tokens). What a page counts before it runs anything."""
        return len(self.encode(text, text_pair, max_tokens).input_ids)

    # --- tracing -------------------------------------------------------------------------

    def encoding_of_ids(self, ids) -> Encoding:
        """Pre-tokenized ids (a corpus segment, special tokens included) as an Encoding:
        what score_inputs, and so every pruning analysis, also accepts instead of a text."""
        ids = [int(i) for i in ids]
        return Encoding(ids, [0] * len(ids), [i in self._special_ids for i in ids], False,
                        len(ids))

    def token_labels(self, ids) -> tuple[list[str], list[str]]:
        """(tokens, display tokens) of pre-tokenized ids, as a trace of them holds them."""
        ids = [int(i) for i in ids]
        with self._tokenizer_lock:
            tokens = list(self.tokenizer.convert_ids_to_tokens(ids))
        return tokens, self.display_tokens(ids)

    def _check_ids(self, ids) -> list[int]:
        ids = [int(i) for i in np.asarray(ids).reshape(-1)]
        if not ids:
            raise InputError("no token ids given")
        if len(ids) > self.info.max_positions:
            raise InputError(f"{len(ids)} token ids exceed the model's context of "
                             f"{self.info.max_positions}")
        if min(ids) < 0 or max(ids) >= self.info.vocab_size:
            raise InputError(f"token ids must lie in [0, {self.info.vocab_size})")
        return ids
