"""Multi-head attention, written out step by step so every head's weights can be kept.

Notation (shared with the "Inside one head" page): B batch, T tokens, d = d_model, H query
heads, H_kv key/value heads (H_kv = H: multi-head; 1: multi-query; in between: grouped-query
attention, where query head h reads key/value head h // (H / H_kv)), d_k the head width.
X [B, T, d] -> Q [B, H, T, d_k], K, V [B, H_kv, T, d_k] -> (rotary positions on Q and K) ->
scores Q K^T * scale + mask -> softmax -> weights [B, H, T, T] -> weights V -> combine ->
[B, T, H d_k] -> W_O -> [B, T, d].
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .norms import RMSNorm
from .positions import apply_rotary


def split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """[B, T, n_head * d_k] -> [B, n_head, T, d_k]."""
    batch, length, width = x.shape
    return x.view(batch, length, n_head, width // n_head).transpose(1, 2)


def combine_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, T, d_k] -> [B, T, H * d_k]; the inverse of split_heads."""
    batch, n_head, length, d_k = x.shape
    return x.transpose(1, 2).reshape(batch, length, n_head * d_k)


def kv_head_of(n_head: int, n_kv_head: int) -> list[int]:
    """The key/value head each query head reads: consecutive query heads share one
    (Hugging Face's repeat_kv and llama.cpp order them so)."""
    group = n_head // n_kv_head
    return [h // group for h in range(n_head)]


def causal_mask_bias(length: int, dtype=torch.float32, device=None) -> torch.Tensor:
    """Additive mask [T, T]: 0 where query i may see key j (j <= i), -inf above the diagonal."""
    return causal_rows_bias(0, length, dtype, device)


def padding_mask_bias(attention_mask: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """[B, T] of 1 (real token) / 0 (padding) -> additive bias [B, 1, 1, T] hiding padded keys.

    Uses the dtype's most negative finite value rather than -inf so that a padded query row,
    which may see no real key, still gives finite (ignored) numbers instead of NaN.
    """
    hidden = (1.0 - attention_mask.to(dtype)) * torch.finfo(dtype).min
    return hidden[:, None, None, :]


# --- attention ------------------------------------------------------------------------------


def raw_scores(q: torch.Tensor, k: torch.Tensor, scale: float, softcap: float = 0.0,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """Q K^T * scale, soft-capped when softcap > 0 (Gemma 2: cap * tanh(s / cap)), before
    any bias or mask: the one place where attention scores are computed.

    q [B, H, r, d_k]; k [B, H_kv, S, d_k] with H a multiple of H_kv (grouped-query: each
    group of H / H_kv consecutive query heads reads one key/value head; the scores of a group
    come from one matmul, without copying K for every query head). out: a buffer of B*H*r*S
    floats the scores are written into. -> [B, H, r, S]."""
    batch, n_head, rows, d_k = q.shape
    n_kv_head, keys = k.shape[1], k.shape[2]
    group = n_head // n_kv_head
    grouped = q.reshape(batch, n_kv_head, group * rows, d_k)
    if out is None or out.dtype != q.dtype:  # a float32 buffer and bfloat16 weights
        scores = torch.matmul(grouped, k.transpose(-1, -2))
    else:
        scores = torch.matmul(grouped, k.transpose(-1, -2),
                              out=out.view(batch, n_kv_head, group * rows, keys))
    scores = scores.view(batch, n_head, rows, keys)
    scores.mul_(scale)
    if softcap:  # out of place: the gradient of tanh reads its output, which must stay
        scores = torch.tanh(scores / softcap) * softcap
    return scores


def hidden_keys(rows: torch.Tensor, n_keys: int, causal: bool, window: int = 0,
                out: torch.Tensor | None = None) -> torch.Tensor | None:
    """[r, S] True where query position rows[i] may not see key j: a later key (causal) or
    one window or more tokens back (a sliding window: query i sees keys i - window + 1 .. i,
    as Mistral's and Gemma's local layers do). None when every key is seen. out: a bool
    buffer of r*S to write into (a long input's rows are masked a block at a time)."""
    if not causal and not window:
        return None
    keys = torch.arange(n_keys, device=rows.device)[None, :]
    queries = rows[:, None]
    shape = (len(rows), n_keys)
    out = torch.empty(shape, dtype=torch.bool, device=rows.device) if out is None \
        else out[:len(rows) * n_keys].view(shape)
    if causal:
        torch.gt(keys, queries, out=out)
    else:
        out.fill_(False)
    if window:
        out |= keys <= queries - window
    return out


def attention_scores(q: torch.Tensor, k: torch.Tensor, scale: float, *, bias=None,
                     rows: torch.Tensor | None = None, causal: bool = False, window: int = 0,
                     softcap: float = 0.0, out: torch.Tensor | None = None,
                     mask_out: torch.Tensor | None = None, head_window=None) -> torch.Tensor:
    """The scores the softmax reads, [B, H, r, S]: raw_scores, plus an additive bias
    (padding, T5's relative positions, or a causal mask the caller built), with -inf where
    hidden_keys hides a key from the query rows `rows` (absolute positions of q's rows;
    default 0..r-1). Every path that computes attention calls this: the forward (whole or a
    block of rows at a time), the maps rebuilt on demand, and Inside one head. out, mask_out:
    buffers for the scores and the hidden keys (raw_scores, hidden_keys). head_window: a
    windows.HeadWindow hiding the keys past a sink and a window from the heads it restricts.

    The scores are computed in the weights' dtype, as transformers computes them, and
    returned in float32 when that is bfloat16 or float16: the mask and the softmax run in
    float32 at least (placement.py says why)."""
    scores = raw_scores(q, k, scale, softcap, out)
    if scores.dtype in (torch.bfloat16, torch.float16):
        scores = scores.float()
    if bias is not None:
        scores.add_(bias)
    if rows is None and (causal or window or head_window is not None):
        rows = torch.arange(q.shape[2], device=q.device)
    if causal or window:
        hidden = hidden_keys(rows, k.shape[2], causal, window, mask_out)
        scores.masked_fill_(hidden, float("-inf"))
    if head_window is not None:
        head_window.hide(scores, rows)
    return scores


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None = None,
    scale: float | None = None,
    weights_out: torch.Tensor | None = None,
    on_weights=None,
    rows: torch.Tensor | None = None,
    window: int = 0,
    softcap: float = 0.0,
    *,
    head_window=None,
    on_scores=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(attention_scores) V with the softmax written out and its weights returned.

    q [B, H, T, d_k]; k, v [B, H_kv, S, d_k] with H a multiple of H_kv (grouped-query: each
    group of H / H_kv consecutive query heads shares one key/value head; every query head
    still gets its own map). bias broadcastable to [B, H, T, S] (additive: 0 or -inf/min).
    weights_out, when given, is a [B, H, T, S] tensor the weights are written into, so a
    caller collecting every layer's maps (a trace) needs no copy afterwards. on_scores and
    on_weights, when given, map the scores to the ones the softmax reads and the weights to
    the ones multiplied with V (an intervention on the scores or the pattern).
    rows, window, softcap, head_window: see attention_scores (the causal mask, if any, is in
    bias).
    Returns (context [B, H, T, d_k], weights [B, H, T, S]).
    """
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    batch, n_head, length, d_k = q.shape
    n_kv_head, keys = k.shape[1], k.shape[2]
    group = n_head // n_kv_head
    scores = attention_scores(q, k, scale, bias=bias, rows=rows, window=window,
                              softcap=softcap, head_window=head_window)
    if on_scores is not None:
        scores = on_scores(scores)
    if weights_out is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        weights = torch.softmax(scores, dim=-1, out=weights_out)
    if on_weights is not None:  # an intervention reads or replaces the pattern
        weights = on_weights(weights)
    # the float32 weights rounded to the values' dtype for the product, as transformers does
    context = torch.matmul(weights.to(v.dtype).reshape(batch, n_kv_head, group * length, keys),
                           v)
    return context.view(batch, n_head, length, d_k), weights


def chunked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    causal: bool,
    key_bias: torch.Tensor | None = None,
    query_chunk: int = 256,
    weights_out: torch.Tensor | None = None,
    window: int = 0,
    softcap: float = 0.0,
    *,
    head_window=None,
) -> torch.Tensor:
    """softmax(Q K^T * scale + mask) V, a block of query rows at a time: the weights of only
    query_chunk rows ([B, H, chunk, S]) exist at once, never [B, H, T, T].

    Exactly the arithmetic of scaled_dot_product_attention on each block of rows. causal:
    row i sees keys 0..i (the mask is built per block, and the keys after a block's last
    row, which it cannot see, are not multiplied at all); with more keys than rows, the
    first keys are a past that the rows follow (causal row i is position S - T + i).
    key_bias: additive [B, 1, 1, S] (padding) shared by every row. weights_out, when given,
    is a [B, H, T, S] tensor each block's weights are written into (a trace's maps): the
    maps of a full trace and of an on-demand one come from the same arithmetic. -> context
    [B, H, T, d_k].
    """
    batch, n_head, length, d_k = q.shape
    n_kv_head = k.shape[1]
    group = n_head // n_kv_head
    first = k.shape[2] - length if causal else 0  # the past's keys, before the rows'
    context = q.new_empty(batch, n_head, length, v.shape[-1])
    for start in range(0, length, query_chunk):
        stop = min(start + query_chunk, length)
        rows = stop - start
        keys = first + stop if causal else k.shape[2]
        scores = attention_scores(
            q[:, :, start:stop], k[:, :, :keys], scale,
            bias=None if key_bias is None else key_bias[..., :keys],
            rows=torch.arange(first + start, first + stop, device=q.device), causal=causal,
            window=window, softcap=softcap, head_window=head_window)
        weights = torch.softmax(scores, dim=-1)
        if weights_out is not None:
            weights_out[:, :, start:stop, :keys] = weights
            weights_out[:, :, start:stop, keys:] = 0.0
        out = torch.matmul(weights.to(v.dtype).view(batch, n_kv_head, group * rows, keys),
                           v[:, :, :keys])
        context[:, :, start:stop] = out.view(batch, n_head, rows, -1)
    return context


def causal_rows_bias(start: int, stop: int, dtype=torch.float32, device=None) -> torch.Tensor:
    """Rows start..stop-1 of the causal mask, over keys 0..stop-1: [stop - start, stop]."""
    bias = torch.zeros(stop - start, stop, dtype=dtype, device=device)
    hidden = hidden_keys(torch.arange(start, stop, device=device), stop, causal=True)
    return bias.masked_fill_(hidden, float("-inf"))


def gate_heads(context: torch.Tensor, head_mask: torch.Tensor, mode: str = "zero",
               attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Apply a per-head gate to the heads' outputs (before the output projection).

    context [B, H, T, d_k]; head_mask [H] or [B, H] of floats in [0, 1] (1 keeps the head).
    mode="zero": out_h = g_h * context_h, so g = 0 removes the head (Michel et al. 2019).
    mode="mean": out_h = g_h * context_h + (1 - g_h) * mean over positions of context_h, so
    g = 0 replaces the head's output by its mean (mean ablation).
    """
    gate = head_mask.to(context.dtype)
    if gate.dim() == 1:
        gate = gate[None, :]
    gate = gate[:, :, None, None]
    if mode == "zero":
        return context * gate
    if mode == "mean":
        if attention_mask is None:
            mean = context.mean(dim=2, keepdim=True)
        else:
            weights = attention_mask.to(context.dtype)[:, None, :, None]
            mean = (context * weights).sum(2, keepdim=True) / weights.sum(2, keepdim=True)
        return gate * context + (1 - gate) * mean
    raise ValueError(f"unknown ablation mode {mode!r}; use 'zero' or 'mean'")


class MultiHeadAttention(nn.Module):
    """Self-attention with one fused QKV projection (GPT-2's c_attn; BERT's and Llama's three
    projections are concatenated at load) or three separate ones, key/value heads shared by
    groups of query heads, optional rotary positions, masks and a per-head gate."""

    def __init__(self, d_model: int, n_head: int, fused_qkv: bool = True, bias: bool = True,
                 scale: float | None = None, n_kv_head: int | None = None,
                 d_head: int | None = None, out_bias: bool | None = None, window: int = 0,
                 softcap: float = 0.0, qk_norm: str = "", norm_eps: float = 1e-6,
                 clip: float = 0.0, rms_scale_in_float32: bool = False):
        super().__init__()
        self.window, self.softcap = int(window), float(softcap)  # see attention_scores
        self.clip = float(clip)  # OLMo's clip_qkv: Q, K, V clamped to [-clip, clip]
        n_kv_head = n_head if n_kv_head is None else n_kv_head
        if d_head is None:
            if d_model % n_head:
                raise ValueError(f"d_model {d_model} is not divisible by {n_head} heads")
            d_head = d_model // n_head
        if n_head % n_kv_head:
            raise ValueError(f"{n_head} query heads cannot share {n_kv_head} key/value heads")
        self.d_model, self.n_head, self.n_kv_head, self.d_head = d_model, n_head, n_kv_head, d_head
        self.fused_qkv = fused_qkv
        self.scale = scale if scale is not None else 1.0 / math.sqrt(self.d_head)
        q_width, kv_width = n_head * d_head, n_kv_head * d_head
        if fused_qkv:
            self.qkv = nn.Linear(d_model, q_width + 2 * kv_width, bias=bias)
        else:
            self.query = nn.Linear(d_model, q_width, bias=bias)
            self.key = nn.Linear(d_model, kv_width, bias=bias)
            self.value = nn.Linear(d_model, kv_width, bias=bias)
        self.out = nn.Linear(q_width, d_model, bias=bias if out_bias is None else out_bias)
        # QK-norm: an RMSNorm of each head's query and key (Qwen3, Gemma 3: "head", one
        # weight of width d_k shared by the heads) or of all heads' at once (OLMo 2: "full"),
        # after the projection and before the rotation
        self.qk_norm = qk_norm
        if qk_norm:
            self.q_norm = RMSNorm(d_head if qk_norm == "head" else q_width, norm_eps,
                                  rms_scale_in_float32)
            self.k_norm = RMSNorm(d_head if qk_norm == "head" else kv_width, norm_eps,
                                  rms_scale_in_float32)

    @property
    def kv_heads(self) -> list[int]:
        return kv_head_of(self.n_head, self.n_kv_head)

    @property
    def kv_index(self) -> torch.Tensor:
        """kv_heads as an index: keys or values [B, H_kv, ...] -> one per query head."""
        return torch.tensor(self.kv_heads, device=self.out.weight.device)

    def project_qkv(self, x: torch.Tensor, memory: torch.Tensor | None = None,
                    normed: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """X [B, T, d] -> Q [B, H, T, d_k], K and V [B, H_kv, T, d_k] (before rotation; after
        the QK-norm unless normed is False; clamped first when the layer clips, as OLMo). memory [B, S, d]: cross-attention, keys and
        values from it ([B, H_kv, S, d_k])."""
        if memory is not None:
            q, k, v = self.query(x), self.key(memory), self.value(memory)
        elif self.fused_qkv:
            kv_width = self.n_kv_head * self.d_head
            q, k, v = self.qkv(x).split([self.n_head * self.d_head, kv_width, kv_width], dim=-1)
        else:
            q, k, v = self.query(x), self.key(x), self.value(x)
        if self.clip:
            q, k, v = (t.clamp(-self.clip, self.clip) for t in (q, k, v))
        q, k, v = (split_heads(q, self.n_head), split_heads(k, self.n_kv_head),
                   split_heads(v, self.n_kv_head))
        if normed:
            q, k = self.normalize_qk(q, k)
        return q, k, v

    def normalize_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The QK-norm of split queries and keys [B, H or H_kv, T, d_k] (as they are without
        one); what project_qkv applies (Inside one head shows Q before and after)."""
        if self.qk_norm == "head":
            return self.q_norm(q), self.k_norm(k)
        if self.qk_norm == "full":
            return (split_heads(self.q_norm(combine_heads(q)), self.n_head),
                    split_heads(self.k_norm(combine_heads(k)), k.shape[1]))
        return q, k

    def qkv_weights(self) -> tuple[torch.Tensor, ...]:
        """W_Q [H, d_k, d], W_K and W_V [H_kv, d_k, d] and their biases [H, d_k] / [H_kv, d_k]
        (None without biases): views of the projection, per head."""
        q_width, kv_width = self.n_head * self.d_head, self.n_kv_head * self.d_head
        if self.fused_qkv:
            weight, bias = self.qkv.weight, self.qkv.bias
            weights = weight.split([q_width, kv_width, kv_width])
            biases = (None,) * 3 if bias is None else bias.split([q_width, kv_width, kv_width])
        else:
            weights = (self.query.weight, self.key.weight, self.value.weight)
            biases = (self.query.bias, self.key.bias, self.value.bias)
        counts = (self.n_head, self.n_kv_head, self.n_kv_head)
        shaped = [w.view(n, self.d_head, self.d_model) for w, n in zip(weights, counts)]
        shaped_bias = [None if b is None else b.view(n, self.d_head)
                       for b, n in zip(biases, counts)]
        return (*shaped, *shaped_bias)

    def project_qkv_per_head(self, x: torch.Tensor):
        """Per-head input streams X [B, 3, H, T, d] (one for each query head's query, key and
        value: edge-level interventions give each head its own input) -> Q, K, V
        [B, H, T, d_k], keys and values computed for each query head with the weights of the
        key/value head it reads."""
        w_q, w_k, w_v, b_q, b_k, b_v = self.qkv_weights()
        index = self.kv_index
        out = []
        for part, weight, bias, per_query in ((0, w_q, b_q, False), (1, w_k, b_k, True),
                                              (2, w_v, b_v, True)):
            if per_query:
                weight = weight[index]
                bias = None if bias is None else bias[index]
            projected = torch.einsum("bhtd,hkd->bhtk", x[:, part], weight)
            if bias is not None:
                projected = projected + bias[None, :, None, :]
            out.append(projected.clamp(-self.clip, self.clip) if self.clip else projected)
        if self.qk_norm == "full":  # it mixes the heads, which each read their own stream here
            raise ValueError("a full-width QK-norm mixes every head's query, so the heads "
                             "cannot each read a stream of their own")
        out[0], out[1] = self.normalize_qk(out[0], out[1])
        return tuple(out)

    def with_past(self, k: torch.Tensor, v: torch.Tensor, past) -> tuple[torch.Tensor, ...]:
        """Keys and values of the earlier positions, then these: one key/value per query head
        on both sides when either side has them so. past: a (keys, values) pair, or a
        kv_cache.LayerCache, which keeps these too (writing text a token at a time)."""
        if hasattr(past, "extend"):
            return past.extend(k, v)
        past_k, past_v = past
        if past_k.shape[1] != k.shape[1]:
            if past_k.shape[1] < k.shape[1]:
                past_k, past_v = past_k[:, self.kv_index], past_v[:, self.kv_index]
            else:
                k, v = k[:, self.kv_index], v[:, self.kv_index]
        return torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)

    def forward(
        self,
        x: torch.Tensor,
        bias: torch.Tensor | None = None,
        head_mask: torch.Tensor | None = None,
        ablation: str = "zero",
        attention_mask: torch.Tensor | None = None,
        weights_out: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        query_chunk: int | None = None,
        causal: bool = False,
        hooks=None,
        layer: int = 0,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
        memory: torch.Tensor | None = None,
        *,
        head_window=None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [B, T, d] -> (output [B, T, d], weights [B, H, T, T]).

        bias: additive attention mask (causal and/or padding). rotary: (cos, sin) tables of
        rotary_tables, applied to Q and K after the heads are split. head_mask: see
        gate_heads; the returned weights are the softmax's, untouched by the gate.
        query_chunk: compute attention query_chunk rows at a time (chunked_attention): the
        weights are kept only in weights_out (else returned as None), so memory grows with
        T, not T squared. bias is then only the padding bias [B, 1, 1, T] (or None), and
        causal says whether to mask future keys.
        hooks: an interventions.Hooks that reads or replaces this layer's named activations
        (q, k, v before rotation; scores; pattern; z, each head's output before W_O, after
        the head gate; result, each head's output through its slice of W_O, [B, T, H, d],
        computed only when asked).
        x may then be per-head input streams [B, 3, H, T, d] (see project_qkv_per_head).
        past: the keys (rotated) and values of the positions before x's, [B, H_kv or H, S,
        d_k], or a kv_cache.LayerCache holding them: x is then positions S.. of the text,
        which read those keys as well as their own (a causal run reusing an unchanged
        prefix; rotary tables and bias are the caller's, for these rows).
        memory [B, S, d]: cross-attention (queries from x, keys and values from memory, an
        encoder's output; separate projections); the weights are then [B, H, T, S].
        head_window: a windows.HeadWindow restricting some heads to a sink and a window.
        """
        if x.dim() == 5:
            q, k, v = self.project_qkv_per_head(x)
        else:
            q, k, v = self.project_qkv(x, memory)
        if hooks is not None:
            if hooks.ungroup_kv and k.shape[1] != self.n_head:  # a key/value per query head
                k, v = k[:, self.kv_index], v[:, self.kv_index]
            q, k, v = hooks("q", layer, q), hooks("k", layer, k), hooks("v", layer, v)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        if hooks is not None:
            q, k = hooks("rot_q", layer, q), hooks("rot_k", layer, k)
        if past is not None:
            k, v = self.with_past(k, v, past)
        if query_chunk is not None:
            context = chunked_attention(q, k, v, self.scale, causal, bias, query_chunk,
                                        weights_out, self.window, self.softcap,
                                        head_window=head_window)
            weights = weights_out
        else:
            on_scores = None if hooks is None else (
                lambda scores: hooks("scores", layer, scores))
            on_weights = None if hooks is None else (
                lambda pattern: hooks("pattern", layer, pattern))
            rows = None
            if (self.window or head_window is not None) and memory is None:
                first = k.shape[2] - q.shape[2]  # the query rows' positions in the text
                rows = torch.arange(first, k.shape[2], device=q.device)
            context, weights = scaled_dot_product_attention(
                q, k, v, bias, self.scale, weights_out, on_weights, rows,
                0 if memory is not None else self.window, self.softcap,
                head_window=head_window, on_scores=on_scores)
        if head_mask is not None:
            context = gate_heads(context, head_mask, ablation, attention_mask)
        if hooks is not None:
            context = hooks("z", layer, context)
        if hooks is not None and hooks.wants("result", layer):
            w_out = self.out.weight.view(self.d_model, self.n_head, self.d_head)
            result = hooks("result", layer, torch.einsum("bhtk,dhk->bthd", context, w_out))
            output = result.sum(2)
            if self.out.bias is not None:
                output = output + self.out.bias
        else:
            output = self.out(combine_heads(context))
        return output, weights
