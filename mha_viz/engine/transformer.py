"""One transformer stack for every family, built on attention.MultiHeadAttention from a
StackConfig (config.py), which describes an architecture by what varies between families,
never by its name; the family modules in checkpoints/families/ make one. The forward is split
into embed / run_layers / finish so analyses can restart from the hidden state entering any
layer."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .attention import MultiHeadAttention, causal_mask_bias, padding_mask_bias
from .config import ACTIVATIONS, StackConfig
from .cross_input import CrossInput
from .experts import MixtureOfExperts
from .interventions import Prefixed
from .norms import RMSNorm
from .placement import to_numpy
from .positions import (apply_rotary, relative_position_bucket, relative_positions,
                        rotary_tables, sinusoidal_table)
from .wiring import Step, wiring_of

# Inputs longer than this run attention in blocks of QUERY_CHUNK query rows when no weights
# are kept: the scores of one block of SmolLM2 at 8,192 tokens take 75 MB, all rows 2.4 GB.
CHUNKED_FROM = 512
QUERY_CHUNK = 256


def make_norm(config: StackConfig) -> nn.Module:
    if config.norm == "rmsnorm":
        return RMSNorm(config.d_model, config.layer_norm_eps, config.rms_scale_in_float32)
    return nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)


class Block(nn.Module):
    """One transformer layer: attention + MLP with residuals, pre-norm or post-norm.
    wiring: what it reads and writes, in order (engine.wiring: the steps forward runs)."""

    def __init__(self, config: StackConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.wiring: tuple[Step, ...] = wiring_of(config)
        self.pre_ln = config.pre_norm
        self.attn = MultiHeadAttention(config.d_model, config.n_head, fused_qkv=True,
                                       bias=config.qkv_bias, scale=config.attention_scale(layer),
                                       n_kv_head=config.n_kv_head, d_head=config.d_head,
                                       out_bias=config.out_bias, window=config.window(layer),
                                       softcap=config.attn_softcap, qk_norm=config.qk_norm,
                                       norm_eps=config.layer_norm_eps, clip=config.clip_qkv,
                                       rms_scale_in_float32=config.rms_scale_in_float32)
        # OLMo 2 normalizes only the sub-layers' outputs: its inputs pass unchanged
        self.ln_1 = make_norm(config) if config.input_norms else nn.Identity()
        self.ln_2 = make_norm(config) if config.input_norms else nn.Identity()
        self.post_norms = config.post_norms
        if config.post_norms:  # Gemma 2: each sub-layer's output, before it joins the stream
            self.ln_attn_out = make_norm(config)
            self.ln_mlp_out = make_norm(config)
        if config.cross_attention:  # queries from this stream, keys and values from memory
            self.cross = MultiHeadAttention(config.d_model, config.n_head, fused_qkv=False,
                                            bias=config.qkv_bias,
                                            scale=config.attention_scale(layer),
                                            d_head=config.d_head, out_bias=config.out_bias)
            self.ln_cross = make_norm(config)
        self.gated = config.gated_mlp
        self.parallel = config.parallel_residual
        self.act = ACTIVATIONS[config.activation]
        if config.n_experts:  # Mixtral: a router picks experts_per_token gated MLPs a token
            self.experts = MixtureOfExperts(config.d_model, config.d_ff, config.n_experts,
                                            config.experts_per_token, self.act)
            return
        # A gated MLP's gate and up projections are one matrix [gate; up]: one GEMM.
        width = 2 * config.d_ff if self.gated else config.d_ff
        self.mlp_in = nn.Linear(config.d_model, width, bias=config.mlp_bias)
        self.mlp_out = nn.Linear(config.d_ff, config.d_model, bias=config.mlp_bias)

    def module_of(self, step: Step):
        """The submodule (or, for the MLP, the method) that computes one step of wiring."""
        return getattr(self, step.module)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "experts"):
            return self.experts(x)
        if self.gated:  # two products on the halves of [gate; up]: each output is
            # contiguous, and an activation on a strided bfloat16 view runs 3x slower
            weight, bias = self.mlp_in.weight, self.mlp_in.bias
            half = weight.shape[0] // 2
            gate = F.linear(x, weight[:half], None if bias is None else bias[:half])
            up = F.linear(x, weight[half:], None if bias is None else bias[half:])
            return self.mlp_out(self.act(gate) * up)
        return self.mlp_out(self.act(self.mlp_in(x)))

    def attention_input(self, h: torch.Tensor) -> torch.Tensor:
        """What the heads read: the normalized residual stream (pre-norm) or h itself."""
        return self.ln_1(h) if self.pre_ln else h

    def after_self_attention(self, h, bias=None, rotary=None):
        """The stream after this layer's self-attention sub-layer (no gates, no hooks): what
        a decoder layer's cross-attention reads next (inside.py shows its steps)."""
        attended, _ = self.attn(self.attention_input(h), bias=bias, rotary=rotary)
        if self.post_norms:
            attended = self.ln_attn_out(attended)
        return h + attended if self.pre_ln else self.ln_1(h + attended)

    def cross_input(self, h):
        """What the cross-attention heads read of the stream: normalized (pre-norm) or h."""
        return self.ln_cross(h) if self.pre_ln else h

    def attend_to_memory(self, h, memory: "CrossInput", hooks=None):
        """The cross-attention sub-layer: h attends to the encoder's output. hooks: see
        Block.forward; the attention's points are seen as cross_q, ..., cross_z and the
        sub-layer's output as cross_out."""
        gate = memory.head_mask
        if gate is not None:  # [L, H], or [B, L, H]: a gate per sequence of the batch
            gate = gate[self.layer] if gate.dim() == 2 else gate[:, self.layer]
        attended, weights = self.cross(
            self.cross_input(h), bias=memory.bias, head_mask=gate, ablation=memory.ablation,
            weights_out=memory.weights_out_for(self.layer), memory=memory.states,
            hooks=None if hooks is None else Prefixed(hooks), layer=self.layer)
        if hooks is not None:
            attended = hooks("cross_out", self.layer, attended)
        if memory.kept is not None:
            memory.kept.append(weights)
        return h + attended if self.pre_ln else self.ln_cross(h + attended)

    def self_attention(self, h, hooks=None, **attention):
        """The layer's self-attention on h, the stream entering it: -> (h as the hooks left
        it, the heads' output [B, T, d] before any post-norm, weights). attention: what
        MultiHeadAttention.forward takes; hooks: see forward (resid_pre, attn_in, the
        attention's own points)."""
        attn_in = h
        if hooks is not None:
            h = hooks("resid_pre", self.layer, h)
            attn_in = hooks("attn_in", self.layer, h)
        attended, weights = self.attn(self.attention_input(attn_in), hooks=hooks,
                                      layer=self.layer, **attention)
        return h, attended, weights

    def forward(self, h, *, bias=None, head_mask=None, ablation="zero", attention_mask=None,
                weights_out=None, rotary=None, query_chunk=None, causal=False, hooks=None,
                past=None, memory=None, head_window=None):
        """query_chunk, causal: see MultiHeadAttention.forward (chunked, no weights kept).
        hooks: an interventions.Hooks called at this layer's named points: resid_pre,
        attn_in (what the heads read: the stream, or per-head streams [B, 3, H, T, d]),
        attn_out, resid_mid (the stream the MLP reads), mlp_in, mlp_out, resid_post, and
        the attention's own (see MultiHeadAttention.forward); with a parallel MLP, mlp_in is
        the layer's input and resid_mid the stream after attention alone. past: the keys and
        values of the positions before h's (MultiHeadAttention.forward). memory: a decoder layer's
        encoder output and what it needs, a CrossInput; its weights go to memory.kept.
        head_window: this layer's sink + window restriction (windows.HeadWindow) or None."""
        layer = self.layer
        h, attended, weights = self.self_attention(
            h, hooks, bias=bias, head_mask=head_mask, ablation=ablation,
            attention_mask=attention_mask, weights_out=weights_out, rotary=rotary,
            query_chunk=query_chunk, causal=causal, past=past, head_window=head_window)
        if self.post_norms:
            attended = self.ln_attn_out(attended)
        if hooks is not None:
            attended = hooks("attn_out", layer, attended)
        layer_input = h
        h = mid = h + attended if self.pre_ln else self.ln_1(h + attended)
        if memory is not None:
            h = self.attend_to_memory(h, memory, hooks)
        if hooks is not None:
            h = hooks("resid_mid", layer, h)
        # parallel: the MLP reads the layer's input, beside the attention, not after it
        mlp_in = layer_input if self.parallel else h
        if hooks is not None:
            mlp_in = hooks("mlp_in", layer, mlp_in)
        mlp_out = self.mlp(self.ln_2(mlp_in) if self.pre_ln else mlp_in)
        if self.post_norms:
            mlp_out = self.ln_mlp_out(mlp_out)
        if hooks is not None:
            mlp_out = hooks("mlp_out", layer, mlp_out)
        if self.parallel and h is mid:  # (attention + MLP) + stream, as transformers adds:
            out = (attended + mlp_out) + layer_input  # in bfloat16 the order rounds
        else:
            out = h + mlp_out if self.pre_ln else self.ln_2(h + mlp_out)
        if hooks is not None:
            out = hooks("resid_post", layer, out)
        return out, weights


