"""load_model and Model: text in, every head's attention (and the pruning score) out."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from . import checkpoints
from .errors import CorruptCheckpointError, InputError
from .trace import AttentionTrace
from .transformer import TransformerStack

# Pasted books are cut before tokenizing; the context is far shorter than this anyway.
MAX_TEXT_CHARS = 200_000
MLM_MASK_FRACTION = 0.15

SCORE_NAMES = {
    "next_token_loss": "next-token cross-entropy (nats/token)",
    "mlm_loss": "masked-LM cross-entropy on a fixed 15% of tokens (nats/token)",
    "embedding_shift": "embedding shift: 1 - cosine(mean-pooled embedding, unmasked one)",
}


@dataclass(frozen=True)
class ModelInfo:
    name: str
    arch: str  # "gpt2" | "bert"
    n_layer: int
    n_head: int
    d_model: int
    d_head: int
    max_positions: int
    vocab_size: int
    source: str  # where the weights came from
    score_kind: str  # "next_token_loss" | "mlm_loss" | "embedding_shift"

    @property
    def causal(self) -> bool:
        return self.arch == "gpt2"

    @property
    def score_name(self) -> str:
        return SCORE_NAMES[self.score_kind]

    @property
    def attention_params_per_layer(self) -> int:
        """W_Q, W_K, W_V, W_O: 4 d_model^2 weights (biases not counted)."""
        return 4 * self.d_model ** 2


@dataclass
class Encoding:
    """A tokenized input, ready for the network."""
    input_ids: list[int]
    token_type_ids: list[int]
    special_mask: list[bool]
    truncated: bool
    n_tokens_before_truncation: int


@dataclass
class ScoreInputs:
    """What score() feeds the network, prepared once so many masks can be scored cheaply."""
    kind: str
    input_ids: torch.Tensor  # [1, T] (with [MASK]s for the MLM score)
    token_type_ids: torch.Tensor | None
    targets: torch.Tensor | None  # next tokens, or the original ids at masked positions
    positions: torch.Tensor | None  # masked positions (MLM)
    reference: torch.Tensor | None  # unmasked mean-pooled embedding (embedding shift)


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


class Model:
    """A checkpoint loaded into our own engine, with its tokenizer."""

    def __init__(self, network: TransformerStack, tokenizer, info: ModelInfo):
        self.network = network
        self.tokenizer = tokenizer
        self.info = info
        self._special_ids = set(tokenizer.all_special_ids)
        # A fast tokenizer is not safe to call from two threads at once ("Already borrowed"),
        # and truncation is a setting on it: app sessions share one Model, so they take turns.
        self._tokenizer_lock = threading.Lock()

    def __repr__(self) -> str:
        i = self.info
        return (f"Model({i.name!r}: {i.arch}, {i.n_layer} layers x {i.n_head} heads, "
                f"d_model {i.d_model})")

    # --- tokenizing ----------------------------------------------------------------------

    def encode(self, text: str, text_pair: str | None = None,
               max_tokens: int | None = None) -> Encoding:
        """Tokenize as the checkpoint's tokenizer does, truncating to the context (or
        max_tokens) and recording that it did."""
        text = clean_text(text)
        if text_pair is not None and not str(text_pair).strip():
            text_pair = None
        if text_pair is not None:
            if self.info.causal:
                raise InputError("sentence pairs are a BERT feature; GPT-2 reads one text")
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
        return Encoding(ids, types, special, n_before > limit, n_before)

    def display_tokens(self, ids: list[int]) -> list[str]:
        """Readable token labels: the token's own text, a space shown as ␣, a newline as ↵."""
        with self._tokenizer_lock:
            tokens = self.tokenizer.convert_ids_to_tokens(ids)
            if self.info.arch == "bert":
                return list(tokens)
            strings = [self.tokenizer.convert_tokens_to_string([token]) for token in tokens]
        labels = []
        for token, text in zip(tokens, strings):
            text = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")
            labels.append(text or token)
        return labels

    # --- tracing -------------------------------------------------------------------------

    def _run_capture(self, ids: list[int], types: list[int] | None, head_mask=None,
                     ablation: str = "zero"):
        """One forward that writes every layer's weights into a single [L, H, T, T] buffer,
        so the numpy array handed out is that buffer itself (no per-layer copies)."""
        n = len(ids)
        mask = None if head_mask is None else self.check_head_mask(head_mask)
        if mask is not None and mask.dim() != 2:
            raise InputError("a trace takes one head mask of shape [layers, heads]")
        buffer = torch.empty(self.info.n_layer, self.info.n_head, n, n, dtype=torch.float32)
        with torch.inference_mode():
            input_ids = torch.tensor([ids], dtype=torch.long)
            token_types = None if types is None else torch.tensor([types], dtype=torch.long)
            last_hidden, _ = self.network(input_ids, token_types, head_mask=mask,
                                          ablation=ablation, attentions_out=buffer)
        return buffer.numpy(), last_hidden[0].numpy()

    def trace(self, text: str, text_pair: str | None = None, max_tokens: int | None = None,
              head_mask=None, ablation: str = "zero") -> AttentionTrace:
        """Every head's attention map for the text (and sentence B, for BERT).

        head_mask [L, H] (1 keeps a head, 0 removes its output; see score()) shows how
        switching heads off changes the maps of the layers above them; a masked head's own
        map is still what its softmax computed."""
        enc = self.encode(text, text_pair, max_tokens)
        attentions, _ = self._run_capture(enc.input_ids, enc.token_type_ids, head_mask, ablation)
        trace = self._make_trace(enc, attentions, text, text_pair)
        if head_mask is not None:
            trace.extra["head_mask"] = np.asarray(head_mask, dtype=np.float32).tolist()
            trace.extra["ablation"] = ablation
        return trace

    def trace_ids(self, ids, token_type_ids=None) -> AttentionTrace:
        """Trace pre-tokenized input (no special tokens are added)."""
        ids = self._check_ids(ids)
        types = [0] * len(ids) if token_type_ids is None else [int(t) for t in token_type_ids]
        if len(types) != len(ids):
            raise InputError("token_type_ids must have one entry per token id")
        enc = Encoding(ids, types, [i in self._special_ids for i in ids], False, len(ids))
        attentions, _ = self._run_capture(ids, types)
        return self._make_trace(enc, attentions, "", None)

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

    def _make_trace(self, enc: Encoding, attentions, text, text_pair) -> AttentionTrace:
        with self._tokenizer_lock:
            tokens = list(self.tokenizer.convert_ids_to_tokens(enc.input_ids))
        return AttentionTrace(
            tokens=tokens,
            token_ids=enc.input_ids, attentions=attentions,
            display_tokens=self.display_tokens(enc.input_ids),
            special_mask=np.array(enc.special_mask, dtype=bool),
            segment_ids=np.array(enc.token_type_ids, dtype=np.int64),
            causal=self.info.causal, truncated=enc.truncated,
            n_tokens_before_truncation=enc.n_tokens_before_truncation,
            model_name=self.info.name, arch=self.info.arch, text=text, text_pair=text_pair)

    def last_hidden_state(self, text: str, text_pair: str | None = None) -> np.ndarray:
        """[T, d_model]: the last hidden state (after GPT-2's final LayerNorm)."""
        enc = self.encode(text, text_pair)
        return self._run_capture(enc.input_ids, enc.token_type_ids)[1]

    def embed(self, text: str) -> np.ndarray:
        """Mean-pooled, L2-normalised last hidden state: the sentence-transformers embedding
        of a MiniLM-style checkpoint."""
        pooled = torch.from_numpy(self.last_hidden_state(text)).mean(0)
        return F.normalize(pooled, dim=0).numpy()

    # --- the pruning score (ANALYSES.md section 5) ----------------------------------------

    def score_inputs(self, text: str, mlm_seed: int = 0) -> ScoreInputs:
        enc = self.encode(text)
        ids = torch.tensor([enc.input_ids], dtype=torch.long)
        types = torch.tensor([enc.token_type_ids], dtype=torch.long)
        kind = self.info.score_kind
        if kind == "next_token_loss":
            if ids.shape[1] < 2:
                raise InputError("the next-token loss needs at least two tokens")
            return ScoreInputs(kind, ids, types, ids[0, 1:], None, None)
        if kind == "mlm_loss":
            candidates = np.flatnonzero(~np.array(enc.special_mask))
            count = max(1, int(round(MLM_MASK_FRACTION * len(candidates))))
            rng = np.random.default_rng(mlm_seed)
            positions = torch.tensor(np.sort(rng.choice(candidates, count, replace=False)))
            masked = ids.clone()
            masked[0, positions] = self.tokenizer.mask_token_id
            return ScoreInputs(kind, masked, types, ids[0, positions], positions, None)
        with torch.no_grad():
            reference = self.network(ids, types)[0].mean(1)[0]
        return ScoreInputs(kind, ids, types, None, None, reference)

    def score_from_last_hidden(self, last_hidden: torch.Tensor, inputs: ScoreInputs):
        """[B, T, d] last hidden states -> [B] scores."""
        if inputs.kind == "next_token_loss":
            logits = self.network.lm_logits(last_hidden[:, :-1])
            targets = inputs.targets.expand(logits.shape[0], -1)
            return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none").mean(1)
        if inputs.kind == "mlm_loss":
            logits = self.network.lm_logits(last_hidden[:, inputs.positions])
            targets = inputs.targets.expand(logits.shape[0], -1)
            return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none").mean(1)
        pooled = last_hidden.mean(1)
        return 1.0 - F.cosine_similarity(pooled, inputs.reference[None, :], dim=-1)

    def check_head_mask(self, head_mask) -> torch.Tensor:
        """[L, H] or [B, L, H] array-like of gates in [0, 1] -> float32 tensor (grad kept)."""
        mask = head_mask if isinstance(head_mask, torch.Tensor) else torch.as_tensor(
            np.asarray(head_mask, dtype=np.float32))
        shape = (self.info.n_layer, self.info.n_head)
        if mask.dim() not in (2, 3) or tuple(mask.shape[-2:]) != shape:
            raise InputError(f"head_mask must have shape {list(shape)} (layers x heads), "
                             f"got {list(mask.shape)}")
        return mask.to(torch.float32)

    def score_tensor(self, inputs: ScoreInputs, head_mask=None, ablation: str = "zero"):
        """Differentiable score: [B] for a [B, L, H] mask, else a 0-d tensor."""
        mask = None if head_mask is None else self.check_head_mask(head_mask)
        batch = 1 if mask is None or mask.dim() == 2 else mask.shape[0]
        ids = inputs.input_ids.expand(batch, -1)
        types = inputs.token_type_ids.expand(batch, -1)
        last_hidden, _ = self.network(ids, types, head_mask=mask, ablation=ablation)
        scores = self.score_from_last_hidden(last_hidden, inputs)
        return scores if mask is not None and mask.dim() == 3 else scores[0]

    def score(self, text: str, head_mask=None, ablation: str = "zero") -> float:
        """The scalar the pruning page measures (info.score_name says which):
        GPT-2 next-token loss, BERT MLM loss, or embedding shift for BERT without an MLM head.
        head_mask [L, H]: 1 keeps a head, 0 removes it (ablation="mean": replaces it by its
        mean output over positions)."""
        with torch.no_grad():
            return float(self.score_tensor(self.score_inputs(text), head_mask, ablation))


