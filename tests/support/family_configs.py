"""The decoder families added beside GPT-2, BERT and the Llama family, as random checkpoints
of transformers' own config classes: id -> (config class, model class, config), each case
switching on what the family adds (mha_viz.testing.make_decoder_checkpoint builds them)."""


# id -> (config class, model class, config): each case switches on what the family adds
FAMILIES = {
    # Pythia: attention and MLP in parallel, a quarter of each head rotating
    "pythia": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, hidden_size=64, intermediate_size=256,
        max_position_embeddings=256, rotary_pct=0.25, rotary_emb_base=100,
        use_parallel_residual=True)),
    "neox_sequential": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=2, hidden_size=48, intermediate_size=96,
        max_position_embeddings=256, rotary_pct=1.0, use_parallel_residual=False,
        tie_word_embeddings=True)),
    # Qwen3: an RMSNorm of each head's query and key before the rotation (QK-norm), grouped
    # query heads, a head wider than d_model / H; then with a sliding window from layer 1
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        head_dim=24, intermediate_size=128, max_position_embeddings=256, rope_theta=100.0)),
    "qwen3_window": ("Qwen3Config", "Qwen3ForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, hidden_size=64,
        head_dim=16, intermediate_size=128, max_position_embeddings=256,
        use_sliding_window=True, sliding_window=5, max_window_layers=1,
        tie_word_embeddings=True)),
    # Gemma: (1 + w) RMSNorm, embeddings times sqrt(d_model), a GELU-tanh gated MLP
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, hidden_size=64,
        head_dim=16, intermediate_size=128, max_position_embeddings=256, rope_theta=100.0)),
    # Gemma 2: scores scaled by query_pre_attn_scalar and soft-capped, logits soft-capped, a
    # sliding window on every other layer, each sub-layer's output normalized (caps small
    # enough that tanh bends the scores and logits of these random weights)
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        head_dim=16, intermediate_size=128, max_position_embeddings=256, rope_theta=100.0,
        query_pre_attn_scalar=24, attn_logit_softcapping=4.0, final_logit_softcapping=3.0,
        sliding_window=5)),
    # Gemma 3: QK-norm with (1 + w) weights, local layers with their own RoPE base (100) and
    # a global one with another (1000) and a linear scaling, the scores scaled by
    # query_pre_attn_scalar, each sub-layer's output normalized
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        head_dim=16, intermediate_size=128, max_position_embeddings=256,
        query_pre_attn_scalar=24, sliding_window=5,
        layer_types=["sliding_attention", "sliding_attention", "full_attention",
                     "sliding_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                         "full_attention": {"rope_type": "linear", "factor": 4.0,
                                            "rope_theta": 1000.0}})),
    # Phi-3: W_Q, W_K, W_V fused in qkv_proj, gate and up in gate_up_proj; a sliding window on
    # every layer, a half of each head rotating
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        intermediate_size=128, max_position_embeddings=256, sliding_window=5, pad_token_id=0,
        rope_parameters={"rope_type": "default", "rope_theta": 100.0,
                         "partial_rotary_factor": 0.5})),
    # Phi-2: attention and MLP in parallel on one LayerNorm, partial rotary, biases on every
    # projection and on the LM head
    "phi": ("PhiConfig", "PhiForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, hidden_size=64, intermediate_size=128,
        max_position_embeddings=256, rope_parameters={
            "rope_type": "default", "rope_theta": 100.0, "partial_rotary_factor": 0.5})),
    # OLMo: LayerNorms without weights, Q, K and V clipped (a clip small enough to bite on
    # these random weights)
    "olmo": ("OlmoConfig", "OlmoForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        intermediate_size=128, max_position_embeddings=256, clip_qkv=1.5, pad_token_id=0,
        rope_parameters={"rope_type": "default", "rope_theta": 100.0})),
    # OLMo 2: no norms on the sub-layers' inputs, RMSNorms on their outputs, QK-norm over all
    # heads' width
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        intermediate_size=128, max_position_embeddings=256, pad_token_id=0,
        rope_parameters={"rope_type": "default", "rope_theta": 100.0})),
    # StableLM: LayerNorms with biases, a quarter of each head rotating, Q/K/V biases, GQA;
    # then attention and MLP in parallel on one norm
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        intermediate_size=128, max_position_embeddings=256, use_qkv_bias=True, pad_token_id=0,
        rope_parameters={"rope_type": "default", "rope_theta": 100.0,
                         "partial_rotary_factor": 0.25})),
    "stablelm_parallel": ("StableLmConfig", "StableLmForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, hidden_size=64,
        intermediate_size=128, max_position_embeddings=256, use_parallel_residual=True,
        pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 100.0,
                                         "partial_rotary_factor": 0.5})),
    # GPT-J: adjacent pairs rotating (rotate_every_two) on 8 of each head's 16 dimensions,
    # attention and MLP in parallel, a bias on the LM head
    "gptj": ("GPTJConfig", "GPTJForCausalLM", dict(
        n_layer=2, n_head=4, n_embd=64, n_positions=256, rotary_dim=8)),
    # GPT-Neo: scores not scaled, a window of 5 on the local layers (0 and 2)
    "gpt_neo": ("GPTNeoConfig", "GPTNeoForCausalLM", dict(
        num_layers=3, num_heads=4, hidden_size=64, max_position_embeddings=256,
        attention_types=[[["local", "global"], 1], [["local"], 1]], window_size=5)),
    # OPT: positions read at row p + 2; pre-norm, then post-norm with LayerNorms without
    # weights and no final norm
    "opt": ("OPTConfig", "OPTForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, hidden_size=64, ffn_dim=128,
        word_embed_proj_dim=64, max_position_embeddings=256)),
    "opt_post_norm": ("OPTConfig", "OPTForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, hidden_size=64, ffn_dim=128,
        word_embed_proj_dim=64, max_position_embeddings=256, do_layer_norm_before=False,
        layer_norm_elementwise_affine=False, init_std=0.5)),  # layer 0 reads raw embeddings
    # Mixtral: a mixture of 4 experts, 2 per token, after Mistral's attention with a window
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        intermediate_size=64, max_position_embeddings=256, num_local_experts=4,
        num_experts_per_tok=2, sliding_window=5, rope_parameters={
            "rope_type": "default", "rope_theta": 100.0})),
}