class TransformerStack(nn.Module):
    def __init__(self, config: StackConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        if config.positions == "learned":
            self.pos_emb = nn.Embedding(config.max_positions + config.position_offset,
                                        config.d_model)
        elif config.positions == "sinusoidal":  # fixed: computed, never read from a file
            self.register_buffer("pos_table", torch.empty(0), persistent=False)
        elif config.positions == "relative":
            self.rel_bias = nn.Embedding(config.relative_buckets, config.n_head)
        if config.type_vocab_size:
            self.type_emb = nn.Embedding(config.type_vocab_size, config.d_model)
        if config.embedding_norm:
            self.emb_ln = make_norm(config)
        self.blocks = nn.ModuleList(Block(config, layer) for layer in range(config.n_layer))
        if config.final_norm:
            self.final_ln = make_norm(config)
        if config.lm_head == "separate":
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        elif config.lm_head == "mlm":
            # BERT's MLM head: dense -> activation -> LayerNorm -> decoder tied to tok_emb
            self.mlm_dense = nn.Linear(config.d_model, config.d_model)
            self.mlm_ln = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
            self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        if config.logits_bias:
            self.logits_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self._rotary_cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def device(self) -> torch.device:
        return self.tok_emb.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The weights' dtype (placement.py: what runs in it and what in float32)."""
        return self.tok_emb.weight.dtype

    # --- the forward, in pieces ---------------------------------------------------------

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
              offset: int = 0):
        """[B, T] ids (or float [B, T, d], already embedded) at positions offset.. of the
        text -> the input of layer 0: embedding_terms summed, then the embedding norm."""
        terms = self.embedding_terms(input_ids, token_type_ids, offset)
        h = terms[0][1]
        for _, term in terms[1:]:
            h = h + term
        norm = self.embedding_norm
        return h if norm is None else norm(h)

    def embedding_terms(self, input_ids: torch.Tensor,
                        token_type_ids: torch.Tensor | None = None, offset: int = 0
                        ) -> list[tuple[str, torch.Tensor]]:
        """The named terms ([B, T, d], or [T, d] for all rows) whose sum, in order, is layer
        0's input before the embedding norm: "embed" (times the family's scale; float ids are vectors already),
        "pos_embed" (learned or fixed positions), "type_embed" (BERT's segments)."""
        config = self.config
        input_ids = input_ids.to(self.device)  # ids from a caller on the CPU, weights on a GPU
        vectors = input_ids.is_floating_point()
        h = input_ids if vectors else self.tok_emb(input_ids)
        if config.embed_scale != 1.0 and not vectors:  # scales token embeddings only
            h = h * config.embed_scale
        terms = [("embed", h)]
        length = input_ids.shape[1]
        positions = torch.arange(offset, offset + length, device=input_ids.device)
        if config.positions == "learned":
            terms.append(("pos_embed", self.pos_emb(positions + config.position_offset)))
        elif config.positions == "sinusoidal":
            terms.append(("pos_embed", self.sinusoids(offset + length)[offset:]))
        if config.type_vocab_size:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            terms.append(("type_embed", self.type_emb(token_type_ids.to(self.device))))
        return terms

    @property
    def embedding_norm(self) -> nn.Module | None:
        """The norm right after the embeddings (BERT), else None."""
        return self.emb_ln if self.config.embedding_norm else None

    def sinusoids(self, length: int) -> torch.Tensor:
        """[T, d] fixed positions (attention.sinusoidal_table), built once for the context."""
        if self.pos_table.shape[0] < length:
            size = max(length, self.config.max_positions)
            self.pos_table = sinusoidal_table(size, self.config.d_model).to(self.device,
                                                                            self.dtype)
        return self.pos_table[:length]

    def position_buckets(self, n_queries: int, n_keys: int | None = None, offset: int = 0):
        """[T, S] the bucket of every (query, key) distance under T5's relative position
        bias: bidirectional buckets in an encoder, causal ones in a decoder."""
        return relative_position_bucket(
            relative_positions(n_queries, n_queries if n_keys is None else n_keys, offset),
            not self.config.causal, self.config.relative_buckets,
            self.config.relative_max_distance)

    def position_bias(self, n_queries: int, n_keys: int | None = None, offset: int = 0):
        """T5's relative position bias [1, H, T, S] (None for other positions): each head's
        learned value for the bucket of every (query, key) distance, added to the scores."""
        if self.config.positions != "relative":
            return None
        buckets = self.position_buckets(n_queries, n_keys, offset)
        return self.rel_bias(buckets.to(self.rel_bias.weight.device)).permute(2, 0, 1) \
            .unsqueeze(0)

    def key_bias(self, attention_mask: torch.Tensor | None = None, dtype=torch.float32):
        """The padding bias [B, 1, 1, T] alone (None without padding): what chunked
        attention takes, building the causal mask itself one block of rows at a time."""
        if attention_mask is None or bool(attention_mask.all()):
            return None
        return padding_mask_bias(attention_mask.to(self.device), dtype)

    def attention_bias(self, length: int, attention_mask: torch.Tensor | None = None,
                       dtype=torch.float32):
        """The additive bias every layer shares: causal for causal models, padding when
        given, and T5's relative position bias."""
        bias = causal_mask_bias(length, dtype, self.device) if self.config.causal else None
        relative = self.position_bias(length)
        if relative is not None:
            bias = relative if bias is None else relative + bias
        if attention_mask is not None and not bool(attention_mask.all()):
            padding = padding_mask_bias(attention_mask.to(self.device), dtype)
            bias = padding if bias is None else bias + padding
        return bias

    def rotary(self, length: int, layer: int = 0):
        """(cos, sin) [T, rotary_dim] of this layer's rotary positions (StackConfig.rope_of),
        else None. Kept per base, for the longest length asked so far (a position's row does
        not depend on the table's length): every layer with the same RoPE, every call on the
        same text and every token written after it share them."""
        if self.config.positions != "rotary":
            return None
        theta, scaling = self.config.rope_of(layer)
        key = (theta, scaling)
        tables = self._rotary_cache.get(key)
        if tables is None or tables[0].shape[0] < length:
            # Ordinary tensors even when the first caller runs under inference_mode: gradient
            # analyses reuse them, and autograd cannot save inference tensors. Rounded up to
            # a power of two: text written a token at a time computes them a few times only.
            size = 1 << max(0, int(length) - 1).bit_length()
            with torch.inference_mode(False):
                tables = rotary_tables(size, self.config.rotary_dim, theta, self.device,
                                       scaling=scaling)
            self._rotary_cache[key] = tables
        if tables[0].shape[0] == length:
            return tables
        return tables[0][:length], tables[1][:length]

    def rotary_rows(self, offset: int, length: int, layer: int = 0):
        """(cos, sin) of this layer's rotary positions offset..offset + length - 1 (rows of
        the cached tables of rotary()), else None."""
        rotary = self.rotary(offset + length, layer)
        if rotary is not None and offset:
            rotary = (rotary[0][offset:], rotary[1][offset:])
        return rotary

    def keys_and_values(self, h, layer: int, offset: int = 0):
        """The rotated keys and the values [B, H_kv, T, d_k] that layer `layer` computes from
        h, the stream entering it at positions offset.. of the text: what later rows read as
        their past when a run computes only some query rows of the layer."""
        block = self.blocks[layer]
        _, k, v = block.attn.project_qkv(block.attention_input(h))
        rotary = self.rotary_rows(offset, h.shape[1], layer)
        if rotary is not None:
            k = apply_rotary(k, *rotary)
        return k, v

    def weights_by_layer(self, h, bias, attention_mask, hooks=None):
        """Every layer on h, yielding (layer, weights [B, H, T, T] numpy) as each is computed:
        only the hidden state is kept between layers (corpus mode reads maps while fresh).
        The last layer runs its self-attention only: nothing reads what follows (its output
        projection's result and its MLP, a tenth of a 6-layer model's forward). hooks: as
        run_layers takes them (value norms read at "v")."""
        last = self.config.n_layer - 1
        with torch.inference_mode():
            for layer in range(last):
                h, kept = self.run_layers(h, layer, layer + 1, bias, attention_mask=attention_mask,
                                          keep_attentions=True, hooks=hooks)
                yield layer, to_numpy(kept[0])
            _, _, weights = self.blocks[last].self_attention(
                h, hooks, bias=bias, attention_mask=attention_mask,
                rotary=self.rotary_rows(0, h.shape[1], last), causal=self.config.causal)
            yield last, to_numpy(weights)

    def run_layers(self, h, start=0, stop=None, bias=None, *, head_mask=None, ablation="zero",
                   attention_mask=None, attentions_out=None, keep_attentions=False,
                   layer_inputs=None, query_chunk=None, hooks=None, offset=0, past_kv=None,
                   memory: CrossInput | None = None, attention_window=None):
        """Run layers start..stop-1 on h (the hidden state entering layer `start`).

        head_mask: [L, H] or [B, L, H] gates (see attention.gate_heads), indexed by absolute
        layer. attentions_out: [L, H, T, T] buffer the softmax writes into (batch of 1).
        keep_attentions: return a list of every layer's [B, H, T, T] weights.
        layer_inputs: a list that receives the hidden state entering each layer.
        query_chunk: attention a block of query rows at a time (attention.chunked_attention;
        the weights are kept only in attentions_out): bias is then the padding bias only
        (key_bias), the causal mask being built per block.
        hooks: an interventions.Hooks that reads or replaces named activations (see
        Block.forward).
        offset, past_kv: h holds positions offset.. of the text, and past_kv[layer] the keys
        (rotated) and values of positions 0..offset-1 at each layer run, which they read too
        (a causal run that reuses an unchanged prefix); bias is then for these rows
        (attention.causal_rows_bias(offset, offset + T)).
        memory: a decoder's encoder output (CrossInput), read by every layer's
        cross-attention. attention_window: a windows.AttentionWindow (heads [L, H] or
        [B, L, H]) restricting heads to a sink and a window, indexed by absolute layer.
        """
        if query_chunk is not None and keep_attentions:
            raise ValueError("chunked attention keeps weights only in attentions_out")
        stop = self.config.n_layer if stop is None else stop
        kept = []
        for layer in range(start, stop):
            rotary = self.rotary_rows(offset, h.shape[1], layer)
            if layer_inputs is not None:
                layer_inputs.append(h)
            gate = None
            if head_mask is not None:
                gate = head_mask[layer] if head_mask.dim() == 2 else head_mask[:, layer]
            out = None if attentions_out is None else attentions_out[layer].unsqueeze(0)
            past = None if past_kv is None else past_kv[layer]
            h, weights = self.blocks[layer](
                h, bias=bias, head_mask=gate, ablation=ablation, attention_mask=attention_mask,
                weights_out=out, rotary=rotary, query_chunk=query_chunk,
                causal=self.config.causal, hooks=hooks, past=past, memory=memory,
                head_window=None if attention_window is None else attention_window.layer(layer))
            if keep_attentions:
                kept.append(weights)
        return h, kept

    def finish(self, h, hooks=None):
        """Hidden state after the last layer -> the model's last hidden state. hooks: the
        final norm's "scale" [B, T, 1] (sqrt of the variance, or of the mean square, plus
        eps), read or replaced when hooks.wants it."""
        if not self.config.final_norm:
            return h
        if hooks is None or not hooks.wants("scale", None):
            return self.final_ln(h)
        norm = self.final_ln
        if self.config.norm == "layernorm":
            h = h - h.mean(-1, keepdim=True)
        scale = hooks("scale", None, torch.sqrt(h.pow(2).mean(-1, keepdim=True) + norm.eps))
        out = h / scale * norm.weight.to(h.dtype)
        return out + norm.bias if getattr(norm, "bias", None) is not None else out

    def lm_logits(self, last_hidden):
        """Vocabulary logits from the last hidden state."""
        head = self.config.lm_head
        if head in ("tied", "separate"):
            # the bias added inside the product, as nn.Linear does (one rounding in bfloat16)
            bias = self.logits_bias if self.config.logits_bias else None
            return self.capped(nn.functional.linear(self.scaled_for_unembedding(last_hidden),
                                                    self.unembedding(), bias))
        if head == "mlm":
            x = self.mlm_ln(ACTIVATIONS[self.config.activation](self.mlm_dense(last_hidden)))
            return x @ self.tok_emb.weight.T + self.mlm_bias
        raise RuntimeError("this checkpoint has no language-model head")

    def token_logits(self, last_hidden, token_ids: list[int]):
        """The logits of a few tokens only, [..., len(token_ids)]: with a plain unembedding,
        len(token_ids) dot products instead of the whole vocabulary (a target metric
        measured for every head of a sweep needs just these)."""
        if self.config.lm_head in ("tied", "separate") and not self.config.logits_bias:
            return self.capped(
                self.scaled_for_unembedding(last_hidden) @ self.unembedding()[token_ids].T)
        return self.lm_logits(last_hidden)[..., token_ids]

    def row_logits(self, last_hidden, token_ids: torch.Tensor):
        """[B] the logit of token_ids[b] from last_hidden[b] ([B, d]): one dot product a row
        with a plain unembedding (a metric's target), the same numbers as lm_logits."""
        if self.config.lm_head in ("tied", "separate") and not self.config.logits_bias:
            return self.capped((self.scaled_for_unembedding(last_hidden)
                                * self.unembedding()[token_ids]).sum(-1))
        return self.lm_logits(last_hidden).gather(1, token_ids[:, None])[:, 0]

    def capped(self, logits):
        """The logits soft-capped as the family says (Gemma 2: cap * tanh(logit / cap))."""
        cap = self.config.final_softcap
        return logits if not cap else torch.tanh(logits / cap) * cap

    def scaled_for_unembedding(self, last_hidden):
        """What W_U multiplies: the last hidden state, times T5's d_model**-0.5 when tied."""
        scale = self.config.unembed_scale
        return last_hidden if scale == 1.0 else last_hidden * scale

    def unembedding(self) -> torch.Tensor:
        """[vocab, d] W_U as the logits use it (tied or separate), for attribution."""
        if self.config.lm_head == "tied":
            return self.tok_emb.weight
        if self.config.lm_head == "separate":
            return self.lm_head.weight
        raise RuntimeError("this checkpoint has no plain unembedding")

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, head_mask=None,
                ablation="zero", attentions_out=None, keep_attentions=False, hooks=None,
                layer_inputs=None, *, attention_window=None):
        """ids [B, T] -> (last hidden [B, T, d], weights if kept); hooks, layer_inputs,
        attention_window: see run_layers. Past CHUNKED_FROM tokens, with no weights or hooks
        wanted, rows go in blocks."""
        length = input_ids.shape[1]
        h = self.embed(input_ids, token_type_ids)
        if (length > CHUNKED_FROM and not keep_attentions and attentions_out is None
                and hooks is None and self.config.positions != "relative"):  # bias per row, key
            h, kept = self.run_layers(h, 0, None, self.key_bias(attention_mask),
                                      head_mask=head_mask, ablation=ablation,
                                      attention_mask=attention_mask, layer_inputs=layer_inputs,
                                      query_chunk=QUERY_CHUNK, attention_window=attention_window)
        else:
            bias = self.attention_bias(length, attention_mask)
            h, kept = self.run_layers(h, 0, None, bias, head_mask=head_mask, ablation=ablation,
                                      attention_mask=attention_mask,
                                      attentions_out=attentions_out,
                                      keep_attentions=keep_attentions,
                                      layer_inputs=layer_inputs, hooks=hooks,
                                      attention_window=attention_window)
        return self.finish(h), kept
