"""Encoder-decoder models (T5, BART, Marian) in the library: a source text and a target text
in, the three kinds of attention out, with the names transformers gives them.

    from mha_viz import load_model
    model = load_model("path/to/t5-folder")
    trace = model.trace("The house is small.", target="Das Haus ist klein.")
    trace.encoder_attentions   # [L_enc, H, S, S]  source tokens attend to source tokens
    trace.decoder_attentions   # [L_dec, H, T, T]  target tokens to earlier target tokens
    trace.cross_attentions     # [L_dec, H, T, S]  target tokens to source tokens
    model.logits("The house is small.", target="Das Haus ist klein.")   # [T, vocab]

The decoder reads the target teacher-forced: its input is the decoder start token followed by
the target's tokens but the last (``target_ids``); position i predicts target token i
(``labels``). Without a target, the decoder runs on the model's own greedy output of up to
``max_new_tokens`` tokens (at most MAX_NEW_TOKENS), so a source alone still shows
cross-attention.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ..core.digest import digest
from ..core.errors import InputError
from ..engine.encoder_decoder import EncoderDecoderStack
from ..engine.placement import to_numpy
from ..maps import trace as traces
from ..maps.sets import ENCODER_DECODER
from ..maps.trace import AttentionTrace
from ..maps.value_weighted import weights_by_layer
from .tokens import Tokenizing

DEFAULT_NEW_TOKENS = 32
MAX_NEW_TOKENS = 128
# an encoder-decoder's three sets of maps (maps.sets), by name, and their labels
KINDS = tuple(s.name for s in ENCODER_DECODER)
KIND_NAMES = {s.name: s.label for s in ENCODER_DECODER}


@dataclass
class EncoderDecoderTrace:
    """Every head's attention of one source and target. Rows are queries, columns keys:
    encoder maps over source tokens, decoder maps over the decoder's input tokens, and
    cross-attention maps have target rows and source columns (each row sums to 1)."""
    source_text: str
    target_text: str | None  # None: the target is the model's own greedy output
    source_ids: list[int]
    target_ids: list[int]  # the decoder's input: start token, then the target's tokens
    labels: list[int]  # what each decoder position predicts: the target's tokens
    source_tokens: list[str]
    target_tokens: list[str]  # of target_ids
    label_tokens: list[str]
    encoder_attentions: np.ndarray  # or, for a long source, an ondemand.OnDemandMaps
    decoder_attentions: np.ndarray
    cross_attentions: np.ndarray
    model_name: str
    source_truncated: bool = False
    generated: bool = False
    max_new_tokens: int = 0  # the bound on a generated target (0: the target was given)
    model_type: str = ""
    # as the tokenizer names the tokens, and which are special (</s>, <pad>, ...)
    source_pieces: list[str] = field(default_factory=list)
    target_pieces: list[str] = field(default_factory=list)
    source_special: list[bool] = field(default_factory=list)
    target_special: list[bool] = field(default_factory=list)
    special_tokens: dict[str, str] = field(default_factory=dict)  # Tokenizing.special_tokens
    unknown_source_tokens: int = 0  # source tokens the tokenizer could not spell (<unk>)
    # an image model's source (cross-modal attention): the image [height, width] the encoder
    # read in strips patch_width pixels wide (source position i = pixel columns of strip i),
    # and the pixel columns [start, stop) of each character drawn in it
    image: np.ndarray | None = None
    patch_width: int = 0
    source_columns: list[tuple[int, int]] = field(default_factory=list)
    # the model that made it, named by core.digest ("" for a trace built by hand: then its
    # maps name it)
    origin: str = field(default="", repr=False)

    def identity(self) -> tuple:
        """What names this trace in a stored result's key (core.digest): the model and the
        source and target it read."""
        origin = self.origin or digest(self.decoder_attentions, self.cross_attentions)
        return (origin, self.source_text, self.target_text, self.source_ids, self.target_ids,
                self.labels, self.max_new_tokens, self.image)

    def attentions(self, kind: str) -> np.ndarray:
        """One kind's maps: "encoder", "decoder" or "cross"."""
        return {"encoder": self.encoder_attentions, "decoder": self.decoder_attentions,
                "cross": self.cross_attentions}[_check_kind(kind)]

    def row_tokens(self, kind: str) -> list[str]:
        """The queries' tokens of a kind's maps."""
        return self.source_tokens if _check_kind(kind) == "encoder" else self.target_tokens

    def column_tokens(self, kind: str) -> list[str]:
        """The keys' tokens of a kind's maps."""
        return self.target_tokens if _check_kind(kind) == "decoder" else self.source_tokens

    def source(self, kind: str):
        """A kind's maps as a source of row blocks (mha_viz.maps.streaming), for every statistic
        that reads rows: cross-attention rows run over the source's S keys."""
        from ..maps.streaming import MapsSource, TraceSource

        if self.on_demand(kind):
            return TraceSource(self.as_trace(kind))
        return MapsSource(self.attentions(kind), causal=_check_kind(kind) == "decoder")

    def on_demand(self, kind: str) -> bool:
        """Whether a kind's maps are computed when asked for (a long source's encoder)."""
        return not isinstance(self.attentions(kind), np.ndarray)

    def head_map(self, kind: str, layer: int, head: int) -> np.ndarray:
        """One head's map of one kind, computed if it is held on demand."""
        maps = self.attentions(kind)
        return maps[layer, head] if isinstance(maps, np.ndarray) else maps.head_map(layer, head)

    @property
    def target_shown(self) -> str:
        """The target in words: as given, or the model's output."""
        return self.target_text if self.target_text is not None else " ".join(
            self.label_tokens).replace("␣", " ")

    def as_trace(self, kind: str) -> AttentionTrace:
        """The encoder's or the decoder's self-attention as an AttentionTrace (square maps
        over the source or the decoder's input tokens), for every analysis of one stack.
        Cross-attention maps are T x S: read cross_attentions. An image encoder's
        token_ids are its strips' numbers."""
        if _check_kind(kind) == "cross":
            raise InputError("cross-attention maps are target x source, not square: read "
                             "trace.cross_attentions (analysis.mean_cross_attention)")
        encoder = kind == "encoder"
        ids = self.source_ids if encoder else self.target_ids
        n = len(ids)
        if encoder and self.image is not None:  # strips, not tokens: number them
            ids = list(range(n))
        return AttentionTrace(
            tokens=list(self.source_pieces if encoder else self.target_pieces) or
            list(self.row_tokens(kind)), token_ids=list(ids),
            attentions=self.attentions(kind), display_tokens=list(self.row_tokens(kind)),
            special_mask=np.asarray((self.source_special if encoder else self.target_special)
                                    or [False] * n), segment_ids=np.zeros(n, dtype=np.int64),
            special_tokens=dict(self.special_tokens),
            causal=not encoder, truncated=self.source_truncated and encoder,
            model_name=self.model_name, model_type=self.model_type,
            text=self.source_text if encoder else self.target_shown,
            attention_kind=kind, origin=digest(self))


