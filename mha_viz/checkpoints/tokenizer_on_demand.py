"""A cached GGUF's tokenizer: transformers' fast tokenizer, built the first time something needs
more than a trace asks of it.

Importing transformers took 0.8-1.4 s of a server's start on a 2-core machine (its package
walks every model's folder for its lazy names), on the way to the first figure. A trace asks
its tokenizer only what the `tokenizers` backend computes: a text's encoding, the tokens of
ids, a token's text, the special tokens and their ids. FastTokenizerOnDemand answers those
as PreTrainedTokenizerFast (transformers 5's TokenizersBackend) answers them over the same
backend, with the same calls on it; anything else builds that tokenizer, over this backend,
and asks it (from then on, everything goes to it). The weights cache hands one out only for a
GGUF whose answers it compared with the built tokenizer's when it wrote the cache
(``differences``); the tests compare them on every GGUF family too.
"""

from __future__ import annotations

import threading
from typing import Any

# transformers' SPECIAL_TOKENS_ATTRIBUTES, in its order (all_special_tokens lists them so)
ROLES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
# what PreTrainedTokenizerFast's call returns for one text (its model_input_names)
MODEL_INPUT_NAMES = ("input_ids", "attention_mask")
# texts whose encodings the weights cache compares before it keeps a tokenizer
PROBES = ("", "The cat sat on the mat.", "  two spaces, a tab\tand a newline\n",
          "digits 1234567 and 3.14", "ünïcödé ✓ 漢字 🙂 ‮")


class FastTokenizerOnDemand:
    """transformers' PreTrainedTokenizerFast over ``backend`` (a `tokenizers.Tokenizer`) with
    these special tokens (its keyword arguments: bos_token, ..., additional_special_tokens),
    built on first need. The one difference a caller can see before it is built: a call
    returns a dict, not a BatchEncoding (the same keys and lists)."""

    def __init__(self, backend, special: dict):
        fields = self.__dict__  # __setattr__ below forwards to the built tokenizer
        fields["_backend"], fields["_special"] = backend, dict(special)
        fields["_built"], fields["_settings"] = None, {}
        fields["_lock"] = threading.Lock()

    def built(self):
        """The PreTrainedTokenizerFast (transformers imported and the tokenizer made now, once)."""
        with self._lock:
            if self._built is None:
                from .gguf_file import fast_tokenizer

                tokenizer = fast_tokenizer(self._backend, self._special)
                for name, value in self._settings.items():
                    setattr(tokenizer, name, value)
                self.__dict__["_built"] = tokenizer
        return self._built

    # --- what a trace asks: as TokenizersBackend answers it --------------------------------

    def __call__(self, text, text_pair=None, add_special_tokens: bool = True,
                 truncation=None, verbose: bool = True, **kwargs):
        if (self._built is not None or kwargs or truncation not in (None, False)
                or not isinstance(text, str)
                or not (text_pair is None or isinstance(text_pair, str))):
            return self.built()(text, text_pair, add_special_tokens=add_special_tokens,
                                truncation=truncation, verbose=verbose, **kwargs)
        backend = self._backend
        if backend.truncation is not None:  # set_truncation_and_padding, not truncating
            backend.no_truncation()
        if backend.padding is not None:
            backend.no_padding()
        backend.encode_special_tokens = False  # split_special_tokens' default
        encoding, = backend.encode_batch([(text, text_pair)] if text_pair else [text],
                                         add_special_tokens=add_special_tokens,
                                         is_pretokenized=False)
        return {"input_ids": encoding.ids, "attention_mask": encoding.attention_mask}

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
        if isinstance(ids, int):
            return self._backend.id_to_token(ids)
        skipped = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._backend.id_to_token(int(i)) for i in ids if int(i) not in skipped]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        decoder = self._backend.decoder
        return decoder.decode(tokens) if decoder is not None else " ".join(tokens)

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self._token_id(tokens)
        return [self._token_id(token) for token in tokens]

    def _token_id(self, token: str) -> int | None:
        index = self._backend.token_to_id(token)
        if index is None:
            unknown = self._special.get("unk_token")
            return None if unknown is None else self._backend.token_to_id(str(unknown))
        return index

    @property
    def special_tokens_map(self) -> dict[str, str]:
        return {f"{role}_token": str(self._special[f"{role}_token"]) for role in ROLES
                if self._special.get(f"{role}_token") is not None}

    @property
    def all_special_tokens(self) -> list[str]:
        found = list(self.special_tokens_map.values())
        found += [str(t) for t in self._special.get("additional_special_tokens") or ()]
        return list(dict.fromkeys(found))  # the first of each, in order

    @property
    def all_special_ids(self) -> list[int]:
        return self.convert_tokens_to_ids(self.all_special_tokens)

    @property
    def backend_tokenizer(self):
        return self._backend

    def __len__(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    # --- everything else: the built tokenizer's ------------------------------------------

    def __getattr__(self, name: str) -> Any:  # only for names not found above
        if name.startswith("__"):  # copy's and pickle's probes: not a tokenizer's question
            raise AttributeError(name)
        for suffix, as_id in (("_token_id", True), ("_token", False)):
            role = name[:-len(suffix)] if name.endswith(suffix) else None
            if role in ROLES and self._built is None:
                token = self._special.get(f"{role}_token")
                if token is None:
                    return None
                return self._token_id(str(token)) if as_id else str(token)
        return getattr(self.built(), name)

    def __setattr__(self, name: str, value) -> None:
        with self._lock:
            if self._built is None and name == "model_max_length":  # load_model sets it
                self._settings[name] = value
                return
        setattr(self.built(), name, value)

    def __repr__(self) -> str:
        if self._built is not None:
            return repr(self._built)
        return f"FastTokenizerOnDemand({len(self)} tokens; transformers' not built yet)"

    def differences(self, built) -> list[str]:
        """What this answers otherwise than ``built`` (a PreTrainedTokenizerFast over a copy of
        this backend, made from the same special tokens) on every question above: the special
        tokens, the length, the probe texts' encodings, the first tokens' ids and texts.
        Empty when they agree."""
        found = []

        def compare(what: str, ours, theirs) -> None:
            if ours != theirs:
                found.append(f"{what}: {ours!r:.80} against {theirs!r:.80}")

        compare("the backend", self._backend.to_str(), built.backend_tokenizer.to_str())
        for name in ("special_tokens_map", "all_special_tokens", "all_special_ids"):
            compare(name, getattr(self, name), getattr(built, name))
        for role in ROLES:
            for name in (f"{role}_token", f"{role}_token_id"):
                compare(name, getattr(self, name), getattr(built, name, None))
        compare("the length", len(self), len(built))
        texts = PROBES + (" ".join(self.all_special_tokens[:8]),)
        for text in texts:
            for special in (True, False):
                compare(f"the encoding of {text!r}", self(text, add_special_tokens=special),
                        dict(built(text, add_special_tokens=special)))
        ids = list(range(min(len(self), 512)))
        compare("the tokens", self.convert_ids_to_tokens(ids), built.convert_ids_to_tokens(ids))
        tokens = built.convert_ids_to_tokens(ids)
        compare("the tokens' texts", [self.convert_tokens_to_string([t]) for t in tokens],
                [built.convert_tokens_to_string([t]) for t in tokens])
        return found
