"""StackConfig: an architecture described by what varies between families, never by its
name: normalization (LayerNorm or RMSNorm, before or after each sub-layer), positions
(learned absolute, rotary with theta, fraction and scaling, sinusoidal, relative), the MLP
(plain or gated), key/value heads (= heads: MHA; 1: MQA; in between: GQA), the head width,
which projections carry biases, token-type embeddings, the LM head, causal or bidirectional
attention, and each layer's own attention settings (a sliding window, soft-capped scores).
The family modules in checkpoints/families/ make one; the engine builds from it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from .attention import kv_head_of
from .positions import ROPE_KINDS, RopeScaling


# Activation names as they appear in config.json. "gelu_new", "gelu_fast" and
# "gelu_pytorch_tanh" are all the tanh approximation that GPT-2 was trained with.
def _written_out(formula):
    """transformers' GELU approximations as it writes them (several steps, each rounded in
    bfloat16 or float16), and PyTorch's one fused kernel in float32, where they agree."""
    def activation(x):
        return F.gelu(x, approximate="tanh") if x.dtype == torch.float32 else formula(x)
    return activation


ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_new": _written_out(lambda x: 0.5 * x * (1.0 + torch.tanh(
        math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))),
    "gelu_fast": _written_out(lambda x: 0.5 * x * (1.0 + torch.tanh(
        x * 0.7978845608 * (1.0 + 0.044715 * x * x)))),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
}
NORMS = ("layernorm", "rmsnorm")
# learned: absolute, added to the embeddings (GPT-2, BERT, BART with an offset); rotary: on
# Q and K (Llama); sinusoidal: fixed, added (Marian); relative: a learned bias per head and
# bucket of key - query distance, added to the scores (T5)
POSITIONS = ("learned", "rotary", "sinusoidal", "relative")
LM_HEADS = ("tied", "separate", "mlm", "none")