def load_model(name: str | os.PathLike = "minilm") -> Model:
    """A bundled name ("minilm"), a local checkpoint folder, or a hub id ("gpt2")."""
    resolved = checkpoints.resolve(name)
    network = checkpoints.load_stack(resolved.folder)
    tokenizer = load_tokenizer(resolved.folder)
    config = network.config
    if config.arch == "gpt2":
        score_kind = "next_token_loss"
    elif config.has_lm_head and tokenizer.mask_token_id is not None:
        score_kind = "mlm_loss"
    else:
        score_kind = "embedding_shift"
    vocab = len(tokenizer)
    if vocab > config.vocab_size:
        raise CorruptCheckpointError(
            f"the tokenizer has {vocab} tokens but the model's embedding only {config.vocab_size}")
    info = ModelInfo(name=resolved.name, arch=config.arch, n_layer=config.n_layer,
                     n_head=config.n_head, d_model=config.d_model, d_head=config.d_head,
                     max_positions=config.max_positions, vocab_size=config.vocab_size,
                     source=resolved.source, score_kind=score_kind)
    return Model(network, tokenizer, info)


_IMPORT_LOCK = threading.Lock()


def load_tokenizer(folder: Path):
    # transformers resolves its names lazily, and two threads importing them for the first
    # time at once can see "cannot import name 'AutoTokenizer'": app sessions load in threads.
    with _IMPORT_LOCK:
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # "sequence longer than max length" noise; we truncate
    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
    except Exception as error:
        raise CorruptCheckpointError(
            f"the tokenizer files in '{folder}' could not be read ({type(error).__name__}: "
            f"{error}); a checkpoint folder needs tokenizer.json or vocab files") from error
    tokenizer.model_max_length = int(1e9)  # we truncate ourselves, to the model's context
    return tokenizer
