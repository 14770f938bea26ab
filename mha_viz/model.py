"""load_model and Model: text in, every head's attention (and the pruning score) out."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from . import checkpoints, memory
from .errors import CorruptCheckpointError, InputError
from .interventions import Interventions
from .ondemand import LayerInputMaps
from .tokens import Tokenizing
from .trace import MATERIALISE_MAX_BYTES, AttentionTrace
from .transformer import CHUNKED_FROM, QUERY_CHUNK, TransformerStack

# Pasted books are cut before tokenizing; the context is far shorter than this anyway.
MAX_TEXT_CHARS = 200_000
MLM_MASK_FRACTION = 0.15
# maps="auto" holds every map while they take at most this; longer inputs get on-demand maps.
AUTO_FULL_MAPS_BYTES = MATERIALISE_MAX_BYTES

SCORE_NAMES = {
    "next_token_loss": "next-token cross-entropy (nats/token)",
    "mlm_loss": "masked-LM cross-entropy on a fixed 15% of tokens (nats/token)",
    "embedding_shift": "embedding shift: 1 - cosine(mean-pooled embedding, unmasked one)",
    "target_loss": "cross-entropy of the target, teacher-forced (nats/token)",
}


@dataclass(frozen=True)
class ModelInfo:
    name: str
    arch: str  # the family: "gpt2", "bert", "llama", "mistral", "qwen2"
    n_layer: int
    n_head: int
    d_model: int
    d_head: int
    max_positions: int
    vocab_size: int
    source: str  # where the weights came from
    score_kind: str  # "next_token_loss" | "mlm_loss" | "embedding_shift"
    causal: bool  # query i sees keys 0..i only
    n_kv_head: int  # key/value heads: n_head (MHA), 1 (MQA), in between (GQA)
    kv_heads: tuple[int, ...]  # for each query head, the key/value head it reads
    description: str  # the architecture in words: norm, positions, MLP, attention kind
    has_lm_head: bool  # token predictions are possible (logits, predict)
    # an encoder-decoder (T5, BART, Marian): n_layer / n_head above are the decoder's
    encoder_decoder: bool = False
    n_encoder_layer: int = 0
    n_encoder_head: int = 0

    @property
    def attention_kind(self) -> str:
        if self.n_kv_head == self.n_head:
            return "multi-head"
        if self.n_kv_head == 1:
            return "multi-query"
        return "grouped-query"

    @property
    def score_name(self) -> str:
        return SCORE_NAMES[self.score_kind]

    @property
    def attention_params_per_layer(self) -> int:
        """W_Q, W_K, W_V, W_O weights (biases not counted): 4 d_model^2 for plain multi-head
        attention; fewer when key/value heads are shared."""
        q_width, kv_width = self.n_head * self.d_head, self.n_kv_head * self.d_head
        return self.d_model * (2 * q_width + 2 * kv_width)


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


@dataclass
class ScoreInputs:
    """What score() feeds the network, prepared once so many masks can be scored cheaply."""
    kind: str
    input_ids: torch.Tensor  # [1, T] (with [MASK]s for the MLM score)
    token_type_ids: torch.Tensor | None
    targets: torch.Tensor | None  # next tokens, or the original ids at masked positions
    positions: torch.Tensor | None  # masked positions (MLM)
    reference: torch.Tensor | None  # unmasked mean-pooled embedding (embedding shift)
    metric: "ResolvedMetric | None" = None  # a target metric instead of the model's score


METRIC_KINDS = {
    "logit_diff": "logit difference: logit(target) - logit(contrast)",
    "logit": "logit of the target",
    "logprob": "log-probability of the target (nats)",
}


@dataclass(frozen=True)
class TargetMetric:
    """What to measure instead of the whole-text score: at token position ``position`` (the
    prediction made there, i.e. of the token that follows; for a masked-LM model, the filler
    of that position, which is masked), the target's log-probability, its logit, or the
    logit difference target - contrast (Wang et al. 2023 measure " Mary" vs " John").
    target / contrast: a token id, or a string that is one token (" Paris")."""
    position: int
    target: int | str
    contrast: int | str | None = None
    kind: str = "logit_diff"  # "logit_diff" | "logit" | "logprob"


@dataclass(frozen=True)
class ResolvedMetric:
    position: int  # non-negative
    target: int
    contrast: int | None
    kind: str
    description: str  # in words, for figure titles and captions

    @property
    def higher_is_better(self) -> bool:
        return True


@dataclass
class Predictions:
    """What the model predicts at each position (ANALYSES.md section 6).

    Causal models: row i is the prediction made at position i, of token i + 1;
    next_logprob[i] = log p(token i + 1 | tokens 0..i), minus the per-token loss.
    Masked-LM models: one row per masked position, the fillers of that position.
    Encoder-decoders ("target"): row i is decoder position i's prediction of target token
    i (tokens are the target's); next_logprob [T]: log p of each target token."""
    kind: str  # "next_token" | "masked" | "target"
    tokens: list[str]  # the input's display tokens
    token_ids: list[int]
    positions: np.ndarray  # [R] the positions the rows are about
    top_ids: np.ndarray  # [R, k]
    top_probs: np.ndarray  # [R, k]
    top_tokens: list[list[str]]  # [R][k] display text of the top ids
    next_logprob: np.ndarray | None  # [T - 1] (causal only)

    @property
    def loss(self) -> np.ndarray | None:
        """Per-token cross-entropy of the text (nats), [T - 1]; its mean is model.score."""
        return None if self.next_logprob is None else -self.next_logprob

    def runner_up(self, row: int) -> int:
        """Row ``row``'s best guess other than the token the text holds there (the next
        token, the masked one, or the target's), the natural contrast for a logit
        difference; its top guess when it has no other."""
        position = int(self.positions[row]) + (self.kind == "next_token")
        actual = self.token_ids[position] if position < len(self.token_ids) else None
        others = [int(i) for i in self.top_ids[row] if int(i) != actual]
        return others[0] if others else int(self.top_ids[row][0])


@dataclass
class ForwardRun:
    """One forward pass, kept: every head's map (the trace), the hidden state the predictions
    and target metrics read, and the pieces a pre-norm residual stream is the sum of (for
    direct logit attribution). A page that shows all of them runs the model once.

    Tensors are [1, T, ...] (a batch of one); treat them as read-only."""
    model: "Model"
    text: str
    encoding: Encoding
    trace: AttentionTrace | None  # None when run(maps=False)
    embedded: torch.Tensor  # [1, T, d]: the residual stream entering layer 0
    records: list[dict]  # per layer: "context" [1, H, T, d_k] (heads before W_O), "mlp_out"
    final_residual: torch.Tensor  # [1, T, d]: after the last layer, before the final norm
    last_hidden: torch.Tensor  # [1, T, d]: after the final norm, what the LM head reads

    @property
    def n_tokens(self) -> int:
        return len(self.encoding.input_ids)

    def _require_causal(self, what: str) -> None:
        if not self.model.info.has_lm_head:
            raise InputError(f"'{self.model.info.name}' has no language-model head: it gives "
                             f"embeddings, not token predictions")
        if not self.model.info.causal:  # a masked-LM reads positions it cannot see: new input
            raise InputError(f"{what} of a masked-LM model needs the masked text's own forward: "
                             f"use model.{'predict' if what == 'predictions' else 'score'}()")

    def predict(self, k: int = 5) -> Predictions:
        """model.predict(text, k) of a causal model, from this pass."""
        self._require_causal("predictions")
        return self.model._predictions(self.encoding, self.last_hidden,
                                       np.arange(self.n_tokens), k)

    def score(self, metric: "TargetMetric") -> float:
        """model.score(text, metric=metric) of a causal model, from this pass."""
        self._require_causal("a target metric")
        resolved = self.model.resolve_metric(metric, self.n_tokens)
        inputs = ScoreInputs("target", torch.tensor([self.encoding.input_ids]), None, None,
                             None, None, resolved)
        with torch.no_grad():
            return float(self.model.score_from_last_hidden(self.last_hidden, inputs)[0])

    def attribution(self, position: int, target, contrast=None):
        """direct_logit_attribution(model, text, position, target, contrast), from this pass."""
        from .analysis.attribution import attribute_run

        return attribute_run(self, position, target, contrast)

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


class Model(Tokenizing):
    """A checkpoint loaded into our own engine, with its tokenizer."""

    def __init__(self, network: TransformerStack, tokenizer, info: ModelInfo):
        super().__init__(tokenizer)
        self.network = network
        self.info = info

    def __repr__(self) -> str:
        i = self.info
        return (f"Model({i.name!r}: {i.arch}, {i.n_layer} layers x {i.n_head} heads, "
                f"d_model {i.d_model})")

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

    # --- tracing -------------------------------------------------------------------------

    def maps_kind(self, n_tokens: int, maps="auto") -> str:
        """"full" (every map held: fastest), "on_demand" (the hidden state entering each
        layer held, maps recomputed when asked for: memory grows with T, not T squared) or
        "none". "auto" holds the maps whole while they take at most AUTO_FULL_MAPS_BYTES."""
        if maps is True:
            return "full"
        if maps is False or maps is None:
            return "none"
        if maps == "auto":
            need = 4 * self.info.n_layer * self.info.n_head * n_tokens ** 2
            return "full" if need <= AUTO_FULL_MAPS_BYTES else "on_demand"
        if maps in ("full", "on_demand", "none"):
            return maps
        raise InputError(f"maps must be 'auto', 'full', 'on_demand' or 'none', got {maps!r}")

    def on_demand_bytes(self, n_tokens: int) -> int:
        """What an on-demand trace of n_tokens holds: each layer's input, L x T x d floats."""
        return 4 * self.info.n_layer * n_tokens * self.info.d_model

    def _forward(self, ids: list[int], types: list[int] | None, mask=None,
                 ablation: str = "zero", maps: str = "full", hooks=None):
        """One forward, with hooks (an interventions.Hooks: what run() keeps) when given.
        -> (maps: float32 [L, H, T, T] | LayerInputMaps | None, embedded,
        final residual, last hidden). Attention runs a block of query rows at a time
        (no [H, T, T] scores); full maps are written block by block into one buffer, so the
        array handed out is that buffer itself (no per-layer copies). Without maps, short
        inputs (up to CHUNKED_FROM tokens) take the plain path."""
        n = len(ids)
        net = self.network
        with torch.inference_mode():
            input_ids = torch.tensor([ids], dtype=torch.long)
            token_types = None if types is None else torch.tensor([types], dtype=torch.long)
            embedded = net.embed(input_ids, token_types)
            if maps == "full":
                buffer = torch.empty(self.info.n_layer, self.info.n_head, n, n,
                                     dtype=torch.float32)
                # The same chunked arithmetic as on-demand maps: both give identical maps.
                final, _ = net.run_layers(embedded, 0, None, None, mask, ablation,
                                          attentions_out=buffer, query_chunk=QUERY_CHUNK,
                                          hooks=hooks)
                found = buffer.numpy()
            elif maps == "on_demand" or n > CHUNKED_FROM:
                inputs: list | None = [] if maps == "on_demand" else None
                final, _ = net.run_layers(embedded, 0, None, None, mask, ablation,
                                          layer_inputs=inputs, query_chunk=QUERY_CHUNK,
                                          hooks=hooks)
                found = None if inputs is None else LayerInputMaps(net, inputs)
            else:
                final, _ = net.run_layers(embedded, 0, None, net.attention_bias(n), mask,
                                          ablation, hooks=hooks)
                found = None
            return found, embedded, final, net.finish(final)

    def _run_capture(self, ids: list[int], types: list[int] | None, head_mask=None,
                     ablation: str = "zero", maps="full"):
        """(maps, last hidden [T, d] numpy) of one forward."""
        mask = None if head_mask is None else self.check_head_mask(head_mask)
        if mask is not None and mask.dim() != 2:
            raise InputError("a trace takes one head mask of shape [layers, heads]")
        found, _, _, last_hidden = self._forward(ids, types, mask, ablation,
                                                 self.maps_kind(len(ids), maps))
        return found, last_hidden[0].numpy()

    def trace(self, text: str, text_pair: str | None = None, max_tokens: int | None = None,
              head_mask=None, ablation: str = "zero", maps="auto") -> AttentionTrace:
        """Every head's attention map for the text (and sentence B, for BERT).

        head_mask [L, H] (1 keeps a head, 0 removes its output; see score()) shows how
        switching heads off changes the maps of the layers above them; a masked head's own
        map is still what its softmax computed.
        maps: "full" holds every map; "on_demand" holds what rebuilds them and computes a
        head's or a layer's map when asked (trace.head_map, trace.layer_maps, trace.rows);
        "auto" (default) holds them whole while they take at most AUTO_FULL_MAPS_BYTES."""
        enc = self.encode(text, text_pair, max_tokens)
        kind = self.maps_kind(len(enc.input_ids), maps)
        if kind == "none":
            raise InputError("a trace holds maps: use maps='full', 'on_demand' or 'auto'")
        attentions, _ = self._run_capture(enc.input_ids, enc.token_type_ids, head_mask, ablation,
                                          kind)
        trace = self._make_trace(enc, attentions, text, text_pair)
        if head_mask is not None:
            trace.extra["head_mask"] = np.asarray(head_mask, dtype=np.float32).tolist()
            trace.extra["ablation"] = ablation
        return trace

    def trace_ids(self, ids, token_type_ids=None, maps="auto") -> AttentionTrace:
        """Trace pre-tokenized input (no special tokens are added)."""
        ids = self._check_ids(ids)
        types = [0] * len(ids) if token_type_ids is None else [int(t) for t in token_type_ids]
        if len(types) != len(ids):
            raise InputError("token_type_ids must have one entry per token id")
        enc = Encoding(ids, types, [i in self._special_ids for i in ids], False, len(ids))
        attentions, _ = self._run_capture(ids, types, maps=maps)
        return self._make_trace(enc, attentions, "", None)

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

    def attention_by_layer(self, batch: list[list[int]]):
        """Run a batch of pre-tokenized segments (padded, the padding masked, so each
        segment's maps are those it gets alone) one layer at a time, yielding (layer,
        weights [B, H, W, W] float32) as each layer's attention is computed: segment b's own
        maps are weights[b, :, :n_b, :n_b]. Nothing is kept from one layer to the next but
        the hidden state, so a statistic reads the maps while they are fresh and the batch
        never holds [B, L, H, W, W]."""
        width = max(len(ids) for ids in batch)
        pad = self.tokenizer.pad_token_id or 0
        input_ids = torch.tensor([list(ids) + [pad] * (width - len(ids)) for ids in batch])
        mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in batch])
        net = self.network
        with torch.inference_mode():
            h, bias = net.embed(input_ids), net.attention_bias(width, mask)
        yield from net.weights_by_layer(h, bias, mask)

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
        extra = {}
        if enc.n_chars_given is not None:  # only the first MAX_TEXT_CHARS were read
            extra["n_chars_given"] = enc.n_chars_given
            text = text[:MAX_TEXT_CHARS]
        return AttentionTrace(
            tokens=tokens, extra=extra,
            token_ids=enc.input_ids, attentions=attentions,
            display_tokens=self.display_tokens(enc.input_ids),
            special_mask=np.array(enc.special_mask, dtype=bool),
            segment_ids=np.array(enc.token_type_ids, dtype=np.int64),
            causal=self.info.causal, truncated=enc.truncated,
            n_tokens_before_truncation=enc.n_tokens_before_truncation,
            model_name=self.info.name, arch=self.info.arch, text=text, text_pair=text_pair,
            kv_heads=list(self.info.kv_heads))

    def run(self, text: str, text_pair: str | None = None, max_tokens: int | None = None,
            head_mask=None, maps="auto") -> ForwardRun:
        """One forward pass that keeps what the trace, the predictions, the target metrics and
        direct logit attribution need, so each of them costs no further forward. maps: as
        trace() takes it; False (or "none") skips the maps (run.trace is then None)."""
        enc = self.encode(text, text_pair, max_tokens)
        mask = None if head_mask is None else self.check_head_mask(head_mask)
        if mask is not None and mask.dim() != 2:
            raise InputError("a run takes one head mask of shape [layers, heads]")
        kind = self.maps_kind(len(enc.input_ids), maps)
        kept = Interventions(capture=["z", "mlp_out"])  # what attribution reads
        found, embedded, final, last_hidden = self._forward(
            enc.input_ids, enc.token_type_ids, mask, "zero", kind, kept)
        records = [{"context": kept.captured[("z", layer)],
                    "mlp_out": kept.captured[("mlp_out", layer)]}
                   for layer in range(self.info.n_layer)]
        trace = None
        if found is not None:
            trace = self._make_trace(enc, found, text, text_pair)
            if head_mask is not None:
                trace.extra["head_mask"] = np.asarray(head_mask, dtype=np.float32).tolist()
                trace.extra["ablation"] = "zero"
        return ForwardRun(self, text, enc, trace, embedded, records, final, last_hidden)

    def run_with_cache(self, text_or_ids, names=None, ungroup_kv: bool = False,
                       max_bytes: int | None = None):
        """(logits [1, T, vocab], cache): one forward keeping the named activations, read as
        cache["z", 20] or cache["blocks.20.attn.hook_z"] in TransformerLens's layouts (see
        mha_viz.cache; names limits what is kept, within the memory budget)."""
        from .cache import run_with_cache

        return run_with_cache(self, text_or_ids, names, ungroup_kv, max_bytes)

    def last_hidden_state(self, text: str, text_pair: str | None = None) -> np.ndarray:
        """[T, d_model]: the last hidden state (after the final norm, where there is one)."""
        enc = self.encode(text, text_pair)
        return self._run_capture(enc.input_ids, enc.token_type_ids, maps="none")[1]

    def logits(self, text: str, text_pair: str | None = None, max_tokens: int | None = None,
               head_mask=None) -> np.ndarray:
        """[T, vocab] float32: the LM head's logits at every position (next-token logits for
        causal models, masked-LM logits for BERT with an MLM head)."""
        if not self.info.has_lm_head:
            raise InputError(f"'{self.info.name}' has no language-model head: it gives "
                             f"embeddings, not token predictions")
        enc = self.encode(text, text_pair, max_tokens)
        mask = None if head_mask is None else self.check_head_mask(head_mask)
        with torch.inference_mode():
            ids = torch.tensor([enc.input_ids], dtype=torch.long)
            types = torch.tensor([enc.token_type_ids], dtype=torch.long)
            last_hidden, _ = self.network(ids, types, head_mask=mask)
            return self.network.lm_logits(last_hidden)[0].numpy()

    def embed(self, text: str) -> np.ndarray:
        """Mean-pooled, L2-normalised last hidden state: the sentence-transformers embedding
        of a MiniLM-style checkpoint."""
        pooled = torch.from_numpy(self.last_hidden_state(text)).mean(0)
        return F.normalize(pooled, dim=0).numpy()

    # --- the pruning score (ANALYSES.md section 5) ----------------------------------------

    def score_inputs(self, text: str | Encoding, mlm_seed: int = 0,
                     metric: TargetMetric | None = None) -> ScoreInputs:
        """What the score needs for a text, or for an Encoding (encoding_of_ids)."""
        enc = text if isinstance(text, Encoding) else self.encode(text)
        ids = torch.tensor([enc.input_ids], dtype=torch.long)
        types = torch.tensor([enc.token_type_ids], dtype=torch.long)
        if metric is not None:
            resolved = self.resolve_metric(metric, len(enc.input_ids))
            if not self.info.causal:  # the masked-LM metric reads a masked position
                ids = ids.clone()
                ids[0, resolved.position] = self.tokenizer.mask_token_id
            return ScoreInputs("target", ids, types, None, None, None, resolved)
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
        if inputs.kind == "target":
            metric = inputs.metric
            final = last_hidden[:, metric.position]  # [B, d]
            if metric.kind == "logprob":  # needs every logit, at one position
                return F.log_softmax(self.network.lm_logits(final), dim=-1)[:, metric.target]
            if metric.kind == "logit":
                return self.network.token_logits(final, [metric.target])[:, 0]
            both = self.network.token_logits(final, [metric.target, metric.contrast])
            return both[:, 0] - both[:, 1]
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

    def score(self, text: str, head_mask=None, ablation: str = "zero",
              metric: TargetMetric | None = None) -> float:
        """The scalar the pruning page measures (info.score_name says which): a causal
        model's next-token loss, BERT's MLM loss, or the embedding shift of an encoder
        without an LM head; or, with ``metric``, that target metric (higher = the target is
        more likely). head_mask [L, H]: 1 keeps a head, 0 removes it (ablation="mean":
        replaces it by its mean output over positions)."""
        with torch.no_grad():
            return float(self.score_tensor(self.score_inputs(text, metric=metric), head_mask,
                                           ablation))

    # --- predictions and target metrics (ANALYSES.md section 6) ---------------------------

    def resolve_metric(self, metric: TargetMetric, n_tokens: int) -> ResolvedMetric:
        if not self.info.has_lm_head:
            raise InputError(f"'{self.info.name}' has no language-model head, so it has no "
                             f"target metric; its score is the {self.info.score_name}")
        if metric.kind not in METRIC_KINDS:
            raise InputError(f"metric kind must be one of {', '.join(METRIC_KINDS)}, got "
                             f"{metric.kind!r}")
        position = int(metric.position)
        position = position + n_tokens if position < 0 else position
        if not 0 <= position < n_tokens:
            raise InputError(f"position {metric.position} is outside the text's {n_tokens} tokens")
        target = self.token_id(metric.target)
        contrast = None if metric.contrast is None else self.token_id(metric.contrast)
        if metric.kind == "logit_diff" and contrast is None:
            raise InputError("the logit difference needs a contrast token")
        shown = self.display_tokens([target] + ([] if contrast is None else [contrast]))
        what = {"logit_diff": f"logit('{shown[0]}') − logit('{shown[-1]}')",
                "logit": f"logit('{shown[0]}')",
                "logprob": f"log p('{shown[0]}')"}[metric.kind]
        return ResolvedMetric(position, target, contrast, metric.kind,
                              f"{what} at position {position}")

    def predict(self, text: str, k: int = 5, masked_positions=None,
                max_tokens: int | None = None) -> Predictions:
        """The k most likely tokens at each position, with their probabilities.

        Causal models: every position's next-token prediction, and next_logprob [T - 1].
        Masked-LM models (BERT with its MLM head): the fillers of masked_positions (each
        replaced by [MASK] first), or of the [MASK] tokens already in the text."""
        if not self.info.has_lm_head:
            raise InputError(f"'{self.info.name}' has no language-model head: it gives "
                             f"embeddings, not token predictions")
        k = self._check_k(k)
        enc = self.encode(text, max_tokens=max_tokens)
        ids = torch.tensor([enc.input_ids], dtype=torch.long)
        types = torch.tensor([enc.token_type_ids], dtype=torch.long)
        n = ids.shape[1]
        if self.info.causal:
            positions = np.arange(n)
        else:
            mask_id = self.tokenizer.mask_token_id
            if masked_positions is None:
                positions = np.flatnonzero(np.array(enc.input_ids) == mask_id)
            else:
                positions = np.array(sorted({int(p) + (n if int(p) < 0 else 0)
                                             for p in masked_positions}), dtype=int)
            if positions.size == 0:
                raise InputError("pick the positions to mask (or put [MASK] in the text): a "
                                 "masked-LM model predicts the tokens it cannot see")
            if positions.min() < 0 or positions.max() >= n or any(
                    enc.special_mask[p] for p in positions):
                raise InputError(f"masked positions must be ordinary tokens of the text "
                                 f"(0..{n - 1}, not [CLS]/[SEP])")
            ids = ids.clone()
            ids[0, positions] = mask_id
        with torch.inference_mode():
            last_hidden, _ = self.network(ids, types)
        return self._predictions(enc, last_hidden, positions, k)

    def _check_k(self, k) -> int:
        k = int(k)
        if not 1 <= k <= self.info.vocab_size:
            raise InputError(f"k must be between 1 and {self.info.vocab_size}")
        return k

    def _predictions(self, enc: Encoding, last_hidden: torch.Tensor, positions: np.ndarray,
                     k: int) -> Predictions:
        """Top-k at ``positions`` from a [1, T, d] last hidden state (and, for a causal
        model, the log-probability of every next token)."""
        k = self._check_k(k)
        with torch.inference_mode():
            logits = self.network.lm_logits(last_hidden[0, torch.as_tensor(positions)])
            logprobs = F.log_softmax(logits, dim=-1)
            top = logprobs.topk(k, dim=-1)
            next_logprob = None
            if self.info.causal:
                following = torch.tensor(enc.input_ids[1:], dtype=torch.long)
                next_logprob = logprobs[:-1].gather(1, following[:, None])[:, 0].numpy()
        top_ids = top.indices.numpy()
        return Predictions(
            kind="next_token" if self.info.causal else "masked",
            tokens=self.display_tokens(enc.input_ids), token_ids=enc.input_ids,
            positions=positions, top_ids=top_ids, top_probs=top.values.exp().numpy(),
            top_tokens=[self.display_tokens(row.tolist()) for row in top_ids],
            next_logprob=next_logprob)


