"""Inside one head: every intermediate tensor of one attention head, step by step.

For a layer l, a head h and a text, ``inside_one_head`` runs the model up to layer l with the
engine's own modules and then walks through that head's computation, keeping each step
(notation as in attention.py and on the "Inside one head" page; T tokens, d = d_model,
d_k = d_model / heads):

    X                  [T, d]    the attention input of layer l (pre-norm: norm(h); post-norm: h)
    Q = X W_Q^h + b_Q^h [T, d_k]  this head's slice of the query projection (same for K, V;
                                  under grouped-query attention K and V are those of the
                                  key/value head this query head shares)
    Q_rot, K_rot       [T, d_k]  rotary models: Q and K rotated by each token's position (RoPE)
    Q_normed, K_normed [T, d_k]  QK-norm models: Q and K after their RMSNorm (per head, or
                                  this head's slice of the full-width norm), before RoPE
    scores = Q K^T * scale       [T, T]   scale = 1 / sqrt(d_k) (rotated Q and K under RoPE);
                                          soft-capped models: c tanh(S / c), and
                                          scores_before_cap keeps S
    masked = scores + mask       [T, T]   GPT-2: -inf above the diagonal (key j > query i);
                                          a local layer also hides keys j <= i - window
    weights = softmax(masked)    [T, T]   rows sum to 1: the head's attention map
    context = weights V          [T, d_k]
    W_O^h                        [d_k, d] the rows of W_O^T this head feeds
    contribution = context W_O^h [T, d]   what this head adds to the layer's output

The layer's output is the sum of every head's contribution plus the output bias b_O.
Pure library code (torch + numpy, no Streamlit); nothing here re-derives the maths the
engine does: projections, masks and softmax are the engine's own functions.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
import torch

from ...core.errors import InputError
from ...engine.attention import hidden_keys, raw_scores, scaled_dot_product_attention
from ...engine.positions import apply_rotary
from ...engine.transformer import CrossInput
from ...maps.sets import MapSet, map_set
from .weights import head_weight_slices

__all__ = ["FollowedQuery", "HeadInternals", "inside_one_head", "head_internals",
           "head_weight_slices", "inside_bytes_per_squared_token",
           "summarise"]


@dataclass(frozen=True)
class FollowedQuery:
    table: dict  # column -> one value per key, for a table on screen
    strongest: list[tuple[int, float]]  # (key, weight), the largest weights first

    def by_weight(self, key_labels) -> dict:
        """The table with a "key" column of key_labels first, its rows ordered by weight,
        the largest first (a screen that cannot show every key shows those that matter)."""
        order = np.argsort(-np.asarray(self.table["weight"]), kind="stable")
        columns = {"key": list(key_labels), **self.table}
        return {name: [list(values)[i] for i in order] for name, values in columns.items()}


@dataclass
class HeadInternals:
    """Every intermediate array of one head on one input (numpy float32, batch removed)."""

    layer: int
    head: int
    tokens: list[str]  # display labels, length T
    causal: bool
    pre_ln: bool  # pre-norm (GPT-2, Llama): X = norm(h); post-norm (BERT): X = h
    scale: float  # the factor applied to Q K^T (1 / sqrt(d_k) unless the checkpoint says else)
    d_model: int
    d_k: int
    n_head: int
    hidden: np.ndarray  # [T, d]   the residual stream entering the layer (h)
    X: np.ndarray  # [T, d]        the attention input (after ln_1 for GPT-2)
    W_Q: np.ndarray  # [d, d_k]    this head's columns of the query projection (x @ W_Q)
    W_K: np.ndarray  # [d, d_k]
    W_V: np.ndarray  # [d, d_k]
    b_Q: np.ndarray | None  # [d_k]
    b_K: np.ndarray | None
    b_V: np.ndarray | None
    Q: np.ndarray  # [T, d_k]
    K: np.ndarray  # [T, d_k]
    V: np.ndarray  # [T, d_k]
    scores: np.ndarray  # [T, T]   Q K^T * scale
    mask: np.ndarray  # [T, T]     the additive mask: 0 or -inf
    masked_scores: np.ndarray  # [T, T]   scores + mask
    weights: np.ndarray  # [T, T]   softmax(masked_scores): trace.attentions[layer, head]
    context: np.ndarray  # [T, d_k]  weights @ V
    W_O: np.ndarray  # [d_k, d]   out.weight[:, h*d_k:(h+1)*d_k].T
    contribution: np.ndarray  # [T, d]  context @ W_O
    output_bias: np.ndarray | None  # [d]  b_O, added once for all heads
    layer_output: np.ndarray  # [T, d]   the attention layer's output (all heads + b_O)
    text: str = ""
    text_pair: str | None = None
    extra: dict = field(default_factory=dict)
    norm_name: str = "LayerNorm"  # the norm that makes X (pre-norm models)
    n_kv_head: int = 0  # key/value heads of the layer (0: one per query head)
    kv_head: int = 0  # the key/value head this query head reads
    sharing: list[int] = field(default_factory=list)  # query heads reading the same K and V
    Q_normed: np.ndarray | None = None  # [T, d_k] Q after the QK-norm (Qwen3, Gemma 3)
    clip_qkv: float = 0.0  # Q, K, V clamped to [-c, c] after the projection (OLMo)
    K_normed: np.ndarray | None = None
    window: int = 0  # the layer's sliding window (0: none)
    softcap: float = 0.0  # the scores' soft-cap (0: none)
    scores_before_cap: np.ndarray | None = None  # [T, T] Q K^T * scale, before the soft-cap
    qk_norm: str = ""  # "head": each head's Q and K normalized; "full": all heads' at once
    # the model's layers with a sliding window and its size (empty: no layer has one), so a
    # layer without one can say it is global
    local_layers: tuple = ()
    local_window: int = 0
    Q_rot: np.ndarray | None = None  # [T, d_k] Q after the rotary step (RoPE models)
    K_rot: np.ndarray | None = None
    rope_theta: float = 0.0
    rope_scaling: object = None  # the layer's engine.positions.RopeScaling (None: none)
    layer_rope_thetas: tuple = ()  # every layer's RoPE base, for a model whose layers differ
    rotary_dim: int = 0
    # an encoder-decoder's head (inside_seq2seq.py): "encoder", "decoder" or "cross"; the
    # keys' tokens (cross-attention: the source); M, the encoder's output K and V come from
    kind: str = ""
    key_tokens: list[str] = field(default_factory=list)
    memory: np.ndarray | None = None  # [S, d]
    # T5's relative position bias: each (query, key) pair's bucket [T, T], this head's
    # learned bias per bucket [B], the bias it adds [T, T], and the map without it
    position_bias: np.ndarray | None = None
    buckets: np.ndarray | None = None
    bias_table: np.ndarray | None = None
    weights_without_bias: np.ndarray | None = None
    relative_buckets: int = 0
    relative_max_distance: int = 0
    qkv_names: tuple = ()  # the checkpoint's names for W_Q, W_K, W_V (one name: fused)
    n_kv_width: int = 0  # H_kv x d_k: the width of K and of V for every head together
    qkv_per_head: bool = False  # the fused matrix holds q, k, v head by head (GPT-NeoX)
    rotary_interleaved: bool = False  # the checkpoint rotates adjacent pairs (GPT-J)

    @property
    def rotary(self) -> bool:
        return self.Q_rot is not None

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def columns(self) -> list[str]:
        """The keys' tokens: the columns of the scores and weights, the rows of K and V."""
        return self.key_tokens or self.tokens

    @property
    def cross(self) -> bool:
        return self.kind == "cross"

    @property
    def einsum_difference(self) -> float:
        """Largest |einsum('ib,ba->ia', X, W_Q) + b_Q - Q|: the index notation, run."""
        q = np.einsum("ib,ba->ia", self.X.astype(np.float64), self.W_Q.astype(np.float64))
        if self.b_Q is not None:
            q = q + self.b_Q
        if self.clip_qkv:
            q = np.clip(q, -self.clip_qkv, self.clip_qkv)
        return float(np.abs(q - self.Q).max())

    @property
    def share_of_output(self) -> float:
        """||contribution|| / ||sum of every head's contribution|| (Frobenius norms): how large
        this head's part of the layer output is, next to all heads together (bias excluded)."""
        total = self.layer_output
        if self.output_bias is not None:
            total = total - self.output_bias
        norm = float(np.linalg.norm(total))
        return float(np.linalg.norm(self.contribution)) / norm if norm > 0 else float("nan")

    @property
    def scaled_by_sqrt_d_k(self) -> bool:
        """The scores are divided by sqrt(d_k) (T5 folds it into W_Q; GPT-2 variants may
        carry their own scale)."""
        return abs(self.scale - self.d_k ** -0.5) < 1e-9

    def followed_query(self, query: int, strongest: int = 3) -> "FollowedQuery":
        """One query's row through steps 5-7: its scores (soft-capped models: before and
        after the cap), its scores after the mask (as text: -inf is written), its weights, and
        the keys it weighs most."""
        if not 0 <= int(query) < self.n_tokens:
            raise InputError(f"query {query} is outside the {self.n_tokens} tokens")
        row = self.weights[int(query)]
        top = np.argsort(-row, kind="stable")[:strongest]
        before_cap = {} if self.scores_before_cap is None else {
            "score q·k × scale": np.round(self.scores_before_cap[query], 4)}
        return FollowedQuery(
            table={**before_cap,
                   "after the cap" if before_cap else "score q·k × scale":
                       np.round(self.scores[query], 4),
                   "after the mask": ["−∞" if np.isneginf(v) else f"{v:.4f}"
                                      for v in self.masked_scores[query]],
                   "weight": np.round(row, 4)},
            strongest=[(int(j), float(row[j])) for j in top])

    def softcap_effect(self, tolerance: float = 0.01) -> dict[str, float]:
        """What the soft-cap did to the scores the mask keeps: how many there are ("seen"),
        how many it moved by more than tolerance of their size ("changed"), the largest raw
        score and what the cap made of it. Empty when the layer has no cap."""
        if self.scores_before_cap is None:
            return {}
        seen = np.isfinite(self.mask)
        raw, capped = self.scores_before_cap[seen], self.scores[seen]
        changed = np.abs(capped - raw) > tolerance * np.abs(raw)
        top = int(np.argmax(raw))
        return {"seen": int(seen.sum()), "changed": int(changed.sum()),
                "largest_raw": float(raw[top]), "largest_capped": float(capped[top])}

    def largest_difference(self, attention_map: np.ndarray) -> float:
        """max |weights - attention_map|: how far this walk-through is from the trace's map."""
        return float(np.abs(self.weights - np.asarray(attention_map)).max())

    def npz_bytes(self, tokens: list[str]) -> bytes:
        """Every array of arrays() and the tokens, as a compressed .npz file's bytes."""
        buffer = io.BytesIO()
        np.savez_compressed(buffer, tokens=np.array(tokens), **self.arrays())
        return buffer.getvalue()

    def arrays(self) -> dict[str, np.ndarray]:
        """The named arrays (for downloads): X, W_Q, ..., contribution."""
        names = ["X", "W_Q", "W_K", "W_V", "Q", "K", "V", "scores", "mask", "masked_scores",
                 "weights", "context", "W_O", "contribution", "layer_output"]
        out = {name: getattr(self, name) for name in names}
        for name in ("b_Q", "b_K", "b_V", "output_bias", "Q_normed", "K_normed", "Q_rot",
                     "K_rot", "memory", "scores_before_cap",
                     "position_bias", "buckets", "bias_table", "weights_without_bias"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


def _np(t: torch.Tensor | None) -> np.ndarray | None:
    return None if t is None else t.detach().to("cpu", torch.float32).numpy().copy()


def inside_bytes_per_squared_token(n_head: int) -> int:
    """What inside_one_head holds per squared token: the engine's own attention of its layer
    (scores and weights for every head, [H, T, T] float32 each, as the layers below hold
    while they run) and the head's scores, mask, masked scores and weights ([T, T] each),
    with a head's worth of slack, which also holds a soft-capped layer's scores before the
    cap (one more [T, T]). benchmarks/held_memory.py measured SmolLM2 (9 heads): 0.93 of this
    at 8,000 tokens, 0.95 at 4,096, 1.0 at 2,048."""
    return 4 * (3 * int(n_head) + 4)


def inside_one_head(model, text: str, layer: int, head: int, text_pair: str | None = None,
                    max_tokens: int | None = None, *, target: str | None = None,
                    maps: str | None = None) -> HeadInternals:
    """Run ``text`` up to layer ``layer`` and return every intermediate array of ``head``.

    The weights equal ``model.trace(text, text_pair).attentions[layer, head]`` and the sum of
    every head's contribution plus the output bias equals the attention layer's output.
    maps: the set of the model's maps the head belongs to (maps.sets; None: the model's first,
    its self-attention); for an encoder-decoder's "encoder", "decoder" or "cross", ``text`` is
    the source and ``target`` what the decoder is forced on (None: its own greedy output),
    and the weights equal ``model.trace(text, target).attentions(maps)[layer, head]``.
    """
    chosen = map_set(maps if maps is not None else model.map_sets[0].name)
    if chosen not in model.map_sets:
        raise InputError(f"{model.info.name} has no {chosen.label}: its maps are "
                         f"{', '.join(s.name for s in model.map_sets)}")
    if chosen.stack:  # one stack of an encoder-decoder
        return _inside_stack_head(model, text, target, chosen, layer, head)
    info = model.info
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) \
            or not 0 <= layer < info.n_layer:
        raise InputError(f"layer must be 0..{info.n_layer - 1} (counted from 0), got {layer!r}")
    if isinstance(head, bool) or not isinstance(head, (int, np.integer)) \
            or not 0 <= head < info.n_head:
        raise InputError(f"head must be 0..{info.n_head - 1} (counted from 0), got {head!r}")
    layer, head = int(layer), int(head)
    enc = model.encode(text, text_pair, max_tokens)
    net = model.network
    block = net.blocks[layer]
    attn = block.attn
    with torch.no_grad():
        ids, types = model.network_inputs(enc)
        n = ids.shape[1]
        bias = net.attention_bias(n)
        rotary = net.rotary(n, layer)
        hidden, _ = net.run_layers(net.embed(ids, types), 0, layer, bias)
        x = block.attention_input(hidden)
        # Q [1, H, T, d_k]; K, V [1, H_kv, T, d_k]: X W as the page shows it, then QK-norm
        q, k, v = attn.project_qkv(x, normed=False)
        q_normed, k_normed = attn.normalize_qk(q, k)
        q_rot = k_rot = None
        if rotary is not None:
            q_rot, k_rot = apply_rotary(q_normed, *rotary), apply_rotary(k_normed, *rotary)
        q_used, k_used = (q_normed, k_normed) if rotary is None else (q_rot, k_rot)
        # The engine's own attention, for every head at once: its weights are the trace's.
        context, weights = scaled_dot_product_attention(
            q_used, k_used, v, bias=bias, scale=attn.scale, window=attn.window,
            softcap=attn.softcap)
        output, _ = attn(x, bias=bias, rotary=rotary)
        kv = attn.kv_heads[head]
        # The steps before the softmax, kept for display: the engine's own raw_scores and
        # hidden_keys, the pieces of attention_scores
        q_head, k_head = q_used[:, head:head + 1], k_used[:, kv:kv + 1]
        scores = raw_scores(q_head, k_head, attn.scale, attn.softcap)[0, 0]
        before_cap = raw_scores(q_head, k_head, attn.scale)[0, 0] if attn.softcap else None
        mask = torch.zeros(n, n, device=ids.device) if bias is None \
            else bias.expand(n, n).clone()
        window_mask = hidden_keys(torch.arange(n, device=ids.device), n, False, attn.window)
        if window_mask is not None:
            mask.masked_fill_(window_mask, float("-inf"))
        masked = scores + mask
    return head_internals(
        attn, layer, head, hidden, x, q, k, v, scores, mask, masked, weights, context, output,
        tokens=model.display_tokens(enc.input_ids), causal=info.causal,
        pre_ln=bool(block.pre_ln), text=text, text_pair=text_pair,
        extra={"truncated": enc.truncated,
               "n_tokens_before_truncation": enc.n_tokens_before_truncation},
        norm_name="RMSNorm" if net.config.norm == "rmsnorm" else "LayerNorm",
        Q_normed=_np(q_normed[0, head]) if attn.qk_norm else None,
        K_normed=_np(k_normed[0, kv]) if attn.qk_norm else None,
        window=attn.window, softcap=attn.softcap, clip_qkv=attn.clip,
        scores_before_cap=_np(before_cap), qk_norm=attn.qk_norm,
        local_layers=tuple(i for i in range(info.n_layer) if net.config.window(i)),
        local_window=net.config.sliding_window,
        Q_rot=None if q_rot is None else _np(q_rot[0, head]),
        K_rot=None if k_rot is None else _np(k_rot[0, kv]),
        rope_theta=net.config.rope_of(layer)[0] if rotary is not None else 0.0,
        rope_scaling=net.config.rope_of(layer)[1] if rotary is not None else None,
        layer_rope_thetas=tuple(net.config.rope_of(i)[0] for i in range(info.n_layer))
        if rotary is not None else (),
        rotary_dim=net.config.rotary_dim if rotary is not None else 0,
        qkv_names=tuple(net.config.qkv_names), qkv_per_head=net.config.qkv_per_head,
        rotary_interleaved=net.config.rotary_interleaved,
        n_kv_width=net.config.n_kv_head * net.config.d_head)