@dataclass(frozen=True)
class TeacherForced:
    """What the decoder reads for a source and a target: the source's ids, the target's
    tokens (labels: what each position predicts) and the decoder's input."""
    source_ids: list[int]
    labels: list[int]
    decoder_ids: list[int]  # the start token, then every label but the last
    source_truncated: bool
    generated: bool  # the labels are the model's greedy output (no target was given)


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise InputError(f"the kind of attention is one of {', '.join(KINDS)}, got {kind!r}")
    return kind


class EncoderDecoderModel(Tokenizing):
    """An encoder-decoder checkpoint in our engine (EncoderDecoderStack), with its tokenizer."""

    # its three sets of maps (maps.sets), whose rows are the softmax alone (its trace has no
    # value-weighted form)
    map_sets = ENCODER_DECODER
    map_weights = ("attention",)
    reads = "source"  # what it reads: a source text, and a target the decoder is forced on

    def __init__(self, network: EncoderDecoderStack, tokenizer, info):
        super().__init__(tokenizer)
        self.network = network
        self.info = info

    def __repr__(self) -> str:
        i = self.info
        return (f"EncoderDecoderModel({i.name!r}: {i.model_type}, encoder {i.n_encoder_layer} x "
                f"{i.n_encoder_head}, decoder {i.n_layer} x {i.n_head} heads)")

    # --- tokenizing ----------------------------------------------------------------------

    def _ids(self, text: str) -> list[int]:
        """A text's ids as the tokenizer wraps them (its closing token: </s>)."""
        from .encoding import clean_text

        text = clean_text(text)
        with self._tokenizer_lock:
            return list(self.tokenizer(text, add_special_tokens=True,
                                       verbose=False)["input_ids"])

    def encode_source(self, text: str) -> tuple[list[int], bool]:
        """The source's ids as the tokenizer wraps them, cut to the encoder's context ->
        (ids, whether it was cut)."""
        ids = self._ids(text)
        limit = self.network.config.encoder.max_positions
        cut = len(ids) > limit
        if cut:  # keep the tokenizer's closing token(s): the end of the text is dropped
            ids = ids[:limit - 1] + ids[-1:]
        if all(i in self._special_ids for i in ids):
            raise InputError("the source has no tokens this model's tokenizer keeps")
        return ids, cut

    def encode_target(self, text: str) -> list[int]:
        """The target's tokens (what the decoder is to predict), with the tokenizer's
        closing token. A target longer than the decoder's context is refused."""
        labels = self._ids(text)
        limit = self.network.config.decoder.max_positions
        if len(labels) > limit:
            raise InputError(f"the target is {len(labels)} tokens; this model's decoder reads "
                             f"at most {limit}")
        return labels

    def pieces(self, ids: list[int]) -> list[str]:
        """The tokens as the tokenizer names them."""
        with self._tokenizer_lock:
            return list(self.tokenizer.convert_ids_to_tokens(list(ids)))

    def decoder_input(self, labels: list[int]) -> list[int]:
        """Teacher forcing: the start token, then every label but the last."""
        return [self.network.config.decoder_start_token_id] + list(labels[:-1])

    # --- running -------------------------------------------------------------------------

    @torch.inference_mode()
    def generate(self, source_ids, max_new_tokens: int | None = None) -> list[int]:
        """The model's greedy continuation of the decoder start token for a source (its ids,
        or its text, as a causal Model.generate takes a prompt): up to max_new_tokens
        tokens, ending at the end-of-sequence token when the model writes it."""
        if isinstance(source_ids, str):
            source_ids = self.encode_source(source_ids)[0]
        n = _check_new_tokens(max_new_tokens,
                              self.network.config.decoder.max_positions)
        device = self.network.device
        states, _ = self.network.encode(torch.tensor([source_ids], device=device))
        out = []
        eos = self.network.config.eos_token_id
        for _ in range(n):
            decoder_ids = torch.tensor([[self.network.config.decoder_start_token_id, *out]],
                                       device=device)
            last, _, _ = self.network.decode(decoder_ids, states)
            logits = self.network.decoder.lm_logits(last[0, -1])
            out.append(int(logits.argmax()))
            if out[-1] == eos:
                break
        return out

    def teacher_forcing(self, source: str, target: str | None = None,
                        max_new_tokens: int | None = None) -> TeacherForced:
        """The ids the decoder reads: the target's tokens, or the model's greedy output when
        no target is given."""
        source_ids, cut = self.encode_source(source)
        generated = target is None or isinstance(target, str) and not target.strip()
        labels = (self.generate(source_ids, max_new_tokens) if generated
                  else self.encode_target(target))
        return TeacherForced(source_ids, labels, self.decoder_input(labels), cut, generated)

    def _logits(self, source_ids: list[int], labels: list[int]) -> torch.Tensor:
        """[T, vocab] the decoder's logits, teacher-forced on labels."""
        device = self.network.device
        logits, *_ = self.network(torch.tensor([source_ids], device=device),
                                  torch.tensor([self.decoder_input(labels)], device=device))
        return logits[0]

    @torch.inference_mode()
    def trace(self, source: str, target: str | None = None,
              max_new_tokens: int | None = None, maps="auto") -> EncoderDecoderTrace:
        """Every head's encoder, decoder and cross-attention maps for a source and a target
        (the model's own greedy output when no target is given). maps: how the encoder's
        are held (encoder_maps_kind): a long source's are computed on demand."""
        forced = self.teacher_forcing(source, target, max_new_tokens)
        bound = _check_new_tokens(max_new_tokens, self.network.config.decoder.max_positions)
        return self._trace_of(forced.source_ids, forced.labels, source,
                              None if forced.generated else target, forced.source_truncated,
                              bound if forced.generated else 0, maps)

    def encoder_maps_kind(self, n_source: int, maps="auto") -> str:
        """"full" (every encoder map held) or "on_demand" (the hidden state entering each
        encoder layer held, maps rebuilt when asked for: memory grows with S, not S
        squared). "auto" holds them whole while they take at most AUTO_FULL_MAPS_BYTES, as
        for decoder-only models; the decoder's and cross-attention's maps are always held
        (T x T and T x S, with T at most the decoder's context)."""
        if maps == "auto":
            stack = self.network.config.encoder
            need = 4 * stack.n_layer * stack.n_head * n_source ** 2
            return "full" if need <= traces.AUTO_FULL_MAPS_BYTES else "on_demand"
        if maps in ("full", "on_demand"):
            return maps
        raise InputError(f"maps must be 'auto', 'full' or 'on_demand', got {maps!r}")

    @torch.inference_mode()
    def _trace_of(self, source_ids: list[int], labels: list[int], source_text: str,
                  target_text: str | None, cut: bool = False, max_new_tokens: int = 0,
                  maps="auto") -> EncoderDecoderTrace:
        from ..maps.ondemand import LayerInputMaps

        decoder_ids = self.decoder_input(labels)

        def stacked(weights):
            return to_numpy(torch.cat(weights))

        device = self.network.device
        source = torch.tensor([source_ids], device=device)
        target = torch.tensor([decoder_ids], device=device)
        if self.encoder_maps_kind(len(source_ids), maps) == "full":
            _, encoder, decoder, cross = self.network(source, target, keep_attentions=True)
            encoder_maps = stacked(encoder)
        else:  # a long source: its encoder maps on demand
            inputs: list = []
            states, _ = self.network.encode(source, layer_inputs=inputs)
            _, decoder, cross = self.network.decode(target, states, keep_attentions=True)
            encoder_maps = LayerInputMaps(self.network.encoder, inputs)

        return EncoderDecoderTrace(
            source_text=source_text, target_text=target_text,
            source_ids=source_ids, target_ids=decoder_ids, labels=labels,
            source_tokens=self.source_tokens(source_ids, source_text),
            target_tokens=self.display_tokens(decoder_ids),
            label_tokens=self.display_tokens(labels),
            encoder_attentions=encoder_maps, decoder_attentions=stacked(decoder),
            cross_attentions=stacked(cross), model_name=self.info.name,
            source_truncated=cut, generated=target_text is None,
            max_new_tokens=max_new_tokens, model_type=self.info.model_type,
            source_pieces=self.source_pieces(source_ids, source_text),
            target_pieces=self.pieces(decoder_ids),
            source_special=[i in self._special_ids for i in source_ids]
            if self.source_is_text else [False] * len(source_ids),
            target_special=[i in self._special_ids for i in decoder_ids],
            special_tokens=self.special_tokens,
            unknown_source_tokens=sum(i == self.tokenizer.unk_token_id for i in source_ids)
            if self.source_is_text else 0, origin=digest(self),
            **self.source_extras(source_text))

    # What the encoder reads, in words: tokens here; an image model's strips (image_to_text).
    source_is_text = True

    def source_tokens(self, source_ids: list, source_text: str) -> list[str]:
        """Readable labels of the encoder's positions."""
        return self.display_tokens(source_ids)

    def source_pieces(self, source_ids: list, source_text: str) -> list[str]:
        """The encoder's positions as the tokenizer names them."""
        return self.pieces(source_ids)

    def source_extras(self, source_text: str) -> dict:
        """More fields of the trace (an image model's image)."""
        return {}

    def stack(self, kind: str) -> "StackView":
        """The encoder's or the decoder's self-attention as a model of its own, for the
        analyses that run a model on token ids they make (the induction probe)."""
        return StackView(self, kind)

    def corpus_model(self) -> "StackView":
        """What corpus mode runs: the encoder, whose inputs the texts are (decoder and
        cross-attention would need a target for every text)."""
        return self.stack("encoder")

    @torch.inference_mode()
    def logits(self, source: str, target: str | None = None,
               max_new_tokens: int | None = None) -> np.ndarray:
        """[T, vocab]: what the decoder predicts at each position, teacher-forced on the
        target (or on the model's greedy output)."""
        forced = self.teacher_forcing(source, target, max_new_tokens)
        return to_numpy(self._logits(forced.source_ids, forced.labels))

    @torch.inference_mode()
    def predict(self, source: str, target: str | None = None, k: int = 5,
                max_new_tokens: int | None = None):
        """What the decoder predicts at each target position, teacher-forced: row i is the
        prediction made at decoder position i of target token i (Predictions, kind
        "target"; next_logprob[i] = log p(target token i | source, target tokens before))."""
        from .predictions import Predictions

        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= 100:
            raise InputError(f"k must be a whole number from 1 to 100, got {k!r}")
        forced = self.teacher_forcing(source, target, max_new_tokens)
        labels = forced.labels
        logprobs = torch.log_softmax(self._logits(forced.source_ids, labels).float(), dim=-1)
        top = logprobs.topk(int(k), dim=-1)
        top_ids = top.indices.cpu().numpy()
        return Predictions(
            kind="target", tokens=self.display_tokens(labels), token_ids=list(labels),
            positions=np.arange(len(labels)), top_ids=top_ids,
            top_probs=to_numpy(top.values.exp()),
            top_tokens=[self.display_tokens(row.tolist()) for row in top_ids],
            next_logprob=to_numpy(logprobs[torch.arange(len(labels), device=logprobs.device),
                                           torch.tensor(labels, device=logprobs.device)]))

    @torch.inference_mode()
    def target_loss(self, source: str, target: str) -> float:
        """Mean cross-entropy (nats/token) of the target's tokens, teacher-forced."""
        source_ids, _ = self.encode_source(source)
        labels = self.encode_target(target)  # a target is needed: an empty one is refused
        logits = self._logits(source_ids, labels).float()
        return float(torch.nn.functional.cross_entropy(
            logits, torch.tensor(labels, device=logits.device)))


