"""load_model and Model: text in, every head's attention (and the pruning score) out.

Model is put together from one module per job: encoding.py (text to ids), scoring.py (the
pruning score and target metrics), predictions.py, forward_run.py (one pass, kept) and this
module (running the network and capturing its maps). Their public names are importable from
here as well."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from .. import checkpoints
from ..checkpoints.series import bundled_run_checkpoint
from ..core import memory
from ..core.budget import choose_maps
from ..core.digest import digest
from ..core.errors import CorruptCheckpointError, InputError
from ..engine.encoder_decoder import EncoderDecoderStack
from ..engine.interventions import Interventions
from ..engine.placement import Placement, placement, to_numpy
from ..engine.transformer import CHUNKED_FROM, QUERY_CHUNK, TransformerStack
from ..maps import trace as traces
from ..maps.ondemand import LayerInputMaps
from ..maps.trace import AUTO_FULL_MAPS_BYTES, AttentionTrace
from ..maps.sets import ONE_STACK
from ..maps.value_weighted import WEIGHTS, ValueNorms, check_weights, weigh_maps, weights_by_layer
from .encoding import MAX_TEXT_CHARS, Encoding, TextInput, clean_text
from .forward_run import ForwardRun
from .generation import Generating, Generation
from .image_to_text import ImageToTextModel
from .model_info import SCORE_NAMES, ModelInfo, describe
from .predictions import Predicting, Predictions
from .scoring import (METRIC_KINDS, MLM_MASK_FRACTION, ResolvedMetric, ScoreInputs, Scoring,
                      TargetMetric)
from .seq2seq import EncoderDecoderModel

__all__ = ["AUTO_FULL_MAPS_BYTES", "Encoding", "ForwardRun", "Generation", "MAX_TEXT_CHARS",
           "METRIC_KINDS",
           "MLM_MASK_FRACTION", "Model", "ModelInfo", "Predictions", "ResolvedMetric",
           "SCORE_NAMES", "ScoreInputs", "TargetMetric", "TracePlan", "clean_text", "describe",
           "load_model"]


@dataclass(frozen=True)
class TracePlan:
    """What Model.trace would do with a text, found without running the model (Model.plan):
    how many tokens it reads, whether the text was cut, the form of its maps ("full": held
    whole, "on_demand": rebuilt when looked at, "none": refused), the bytes they would hold
    (on demand: each layer's input) and, when refused, why ("" otherwise)."""
    n_tokens: int
    n_tokens_before_truncation: int
    truncated: bool
    maps: str
    maps_bytes: int
    refused: str = ""

    def check(self) -> "TracePlan":
        """The plan, or InputError saying why the text is refused."""
        if self.refused:
            raise InputError(self.refused)
        return self


class Model(TextInput, Scoring, Predicting, Generating):
    """A checkpoint loaded into our own engine, with its tokenizer."""

    # the sets of maps its trace holds (maps.sets: its self-attention), and what their rows
    # can be: the softmax, or what heads move (trace(weights="value"))
    map_sets = ONE_STACK
    map_weights = WEIGHTS
    reads = "text"  # what it reads: a text (a BERT: a pair of sentences)

    def __init__(self, network: TransformerStack, tokenizer, info: ModelInfo):
        super().__init__(tokenizer)
        self.network = network
        self.info = info

    def __repr__(self) -> str:
        i = self.info
        return (f"Model({i.name!r}: {i.model_type}, {i.n_layer} layers x {i.n_head} heads, "
                f"d_model {i.d_model})")

    # --- tracing -------------------------------------------------------------------------

    def maps_kind(self, n_tokens: int, maps="auto", bytes_per_token: int = 0) -> str:
        """"full" (every map held: fastest), "on_demand" (the hidden state entering each
        layer held, maps recomputed when asked for: memory grows with T, not T squared) or
        "none". "auto" holds the maps whole while they take at most AUTO_FULL_MAPS_BYTES;
        "budget" while they fit the server's share for one input, with bytes_per_token more
        kept per token (budget.choose_maps: InputError when not even on demand fits)."""
        if maps is True:
            return "full"
        if maps is False or maps is None:
            return "none"
        if maps == "auto":
            need = 4 * self.info.n_layer * self.info.n_head * n_tokens ** 2
            return "full" if need <= traces.AUTO_FULL_MAPS_BYTES else "on_demand"
        if maps == "budget":
            info = self.info
            return choose_maps(info.n_layer, info.n_head, info.d_model, n_tokens,
                               bytes_per_token=bytes_per_token)
        if maps in ("full", "on_demand", "none"):
            return maps
        raise InputError(f"maps must be 'auto', 'budget', 'full', 'on_demand' or 'none', got "
                         f"{maps!r}")

    def plan(self, text: str, text_pair: str | None = None, max_tokens: int | None = None,
             maps="budget") -> TracePlan:
        """What trace(text, text_pair, max_tokens, maps=maps) would read and hold (TracePlan),
        from the tokenizer alone: "budget" (default, what the app runs) holds the maps whole
        while they fit the server's share for one input, else on demand, and refuses a text
        that fits neither way (the plan's refused says why; plan.check() raises it)."""
        enc = self.encode(text, text_pair, max_tokens)
        n = len(enc.input_ids)
        refused = ""
        try:
            kind = self.maps_kind(n, maps)
        except InputError as error:
            if maps != "budget":  # a maps= no trace takes: the caller's mistake, said now
                raise
            kind, refused = "none", str(error)
        held = {"full": 4 * self.info.n_layer * self.info.n_head * n * n,
                "on_demand": self.on_demand_bytes(n)}
        return TracePlan(n, enc.n_tokens_before_truncation, enc.truncated, kind,
                         held.get(kind, self.on_demand_bytes(n)), refused)

    def on_demand_bytes(self, n_tokens: int) -> int:
        """What an on-demand trace of n_tokens holds: each layer's input, L x T x d floats."""
        return 4 * self.info.n_layer * n_tokens * self.info.d_model

    def _forward(self, ids: list[int], types: list[int] | None, *, mask=None,
                 ablation: str = "zero", maps: str = "full", hooks=None,
                 weights: str = "attention", window=None):
        """One forward, with hooks (an interventions.Hooks: what run() keeps) when given.
        -> (maps: float32 [L, H, T, T] | OnDemandMaps | None, embedded,
        final residual, last hidden). Attention runs a block of query rows at a time
        (no [H, T, T] scores); full maps are written block by block into one buffer, so the
        array handed out is that buffer itself (no per-layer copies). Without maps, short
        inputs (up to CHUNKED_FROM tokens) take the plain path. weights="value": the maps
        are value-weighted (maps.value_weighted: the norms read at the "v" point). window: an
        engine.windows.AttentionWindow restricting heads to a sink and a window."""
        n = len(ids)
        net = self.network
        valued = ValueNorms(net, hooks) if check_weights(weights) == "value" else None
        hooks = hooks if valued is None else valued
        with torch.inference_mode():
            input_ids = torch.tensor([ids], dtype=torch.long, device=net.device)
            token_types = None if types is None else torch.tensor([types], dtype=torch.long,
                                                                  device=net.device)
            embedded = net.embed(input_ids, token_types)
            if maps == "full":
                buffer = torch.empty(self.info.n_layer, self.info.n_head, n, n,
                                     dtype=torch.float32, device=net.device)
                # The same chunked arithmetic as on-demand maps: both give identical maps.
                final, _ = net.run_layers(embedded, 0, None, None, head_mask=mask,
                                          ablation=ablation, attentions_out=buffer,
                                          query_chunk=QUERY_CHUNK, hooks=hooks,
                                          attention_window=window)
                found = buffer.cpu().numpy()  # the buffer itself on the CPU
            elif maps == "on_demand" or n > CHUNKED_FROM:
                inputs: list | None = [] if maps == "on_demand" else None
                final, _ = net.run_layers(embedded, 0, None, None, head_mask=mask,
                                          ablation=ablation, layer_inputs=inputs,
                                          query_chunk=QUERY_CHUNK, hooks=hooks,
                                          attention_window=window)
                found = None if inputs is None else LayerInputMaps(net, inputs, window)
            else:
                final, _ = net.run_layers(embedded, 0, None, net.attention_bias(n),
                                          head_mask=mask, ablation=ablation, hooks=hooks,
                                          attention_window=window)
                found = None
            if valued is not None and found is not None:
                found = weigh_maps(found, valued.array())
            return found, embedded, final, net.finish(final)

    def _run_capture(self, ids: list[int], types: list[int] | None, head_mask=None,
                     ablation: str = "zero", maps="full", weights: str = "attention",
                     window=None):
        """(maps, last hidden [T, d] numpy) of one forward."""
        mask = None if head_mask is None else self.check_head_mask(head_mask)
        if mask is not None and mask.dim() != 2:
            raise InputError("a trace takes one head mask of shape [layers, heads]")
        if window is not None and window.heads.dim() != 2:
            raise InputError("a trace takes one attention window with heads [layers, heads]")
        found, _, _, last_hidden = self._forward(
            ids, types, mask=mask, ablation=ablation, maps=self.maps_kind(len(ids), maps),
            weights=weights, window=window)
        return found, to_numpy(last_hidden[0])

    def trace(self, text: str, text_pair: str | None = None, max_tokens: int | None = None,
              head_mask=None, ablation: str = "zero", maps="auto",
              weights: str = "attention", attention_window=None) -> AttentionTrace:
        """Every head's attention map for the text (and sentence B, for BERT).

        head_mask [L, H] (1 keeps a head, 0 removes its output; see score()) shows how
        switching heads off changes the maps of the layers above them; a masked head's own
        map is still what its softmax computed.
        maps: "full" holds every map; "on_demand" holds what rebuilds them and computes a
        head's or a layer's map when asked (trace.head_map, trace.layer_maps, trace.rows);
        "auto" (default) holds them whole while they take at most AUTO_FULL_MAPS_BYTES.
        weights: "attention" (the softmax's weights) or "value": every row is what the head
        moves from each key, alpha_ij ||f_h(x_j)||, normalized to sum 1 (Kobayashi et al.
        2020; mha_viz.maps.value_weighted), read by every statistic as the weights are.
        attention_window: heads restricted to a sink and a window, as score() takes it; the
        maps are those the restricted heads compute (on demand too)."""
        window = self.check_attention_window(attention_window)
        enc = self.encode(text, text_pair, max_tokens)
        kind = self.maps_kind(len(enc.input_ids), maps)
        if kind == "none":
            raise InputError("a trace holds maps: use maps='full', 'on_demand' or 'auto'")
        attentions, _ = self._run_capture(enc.input_ids, enc.token_type_ids, head_mask, ablation,
                                          kind, weights, window)
        return self._make_trace(enc, attentions, text, text_pair, weights, head_mask=head_mask,
                                ablation=ablation, attention_window=window)

    def run_hooked(self, text, hooks, text_pair: str | None = None,
                   max_tokens: int | None = None, maps="none"):
        """(encoding, maps): one forward of a text (or pre-tokenized ids) with hooks (an
        engine.interventions.Hooks) reading or replacing the engine's named points; maps as
        trace() takes them ("none" by default: None), the softmax's weights."""
        if isinstance(text, str):
            enc = self.encode(text, text_pair, max_tokens)
        else:
            enc = self.encoding_of_ids(self._check_ids(text))
        kind = self.maps_kind(len(enc.input_ids), maps)
        found, *_ = self._forward(enc.input_ids, enc.token_type_ids, maps=kind, hooks=hooks)
        return enc, found

    def trace_ids(self, ids, token_type_ids=None, maps="auto",
                  weights: str = "attention") -> AttentionTrace:
        """Trace pre-tokenized input (no special tokens are added); weights: as trace()."""
        ids = self._check_ids(ids)
        types = [0] * len(ids) if token_type_ids is None else [int(t) for t in token_type_ids]
        if len(types) != len(ids):
            raise InputError("token_type_ids must have one entry per token id")
        kinds = max(self.network.config.type_vocab_size, 1)  # no token types: all 0
        if any(not 0 <= t < kinds for t in types):
            raise InputError(f"token_type_ids must be 0..{kinds - 1} for this model")
        enc = Encoding(ids, types, [i in self._special_ids for i in ids], False, len(ids))
        attentions, _ = self._run_capture(ids, types, maps=maps, weights=weights)
        return self._make_trace(enc, attentions, "", None, weights)

    def attention_by_layer(self, batch: list[list[int]], weights: str = "attention",
                           token_types: list[list[int]] | None = None, hooks=None):
        """Run a batch of pre-tokenized segments (padded, the padding masked, so each
        segment's maps are those it gets alone) one layer at a time, yielding (layer,
        weights [B, H, W, W] float32) as each layer's attention is computed: segment b's own
        maps are weights[b, :, :n_b, :n_b]. Nothing is kept from one layer to the next but
        the hidden state, so a statistic reads the maps while they are fresh and the batch
        never holds [B, L, H, W, W]. weights="value": value-weighted, as trace() gives them
        (a padded key's weight is 0, so each segment's rows are its own). token_types: each
        segment's token type ids (a sentence pair's), else none given. hooks: the engine's
        (engine.interventions), for the forward (maps.summaries.ScoreEntropies)."""
        width = max(len(ids) for ids in batch)
        net = self.network

        def padded(rows, value):
            return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows],
                                dtype=torch.long, device=net.device)

        input_ids = padded(batch, self.tokenizer.pad_token_id or 0)
        mask = padded([[1] * len(ids) for ids in batch], 0)
        types = None if token_types is None else padded(token_types, 0)
        with torch.inference_mode():
            h, bias = net.embed(input_ids, types), net.attention_bias(width, mask)
        yield from weights_by_layer(net, h, bias, mask, weights, hooks)

    def _make_trace(self, enc: Encoding, attentions, text, text_pair,
                    weights: str = "attention", head_mask=None, ablation: str = "zero",
                    prompt_length: int | None = None, attention_window=None) -> AttentionTrace:
        """The trace of one forward's maps; head_mask, ablation, prompt_length,
        attention_window (engine.windows.AttentionWindow): what made them, recorded on the
        trace (and so in its key)."""
        with self._tokenizer_lock:
            tokens = list(self.tokenizer.convert_ids_to_tokens(enc.input_ids))
        if enc.n_chars_given is not None:  # only the first MAX_TEXT_CHARS were read
            text = text[:MAX_TEXT_CHARS]
        return AttentionTrace(
            tokens=tokens, weights=weights, n_chars_given=enc.n_chars_given,
            head_mask=None if head_mask is None else np.asarray(head_mask, dtype=np.float32),
            ablation=ablation, prompt_length=prompt_length,
            attention_window=None if attention_window is None else attention_window.described(),
            token_ids=enc.input_ids, attentions=attentions,
            display_tokens=self.display_tokens(enc.input_ids),
            special_mask=np.array(enc.special_mask, dtype=bool),
            special_tokens=self.special_tokens,
            segment_ids=np.array(enc.token_type_ids, dtype=np.int64),
            causal=self.info.causal, truncated=enc.truncated,
            n_tokens_before_truncation=enc.n_tokens_before_truncation,
            model_name=self.info.name, model_type=self.info.model_type, text=text,
            text_pair=text_pair,
            kv_heads=list(self.info.kv_heads), origin=digest(self))

    def run(self, text: str, text_pair: str | None = None, max_tokens: int | None = None,
            head_mask=None, maps="auto", weights: str = "attention") -> ForwardRun:
        """One forward pass that keeps what the trace, the predictions, the target metrics and
        direct logit attribution need, so each of them costs no further forward. maps,
        weights: as trace() takes them; maps False (or "none") skips the maps (run.trace is
        then None)."""
        enc = self.encode(text, text_pair, max_tokens)
        mask = None if head_mask is None else self.check_head_mask(head_mask)
        if mask is not None and mask.dim() != 2:
            raise InputError("a run takes one head mask of shape [layers, heads]")
        # besides the maps a run keeps, per layer and token, the heads' outputs and the MLP's
        info = self.info
        kind = self.maps_kind(len(enc.input_ids), maps, bytes_per_token=4 * info.n_layer * (
            info.d_model + info.n_head * info.d_head))
        kept = Interventions(capture=["z", "mlp_out"])  # what attribution reads
        found, embedded, final, last_hidden = self._forward(
            enc.input_ids, enc.token_type_ids, mask=mask, maps=kind, hooks=kept, weights=weights)
        records = [{"context": kept.captured[("z", layer)],
                    "mlp_out": kept.captured[("mlp_out", layer)]}
                   for layer in range(self.info.n_layer)]
        trace = None
        if found is not None:
            trace = self._make_trace(enc, found, text, text_pair, weights, head_mask=head_mask)
        return ForwardRun(self, text, enc, trace, embedded, records, final, last_hidden,
                          None if head_mask is None else np.asarray(head_mask, np.float32))

    def trace_batch(self, requests, weights: str = "attention") -> list[AttentionTrace]:
        """The traces of several short texts from one padded forward: requests are (text,
        text_pair, max_tokens); each trace is what trace() gives it with maps held whole, to
        float rounding (mha_viz.models.batched)."""
        from .batched import trace_batch

        return trace_batch(self, requests, weights)

    def run_with_cache(self, text_or_ids, names=None, ungroup_kv: bool = False,
                       max_bytes: int | None = None):
        """(logits [1, T, vocab], cache): one forward keeping the named activations, read as
        cache["z", 20] or cache["blocks.20.attn.hook_z"] in TransformerLens's layouts (see
        mha_viz.models.activation_cache; names limits what is kept, within the memory budget)."""
        from .activation_cache import run_with_cache

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
            ids, types = self.network_inputs(enc)
            last_hidden, _ = self.network(ids, types, head_mask=mask)
            return to_numpy(self.network.lm_logits(last_hidden)[0])

    def embed(self, text: str) -> np.ndarray:
        """Mean-pooled, L2-normalized last hidden state: the sentence-transformers embedding
        of a MiniLM-style checkpoint."""
        pooled = torch.from_numpy(self.last_hidden_state(text)).mean(0)
        return F.normalize(pooled, dim=0).numpy()


