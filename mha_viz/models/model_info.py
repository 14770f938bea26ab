"""ModelInfo: what a loaded model is (its family, shape, attention kind, score), and describe,
the architecture in words for the model card."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.placement import parse_dtype

SCORE_NAMES = {
    "next_token_loss": "next-token cross-entropy (nats/token)",
    "mlm_loss": "masked-LM cross-entropy on a fixed 15% of tokens (nats/token)",
    "embedding_shift": "embedding shift: 1 - cosine(mean-pooled embedding, unmasked one)",
    "target_loss": "cross-entropy of the target, teacher-forced (nats/token)",
}
# the same scores as a short label (a column, an axis, a choice) and explained for a reader
SCORE_SHORT_NAMES = {
    "next_token_loss": "next-token loss (nats/token)",
    "mlm_loss": "masked-LM loss (nats/token)",
    "embedding_shift": "embedding shift (1 − cos)",
}
SCORE_EXPLANATIONS = {
    "next_token_loss": "The causal LM's mean cross-entropy of predicting each next token of the "
                       "text, in nats per token. Lower is better; a head that matters makes it "
                       "rise when it is switched off.",
    "mlm_loss": "BERT's masked-LM cross-entropy: a fixed, seeded 15% of the tokens (at least "
                "one) are replaced by [MASK] and the model must recover them; nats per token, "
                "lower is better.",
    "embedding_shift": "This checkpoint has no language-model head (a sentence-embedding BERT "
                       "such as all-MiniLM-L6-v2), so the score is how far the sentence "
                       "embedding moves: 1 − cosine between the mean-pooled last hidden state "
                       "with heads switched off and the one with every head on. It is 0 with "
                       "all heads on; bigger means the head mattered more for the embedding.",
}


@dataclass(frozen=True)
class ModelInfo:
    name: str
    model_type: str  # config.json's model_type: "gpt2", "bert", "llama", "qwen2", "gemma2"
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
    family: str = ""  # the family that read it ("llama" for qwen2): checkpoints/families
    # what the weights are held in and where they run (engine/placement.py)
    dtype: str = "float32"
    device: str = "cpu"

    @property
    def bytes_per_value(self) -> int:
        """Bytes of one number as the model is held (4 in float32, 2 in bfloat16)."""
        return parse_dtype(self.dtype).itemsize

    @property
    def stack_layers(self) -> dict[str, int]:
        """Each stack's layers, by its name: {"encoder": ..., "decoder": ...} for an
        encoder-decoder, {"": n_layer} for a model of one stack (maps.sets.MapSet.stack)."""
        if self.encoder_decoder:
            return {"encoder": self.n_encoder_layer, "decoder": self.n_layer}
        return {"": self.n_layer}

    @property
    def sees(self) -> str:
        """Which tokens a token's attention sees, in words (the model card)."""
        if self.encoder_decoder:
            return ("encoder-decoder: the encoder's tokens see every source token; the "
                    "decoder's see earlier target tokens and, through cross-attention, the "
                    "whole source")
        return ("causal: each token sees only itself and earlier tokens" if self.causal
                else "bidirectional: each token sees every token")

    @property
    def writes_with_kv_cache(self) -> bool:
        """A causal model of one stack: it writes a text a token at a time, keeping every
        layer's keys and values (Model.generate; what the KV cache card sizes)."""
        return self.causal and not self.encoder_decoder

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
    def score_short_name(self) -> str:
        return SCORE_SHORT_NAMES[self.score_kind]

    @property
    def score_explanation(self) -> str:
        return SCORE_EXPLANATIONS[self.score_kind]

    @property
    def query_width(self) -> int:
        """Columns of W_Q (and rows of W_O): every query head's d_head side by side."""
        return self.n_head * self.d_head

    @property
    def key_value_width(self) -> int:
        """Columns of W_K and of W_V: one d_head per key/value head (fewer with GQA/MQA)."""
        return self.n_kv_head * self.d_head

    @property
    def attention_params_per_layer(self) -> int:
        """W_Q, W_K, W_V, W_O weights (biases not counted): 4 d_model^2 for plain multi-head
        attention; fewer when key/value heads are shared."""
        return self.d_model * (2 * self.query_width + 2 * self.key_value_width)

    @property
    def plain_attention_params(self) -> int:
        """4 d_model^2: what W_Q, W_K, W_V, W_O would hold as plain multi-head attention
        with d_head = d_model / heads (the texts' count, to compare with the model's)."""
        return 4 * self.d_model ** 2


def describe(config) -> str:
    """The architecture in words, for the model card."""
    norm = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[config.norm]
    norms = f"{'pre-norm' if config.pre_norm else 'post-norm'} {norm}"
    if config.post_norms:
        norms = (f"{norm} on each sub-layer's output only" if not config.input_norms
                 else f"{norm} on each sub-layer's input and output")
    if config.positions == "rotary":
        fraction = "" if config.rotary_fraction == 1 else f" on {config.rotary_fraction:.0%} of each head"
        local = (f"; theta {config.local_rope_theta:g} on the sliding-window layers"
                 if config.local_rope_theta else "")
        positions = f"rotary positions (RoPE, theta {config.rope_theta:g}{fraction}{local})"
    elif config.positions == "relative":
        positions = (f"relative position bias ({config.relative_buckets} buckets up to "
                     f"distance {config.relative_max_distance}, shared by every layer)")
    elif config.positions == "sinusoidal":
        positions = "sinusoidal absolute positions"
    else:
        positions = "learned absolute positions"
    mlp = f"gated MLP ({config.activation})" if config.gated_mlp else f"MLP ({config.activation})"
    if config.n_experts:
        mlp = (f"mixture of {config.n_experts} gated MLP experts ({config.activation}), "
               f"{config.experts_per_token} per token")
    n_kv_head = config.n_kv_head
    if n_kv_head == config.n_head:
        heads = f"{config.n_head} heads"
    elif n_kv_head == 1:
        heads = f"multi-query attention: {config.n_head} query heads share 1 key/value head"
    else:
        heads = (f"grouped-query attention: {config.n_head} query heads share {n_kv_head} "
                 f"key/value heads ({config.n_head // n_kv_head} each)")
    lm = {"tied": "LM head tied to the embedding", "separate": "separate LM head",
          "mlm": "masked-LM head", "none": "no LM head"}[config.lm_head]
    order = "causal" if config.causal else "bidirectional"
    if config.cross_attention:
        order += " with cross-attention to the encoder"
    return f"{order}; {norms}; {positions}; {mlp}; {heads}; {lm}"