@dataclass(frozen=True)
class StackConfig:
    model_type: str  # the checkpoint's own name for its architecture (config.json's
    #                  model_type: "gpt2", "llama", "qwen2", "gemma2"), for people to read;
    #                  nothing in the engine branches on it
    n_layer: int
    n_head: int
    d_model: int
    d_ff: int
    vocab_size: int
    max_positions: int
    layer_norm_eps: float
    activation: str
    norm: str = "layernorm"  # "layernorm" | "rmsnorm"
    pre_norm: bool = True  # normalize each sub-layer's input (GPT-2, Llama) or its sum (BERT)
    causal: bool = True
    positions: str = "learned"  # one of POSITIONS (above: learned, rotary, sinusoidal, relative)
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None  # a long-context checkpoint's (positions.py)
    rotary_fraction: float = 1.0  # the share of each head's dimensions that rotates
    gated_mlp: bool = False  # act(x W_gate) * (x W_up), then W_down (SwiGLU for silu)
    n_kv_head: int = 0  # key/value heads; 0 given: as many as query heads
    d_head: int = 0  # each head's width; 0 given: d_model / n_head
    qkv_bias: bool = True
    out_bias: bool = True
    mlp_bias: bool = True
    type_vocab_size: int = 0  # > 0: token-type (segment) embeddings, BERT's sentence A / B
    embedding_norm: bool = False  # a norm right after the embeddings (BERT)
    final_norm: bool = True  # a norm after the last layer (pre-norm stacks)
    lm_head: str = "tied"  # "tied" to the token embedding | "separate" | "mlm" (BERT) | "none"
    # GPT-2's variants change the scale; T5 does not scale its scores at all
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    position_offset: int = 0  # learned positions: position p reads row p + offset (BART: 2)
    embed_scale: float = 1.0  # token embeddings times this (sqrt(d_model): Marian, some BART)
    relative_buckets: int = 32  # T5's relative position bias: buckets and the distance
    relative_max_distance: int = 128  # past which every distance shares the last bucket
    cross_attention: bool = False  # a decoder: each layer also attends to an encoder's output
    unembed_scale: float = 1.0  # the last hidden state times this before the LM head (T5)
    logits_bias: bool = False  # a bias added to the logits (BART's final_logits_bias)
    qkv_names: tuple = ()  # the checkpoint's names for W_Q, W_K, W_V (one name: stored fused)
    qkv_per_head: bool = False  # fused head by head ([q_h; k_h; v_h] for each h: GPT-NeoX)
    # the checkpoint rotates adjacent pairs (GPT-J); its family reordered each head's rotary
    # rows of W_Q and W_K into halves at load, which the engine rotates: what Inside says
    rotary_interleaved: bool = False
    # attention and MLP side by side, both reading the layer's input (GPT-NeoX, GPT-J, Phi):
    # out = h + attn(ln_1(h)) + mlp(ln_2(h)); else the MLP reads the stream after attention
    parallel_residual: bool = False
    # Each layer's own attention settings (attention_of): a sliding window of this many
    # tokens (0: none) on the layers window_layers lists (empty: every layer), and
    # soft-capped scores (0: none; Gemma 2: cap * tanh(score / cap))
    sliding_window: int = 0
    # QK-norm (an RMSNorm of queries and keys before the rotation): "" none, "head" per head
    # (Qwen3, Gemma 3), "full" over all heads' width (OLMo 2)
    qk_norm: str = ""
    window_layers: tuple = ()
    attn_softcap: float = 0.0
    score_scale: float = 0.0  # the scores' factor; 0: 1 / sqrt(d_head) (Gemma 2: its own)
    # Gemma 2's sandwich: each sub-layer's output normalized before it joins the stream
    post_norms: bool = False
    # in bfloat16/float16, an RMSNorm scales in float32 and rounds once (Gemma) rather than
    # rounding first and scaling in the weights' dtype (Llama, T5): engine/norms.py
    rms_scale_in_float32: bool = False
    final_softcap: float = 0.0  # logits soft-capped: cap * tanh(logit / cap) (Gemma 2)
    # the windowed layers' own RoPE base and scaling (Gemma 3: local layers turn with base
    # 10,000 unscaled, global ones with 1,000,000 and the checkpoint's scaling); 0: the same
    # as every other layer's
    local_rope_theta: float = 0.0
    local_rope_scaling: RopeScaling | None = None
    # OLMo: every query, key and value clamped to [-clip, clip] after the projection (0: none)
    clip_qkv: float = 0.0
    # a norm on each sub-layer's input (False: OLMo 2, whose only norms are post_norms)
    input_norms: bool = True
    # a mixture-of-experts MLP (experts.py; Mixtral): n_experts gated MLPs of width d_ff, of
    # which a router picks experts_per_token for each token (0: one plain or gated MLP)
    n_experts: int = 0
    experts_per_token: int = 0
    # the family module that read the checkpoint ("llama" for a qwen2 one), for people: set
    # by checkpoints when it reads a config; nothing branches on it
    family: str = ""

    def __post_init__(self):
        # a family gives 0 for "as usual"; resolved once here, so one name holds the value
        # every reader uses (frozen: set through object.__setattr__)
        if not self.n_kv_head:
            object.__setattr__(self, "n_kv_head", self.n_head)
        if not self.d_head and self.n_head >= 1 and self.d_model % self.n_head == 0:
            object.__setattr__(self, "d_head", self.d_model // self.n_head)

    @property
    def kv_heads(self) -> list[int]:
        """For each query head, the key/value head it reads."""
        return kv_head_of(self.n_head, self.n_kv_head)

    @property
    def rotary_dim(self) -> int:
        return int(self.d_head * self.rotary_fraction) // 2 * 2

    @property
    def has_lm_head(self) -> bool:
        return self.lm_head != "none"

    @property
    def logits_are_a_sum_of_terms(self) -> str:
        """Why the logits are not a sum of each component's direct term ("" when they are):
        direct logit attribution splits them so, and is exact only then."""
        if self.post_norms:
            return ("each sub-layer's output is normalized before it joins the stream, so a "
                    "head's share of it depends on every other head")
        if self.final_softcap:
            return "the logits are soft-capped (tanh), which is not linear"
        return ""

    def window(self, layer: int) -> int:
        """The sliding window of this layer's attention, in tokens (0: it sees every key)."""
        if not self.sliding_window:
            return 0
        return self.sliding_window if not self.window_layers or layer in self.window_layers \
            else 0

    def rope_of(self, layer: int) -> tuple[float, RopeScaling | None]:
        """(theta, scaling) of this layer's rotary positions."""
        if self.local_rope_theta and self.window(layer):
            return self.local_rope_theta, self.local_rope_scaling
        return self.rope_theta, self.rope_scaling

    def attention_scale(self, layer: int) -> float:
        scale = self.d_head ** -0.5 if self.scale_attn_weights else 1.0
        if self.score_scale:
            scale = self.score_scale
        if self.scale_attn_by_inverse_layer_idx:
            scale /= float(layer + 1)
        return scale

    def problems(self) -> list[str]:
        """What makes this configuration impossible to build (empty when it is fine)."""
        found = []
        for name in ("n_layer", "n_head", "d_model", "d_ff", "vocab_size", "max_positions"):
            if getattr(self, name) < 1:
                found.append(f"{name} is {getattr(self, name)}")
        if self.n_head >= 1 and not self.d_head and self.d_model % self.n_head:
            found.append(f"d_model {self.d_model} is not divisible by {self.n_head} heads")
        if self.n_head >= 1 and self.n_kv_head >= 1 and self.n_head % self.n_kv_head:
            found.append(f"{self.n_head} query heads cannot share {self.n_kv_head} key/value heads")
        if self.norm not in NORMS:
            found.append(f"normalization '{self.norm}' is not one of {', '.join(NORMS)}")
        if self.positions not in POSITIONS:
            found.append(f"positions '{self.positions}' are not one of {', '.join(POSITIONS)}")
        if self.lm_head not in LM_HEADS:
            found.append(f"LM head '{self.lm_head}' is not one of {', '.join(LM_HEADS)}")
        if self.positions == "relative" and not (
                self.relative_buckets >= 4 and self.relative_buckets % 2 == 0
                and self.relative_max_distance > self.relative_buckets // 2):
            found.append(f"the relative position settings ({self.relative_buckets} buckets, "
                         f"max distance {self.relative_max_distance}) are out of range: an "
                         f"even number of at least 4 buckets, and a max distance past half "
                         f"of them")
        if self.position_offset < 0 or not self.embed_scale > 0:
            found.append("the embedding settings (position offset, scale) are out of range")
        if self.positions == "rotary" and not (0 < self.rotary_fraction <= 1
                                               and self.rotary_dim >= 2 and self.rope_theta > 0):
            found.append("the rotary settings (theta, fraction) are out of range")
        if self.sliding_window < 0 or self.attn_softcap < 0 or any(
                not 0 <= layer < self.n_layer for layer in self.window_layers):
            found.append(f"the sliding window ({self.sliding_window} tokens on layers "
                         f"{list(self.window_layers) or 'all'}) or the soft-cap "
                         f"({self.attn_softcap}) is out of range")
        for scaling in (self.rope_scaling, self.local_rope_scaling):
            found += self._rope_scaling_problems(scaling)
        if self.n_experts and not 1 <= self.experts_per_token <= self.n_experts:
            found.append(f"{self.experts_per_token} experts per token cannot be picked from "
                         f"{self.n_experts} experts")
        if self.clip_qkv < 0:
            found.append(f"clip_qkv {self.clip_qkv} is negative")
        if not self.input_norms and not (self.pre_norm and self.post_norms):
            found.append("a stack without norms on the sub-layers' inputs needs them on their "
                         "outputs (post_norms), as OLMo 2 has")
        if self.local_rope_theta < 0:
            found.append(f"the local layers' RoPE base {self.local_rope_theta} is negative")
        if self.score_scale < 0 or self.final_softcap < 0:
            found.append("the score scale or the logits' soft-cap is negative")
        if self.qk_norm not in ("", "head", "full"):
            found.append(f"QK-norm '{self.qk_norm}' is not one of head, full")
        if self.activation not in ACTIVATIONS:
            found.append(f"activation '{self.activation}' is not supported")
        return found

    @staticmethod
    def _rope_scaling_problems(scaling: RopeScaling | None) -> list[str]:
        found = []
        if scaling is not None and (scaling.kind not in ROPE_KINDS or not scaling.factor > 0 or (
                scaling.kind in ("llama3", "yarn") and not scaling.original_max_positions > 0)
                or (scaling.kind == "llama3"
                    and not scaling.high_freq_factor > scaling.low_freq_factor > 0)):
            found.append(f"the RoPE scaling '{scaling.kind}' (factor {scaling.factor}, "
                         f"original context {scaling.original_max_positions}) is not one "
                         f"mha-viz computes ({', '.join(ROPE_KINDS)}, with a positive factor "
                         f"and, for llama3 and yarn, the original context)")
        return found