def load_model(name: str | os.PathLike = "minilm", local_dirs: list[Path] | None = None, *,
               dtype="float32", device="cpu") -> Model:
    """A bundled name ("minilm", "smollm2"; "induction-toy": a bundled training run's last
    checkpoint), a local checkpoint folder or .gguf file, or a hub id ("gpt2"). ``local_dirs``: limit local paths to these folders (the app passes
    checkpoints.allowed_dirs() for its visitors); None allows any.

    dtype: "float32" (exact: maps equal transformers' to 1e-5), "bfloat16" or "float16"
    (half the memory; the softmax and everything returned stay float32: engine/placement.py).
    device: "cpu", "cuda", "cuda:N" or "mps". A model whose weights would not fit the memory
    free on the device is refused, with the sizes, before any weight is read."""
    where = placement(dtype, device)
    resolved = (bundled_run_checkpoint(name)  # a bundled training run: its last step
                or checkpoints.resolve(name, local_dirs=local_dirs))
    memory.return_large_blocks()  # before the first big allocations: see mha_viz.core.memory
    network, tokenizer = checkpoints.load(resolved, where)
    # transformers' own notion of the context is not the model's here: we truncate ourselves
    tokenizer.model_max_length = int(1e9)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    config = network.config
    if not isinstance(network, TransformerStack):  # an encoder and a decoder
        return _encoder_decoder_model(resolved, network, tokenizer, where)
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
    info = ModelInfo(name=resolved.name, model_type=config.model_type, family=config.family,
                     n_layer=config.n_layer, n_head=config.n_head, d_model=config.d_model,
                     d_head=config.d_head,
                     max_positions=config.max_positions, vocab_size=config.vocab_size,
                     source=resolved.source, score_kind=score_kind, causal=config.causal,
                     n_kv_head=config.n_kv_head, kv_heads=tuple(config.kv_heads),
                     description=describe(config), has_lm_head=config.has_lm_head,
                     dtype=where.dtype_name, device=where.device_name)
    return Model(network, tokenizer, info)