def _checked(value, name: str, n: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < n:
        raise InputError(f"{name} must be 0..{n - 1} (counted from 0), got {value!r}")
    return int(value)


def _inside_stack_head(model, source: str, target: str | None, maps: MapSet, layer: int,
                       head: int) -> HeadInternals:
    """One head of one set of an encoder-decoder's maps (seq2seq_steps tells the steps):
    its queries are its stack's tokens (the source's for the encoder, the decoder's input
    for the decoder); its keys those tokens (self-attention) or the encoder's output
    (cross-attention); T5's relative position bias a step of its own in self-attention."""
    net = model.network
    stack = getattr(net, maps.stack)
    layer = _checked(layer, "layer", stack.config.n_layer)
    head = _checked(head, "head", stack.config.n_head)
    forced = model.teacher_forcing(source, target)
    block = stack.blocks[layer]
    reads_source = maps.queries == "source"  # the encoder's own self-attention
    with torch.no_grad():
        source_ids = torch.tensor([forced.source_ids], device=net.device)
        source_tokens = model.source_tokens(forced.source_ids, source)
        states = None
        if reads_source:
            ids, rows, keys = source_ids, source_tokens, source_tokens
        else:
            states, _ = net.encode(source_ids)
            ids = torch.tensor([forced.decoder_ids], device=net.device)
            rows = model.display_tokens(forced.decoder_ids)
            keys = rows if maps.square else source_tokens
        n = ids.shape[1]
        bias = stack.attention_bias(n)  # causal mask and the relative position bias
        memory = None if states is None else CrossInput(states)
        start = stack.embed(net.source_vectors(ids) if reads_source else ids)
        hidden, _ = stack.run_layers(start, 0, layer, bias, memory=memory)
        if not maps.square:  # cross-attention: queries from the decoder, keys from M
            hidden = block.after_self_attention(hidden, bias)
            attn, x, attn_bias = block.cross, block.cross_input(hidden), None
            q, k, v = attn.project_qkv(x, states)
            output, _ = attn(x, memory=states)
        else:
            attn, x, attn_bias = block.attn, block.attention_input(hidden), bias
            q, k, v = attn.project_qkv(x)
            output, _ = attn(x, bias=bias)
        context, weights = scaled_dot_product_attention(q, k, v, bias=attn_bias,
                                                        scale=attn.scale)
        kv = attn.kv_heads[head]
        # The steps before the softmax, kept for display: the engine's own raw_scores and
        # hidden_keys, the pieces of attention_scores (as inside_one_head keeps them)
        scores = raw_scores(q[:, head:head + 1], k[:, kv:kv + 1], attn.scale)[0, 0]
        causal = maps.square and stack.config.causal  # the decoder's self-attention
        mask = torch.zeros_like(scores)
        unseen = hidden_keys(torch.arange(n, device=scores.device), scores.shape[-1], causal)
        if unseen is not None:
            mask.masked_fill_(unseen, float("-inf"))
        relative = stack.position_bias(n) if maps.square else None
        position = {}
        if relative is not None:
            config = stack.config
            position = dict(
                position_bias=_np(relative[0, head]),
                buckets=stack.position_buckets(n).cpu().numpy(),
                bias_table=_np(stack.rel_bias.weight[:, head]),
                weights_without_bias=_np(torch.softmax(scores + mask, dim=-1)),
                relative_buckets=config.relative_buckets,
                relative_max_distance=config.relative_max_distance)
            masked = scores + relative[0, head] + mask
        else:
            masked = scores + mask
    return head_internals(
        attn, layer, head, hidden, x, q, k, v, scores, mask, masked, weights, context, output,
        tokens=list(rows), causal=causal, pre_ln=bool(block.pre_ln), text=source,
        extra={"source_truncated": forced.source_truncated, "generated": forced.generated},
        norm_name="RMSNorm" if stack.config.norm == "rmsnorm" else "LayerNorm",
        kind=maps.name, key_tokens=list(keys),
        memory=None if maps.square else _np(states[0]), **position)


def head_internals(attn, layer: int, head: int, hidden, x, q, k, v, scores, mask, masked,
                   weights, context, output, **fields) -> HeadInternals:
    """HeadInternals of one head from the tensors of its layer's attention (batch of 1):
    hidden and x [1, T, d]; q [1, H, T, d_k]; k, v [1, H_kv, S, d_k]; this head's scores,
    mask and masked scores [T, S]; every head's weights [1, H, T, S] and context
    [1, H, T, d_k]; the layer's output [1, T, d]. fields: the rest (tokens, causal, ...)."""
    kv = attn.kv_heads[head]
    slices = head_weight_slices(attn, head)
    return HeadInternals(
        layer=layer, head=head, scale=float(attn.scale), d_model=attn.d_model,
        d_k=attn.d_head, n_head=attn.n_head, hidden=_np(hidden[0]), X=_np(x[0]),
        W_Q=_np(slices["W_Q"]), W_K=_np(slices["W_K"]), W_V=_np(slices["W_V"]),
        b_Q=_np(slices["b_Q"]), b_K=_np(slices["b_K"]), b_V=_np(slices["b_V"]),
        Q=_np(q[0, head]), K=_np(k[0, kv]), V=_np(v[0, kv]),
        scores=_np(scores), mask=_np(mask), masked_scores=_np(masked),
        weights=_np(weights[0, head]), context=_np(context[0, head]),
        W_O=_np(slices["W_O"]), contribution=_np(context[0, head] @ slices["W_O"]),
        output_bias=_np(attn.out.bias), layer_output=_np(output[0]),
        n_kv_head=attn.n_kv_head, kv_head=kv,
        sharing=[h for h, other in enumerate(attn.kv_heads) if other == kv], **fields)


def summarise(array: np.ndarray) -> dict[str, float]:
    """Shape-independent summary of a (large) array: finite min / max / mean / std, the
    mean row norm, and the count of -inf entries (masked scores)."""
    a = np.asarray(array, dtype=np.float64)
    finite = a[np.isfinite(a)]
    out = {
        "min": float(finite.min()) if finite.size else float("nan"),
        "max": float(finite.max()) if finite.size else float("nan"),
        "mean": float(finite.mean()) if finite.size else float("nan"),
        "std": float(finite.std()) if finite.size else float("nan"),
    }
    if a.ndim == 2 and np.isfinite(a).all():
        out["mean row norm"] = float(np.linalg.norm(a, axis=1).mean())
    masked = int(np.isneginf(a).sum())
    if masked:
        out["−∞ entries"] = float(masked)
    return out