def describe(config) -> str:
    """The architecture in words, for the model card."""
    norm = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[config.norm]
    where = "pre-norm" if config.pre_norm else "post-norm"
    if config.positions == "rotary":
        fraction = "" if config.rotary_fraction == 1 else f" on {config.rotary_fraction:.0%} of each head"
        positions = f"rotary positions (RoPE, theta {config.rope_theta:g}{fraction})"
    elif config.positions == "relative":
        positions = (f"relative position bias ({config.relative_buckets} buckets up to "
                     f"distance {config.relative_max_distance}, shared by every layer)")
    elif config.positions == "sinusoidal":
        positions = "sinusoidal absolute positions"
    else:
        positions = "learned absolute positions"
    mlp = f"gated MLP ({config.activation})" if config.gated_mlp else f"MLP ({config.activation})"
    n_kv = config.n_kv
    if n_kv == config.n_head:
        heads = f"{config.n_head} heads"
    elif n_kv == 1:
        heads = f"multi-query attention: {config.n_head} query heads share 1 key/value head"
    else:
        heads = (f"grouped-query attention: {config.n_head} query heads share {n_kv} key/value "
                 f"heads ({config.n_head // n_kv} each)")
    lm = {"tied": "LM head tied to the embedding", "separate": "separate LM head",
          "mlm": "masked-LM head", "none": "no LM head"}[config.lm_head]
    order = "causal" if config.causal else "bidirectional"
    if config.cross_attention:
        order += " with cross-attention to the encoder"
    return f"{order}; {where} {norm}; {positions}; {mlp}; {heads}; {lm}"