def _encoder_decoder_model(resolved, network: EncoderDecoderStack, tokenizer,
                           where: Placement) -> EncoderDecoderModel:
    """The library model of a loaded encoder-decoder (one whose encoder reads an image:
    ImageToTextModel)."""
    config = network.config
    encoder, decoder = config.encoder, config.decoder
    vocab = len(tokenizer)
    for side, stack in (("encoder", encoder), ("decoder", decoder)):
        if vocab > stack.vocab_size:
            raise CorruptCheckpointError(f"the tokenizer has {vocab} tokens but the model's "
                                         f"{side} embedding only {stack.vocab_size}")
    info = ModelInfo(
        name=resolved.name, model_type=config.model_type, family=config.family,
        n_layer=decoder.n_layer, n_head=decoder.n_head,
        d_model=decoder.d_model, d_head=decoder.d_head, max_positions=decoder.max_positions,
        vocab_size=decoder.vocab_size, source=resolved.source, score_kind="target_loss",
        causal=True, n_kv_head=decoder.n_kv_head, kv_heads=tuple(decoder.kv_heads),
        description=f"encoder: {describe(encoder)}. decoder: {describe(decoder)}",
        has_lm_head=True, encoder_decoder=True, n_encoder_layer=encoder.n_layer,
        n_encoder_head=encoder.n_head, dtype=where.dtype_name, device=where.device_name)
    if config.image is not None:  # the encoder reads an image: cross-modal attention
        return ImageToTextModel(network, tokenizer, info)
    return EncoderDecoderModel(network, tokenizer, info)
