"""A checkpoint's tokenizer as every model of mha-viz uses it: which ids are special, readable
token labels, and one caller at a time (a fast tokenizer is not thread-safe)."""

from __future__ import annotations

import threading

import numpy as np

from ..core.errors import InputError
from ..core.text import visible


# The single-token roles a Hugging Face tokenizer names (its special_tokens_map, "_token"
# dropped): what a trace records of its tokenizer's special tokens.
SPECIAL_ROLES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")


class Tokenizing:
    """The tokenizer side of a loaded model (Model, EncoderDecoderModel)."""

    # results refer to a loaded model but never own its weights (core.budget.nbytes skips it)
    shared_by_results = True

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        # [UNK] stands for real text (a 101-character word in BERT): not special, unless the
        # same id also serves as BOS/EOS/... (GPT-2's <|endoftext|> is all of them)
        named = {getattr(tokenizer, f"{role}_token_id", None)
                 for role in ("bos", "eos", "sep", "cls", "pad", "mask")}
        unknown = tokenizer.unk_token_id
        self._special_ids = set(tokenizer.all_special_ids) - (
            {unknown} if unknown is not None and unknown not in named else set())
        # WordPiece tokens ("##ing") read as they are; byte-level BPE tokens ("Ġthe") need
        # decoding to be readable.
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._wordpiece = type(getattr(backend, "model", None)).__name__ == "WordPiece"
        # A fast tokenizer is not safe to call from two threads at once ("Already borrowed"),
        # and truncation is a setting on it: app sessions share one Model, so they take turns.
        self._tokenizer_lock = threading.Lock()

    def build_tokenizer(self) -> None:
        """A tokenizer built on demand (a cached GGUF's: checkpoints.tokenizer_on_demand) built
        now, importing transformers, so that no visitor's run waits for that import later;
        nothing for any other tokenizer."""
        build = getattr(self.tokenizer, "built", None)
        if callable(build):
            build()

    def identity(self) -> tuple:
        """What names this model in a stored result's key (core.digest): the checkpoint it
        read and where its weights sit (the same checkpoint in another dtype computes other
        numbers)."""
        return (self.info.name, self.info.dtype, self.info.device)

    @property
    def special_tokens(self) -> dict[str, str]:
        """The tokenizer's special tokens by role ({"cls": "[CLS]", "sep": "[SEP]", ...} for
        BERT; {"bos": ..., "eos": ...} for most causal models): traces keep them, so an
        analysis asks for a role instead of naming a family's token."""
        named = self.tokenizer.special_tokens_map
        return {role: str(named[f"{role}_token"]) for role in SPECIAL_ROLES
                if named.get(f"{role}_token")}

    def display_tokens(self, ids: list[int]) -> list[str]:
        """Readable token labels: the token's own text, a space shown as ␣, a newline as ↵,
        other control and text-direction characters as escapes (mha_viz.core.text.visible)."""
        with self._tokenizer_lock:
            tokens = self.tokenizer.convert_ids_to_tokens(ids)
            if self._wordpiece:
                return [visible(token) for token in tokens]
            strings = [self.tokenizer.convert_tokens_to_string([token]) for token in tokens]
        labels = []
        for token, text in zip(tokens, strings):
            text = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")
            labels.append(visible(text or token))
        return labels

    def token_id(self, token: int | str) -> int:
        """A token id from an id or from text that is exactly one token (" Paris", or the
        vocabulary's own spelling "ĠParis")."""
        if isinstance(token, (int, np.integer)) and not isinstance(token, bool):
            if not 0 <= int(token) < self.info.vocab_size:
                raise InputError(f"token id {token} is outside the vocabulary "
                                 f"[0, {self.info.vocab_size})")
            return int(token)
        if not isinstance(token, str) or not token:
            raise InputError("a target token is an id or a non-empty string")
        with self._tokenizer_lock:
            ids = self.tokenizer(token, add_special_tokens=False)["input_ids"]
            if len(ids) != 1:
                vocab_id = self.tokenizer.convert_tokens_to_ids(token)
                if isinstance(vocab_id, int) and vocab_id != self.tokenizer.unk_token_id:
                    return vocab_id
                pieces = self.tokenizer.convert_ids_to_tokens(ids)
        if len(ids) == 1:
            return int(ids[0])
        raise InputError(f"{token!r} is {len(ids)} tokens for this model ({', '.join(pieces)}); "
                         f"a target must be a single token")