def load_model(name: str | os.PathLike = "minilm", local_dirs: list[Path] | None = None
               ) -> Model:
    """A bundled name ("minilm", "smollm2"), a local checkpoint folder or .gguf file, or a
    hub id ("gpt2"). ``local_dirs``: limit local paths to these folders (the app passes
    checkpoints.allowed_dirs() for its visitors); None allows any."""
    resolved = checkpoints.resolve(name, local_dirs=local_dirs)
    memory.return_large_blocks()  # before the first big allocations: see mha_viz.memory
    network, tokenizer = checkpoints.load(resolved)
    # transformers' own notion of the context is not the model's here: we truncate ourselves
    tokenizer.model_max_length = int(1e9)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    config = network.config
    if not isinstance(network, TransformerStack):  # an encoder and a decoder
        from .seq2seq import encoder_decoder_model

        return encoder_decoder_model(resolved, network, tokenizer)
    if config.causal and config.has_lm_head:
        score_kind = "next_token_loss"
    elif config.lm_head == "mlm" and tokenizer.mask_token_id is not None:
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
                     source=resolved.source, score_kind=score_kind, causal=config.causal,
                     n_kv_head=config.n_kv, kv_heads=tuple(config.kv_heads),
                     description=describe(config), has_lm_head=config.has_lm_head)
    return Model(network, tokenizer, info)