class StackView:
    """One stack of an encoder-decoder seen as a model of its own: trace_ids(ids) runs the
    whole model and returns that stack's self-attention over ids. The encoder reads ids as
    the source (then its end token); the decoder reads them after its start token, with the
    same ids as the source. probe_frame: the tokens a probe puts around its own."""

    def __init__(self, model: "EncoderDecoderModel", kind: str):
        if _check_kind(kind) == "cross":
            raise InputError("cross-attention has no stack of its own: pick the encoder or "
                             "the decoder")
        self.model, self.kind, self.tokenizer = model, kind, model.tokenizer
        self._tokenizer_lock = model._tokenizer_lock
        config = model.network.config
        stack = config.encoder if kind == "encoder" else config.decoder
        self.info = replace(model.info, causal=kind == "decoder", n_layer=stack.n_layer,
                            n_head=stack.n_head, n_kv_head=stack.n_kv_head,
                            kv_heads=tuple(stack.kv_heads), max_positions=stack.max_positions,
                            encoder_decoder=False)
        end = config.eos_token_id
        self.probe_frame = (([], [] if end is None else [int(end)]) if kind == "encoder"
                            else ([int(config.decoder_start_token_id)], []))

    def identity(self) -> tuple:
        """The model and the stack it reads (core.digest)."""
        return (self.model, self.kind)

    def display_tokens(self, ids) -> list[str]:
        return self.model.display_tokens(ids)

    @property
    def special_tokens(self) -> dict[str, str]:
        return self.model.special_tokens

    def token_labels(self, ids) -> tuple[list[str], list[str]]:
        """(tokens, display tokens) of pre-tokenized ids (corpus mode)."""
        ids = [int(i) for i in ids]
        return self.model.pieces(ids), self.model.display_tokens(ids)

    def attention_by_layer(self, batch: list[list[int]], weights: str = "attention",
                           hooks=None):
        """The encoder's self-attention of a batch of sources, one layer at a time, as
        Model.attention_by_layer gives a decoder-only model's (corpus mode reads an
        encoder-decoder's sources this way): yields (layer, weights [B, H, W, W]);
        weights="value": value-weighted (maps.value_weighted); hooks: the engine's."""
        if self.kind != "encoder":
            raise InputError("over a corpus, an encoder-decoder's encoder is read (the texts "
                             "are sources); the decoder would need a target for each text")
        width = max(len(ids) for ids in batch)
        pad = self.model.network.config.pad_token_id or 0
        device = self.model.network.device
        input_ids = torch.tensor([list(ids) + [pad] * (width - len(ids)) for ids in batch],
                                 device=device)
        mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in batch],
                            device=device)
        encoder = self.model.network.encoder
        with torch.inference_mode():
            h, bias = encoder.embed(input_ids), encoder.attention_bias(width, mask)
        yield from weights_by_layer(encoder, h, bias, mask, weights, hooks)

    def corpus_model(self) -> "StackView":
        return self

    def trace_ids(self, ids) -> AttentionTrace:
        ids = [int(i) for i in ids]
        if self.kind == "encoder":
            seq = self.model._trace_of(ids, ids[-1:], "", "")
        else:  # ids begin with the start token: the decoder reads them, predicting ids[1:]
            body = ids[1:]
            seq = self.model._trace_of(body, body + body[-1:], "", "")
        return seq.as_trace(self.kind)


def _check_new_tokens(value, limit: int) -> int:
    """max_new_tokens checked against the decoder's context; None: DEFAULT_NEW_TOKENS, or
    the whole context of a decoder shorter than that."""
    if value is None:
        return min(DEFAULT_NEW_TOKENS, MAX_NEW_TOKENS, limit)
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise InputError(f"max_new_tokens must be a whole number, got {value!r}") from None
    bound = min(MAX_NEW_TOKENS, limit)
    if not 1 <= n <= bound:
        raise InputError(f"max_new_tokens must be between 1 and {bound}, got {n}")
    return n
