"""GGUF files of random Hugging Face checkpoints, written with the gguf package as llama.cpp's
convert_hf_to_gguf.py writes each architecture: its tensor names, its metadata keys, and
what it changes on the way (Gemma's norms stored as 1 + w, Phi-3's fused projections kept
fused, GPT-NeoX's head-by-head fused Q/K/V reordered into [Q; K; V]). What llama.cpp's converter would drop (a setting its format has no key for) is
refused here rather than written wrong."""

from __future__ import annotations

import json
from pathlib import Path

from .checkpoints import _GGUF_FILE_TYPES, _gguf_tensor_data, write_gguf_vocab, write_llama_gguf

# model_type -> (GGUF architecture, Gemma's norms stored as 1 + w, norms around sub-layers)
_ARCHITECTURES = {
    "qwen2": ("qwen2", False, False),
    "qwen3": ("qwen3", False, False),
    "gemma": ("gemma", True, False),
    "gemma2": ("gemma2", True, True),
    "gemma3_text": ("gemma3", True, True),
    "phi3": ("phi3", False, False),
    "gpt_neox": ("gptneox", False, False),
}
# Hugging Face's name inside a layer -> llama.cpp's (the layer prefix model.layers.{i}. is
# blk.{i}.); the sub-layer norms differ in the families that put a norm around each one
_LAYER_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.qkv_proj": "attn_qkv", "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.gate_up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
    # GPT-NeoX's
    "attention.query_key_value": "attn_qkv", "attention.dense": "attn_output",
    "mlp.dense_h_to_4h": "ffn_up", "mlp.dense_4h_to_h": "ffn_down",
}
_NORM_NAMES = {False: {"post_attention_layernorm": "ffn_norm"},
               True: {"post_attention_layernorm": "post_attention_norm",
                      "pre_feedforward_layernorm": "ffn_norm",
                      "post_feedforward_layernorm": "post_ffw_norm"}}
# llama.cpp's sliding-window period when the file gives none: Gemma 2 every other layer,
# Gemma 3 five local to one global
DEFAULT_WINDOW_PERIOD = {"gemma2": 2, "gemma3": 6}


def write_gguf(folder: str | Path, path: str | Path, tensor_type="F32",
               name: str = "mha-viz random model") -> Path:
    """Convert a random Hugging Face checkpoint (config.json, model.safetensors, a byte-level
    BPE tokenizer.json) of Llama, Mistral, Qwen2, Qwen3, Gemma, Gemma 2, Gemma 3 (text),
    Phi-3 or GPT-NeoX (Pythia) to a GGUF file as llama.cpp does; return path. tensor_type: as write_llama_gguf
    ("F32", "F16", "Q8_0", "Q4_1"); norms and biases stay F32."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    folder, path = Path(folder), Path(path)
    config = json.loads((folder / "config.json").read_text())
    model_type = config.get("model_type")
    if model_type in ("llama", "mistral"):
        return write_llama_gguf(folder, path, tensor_type, name)
    if model_type not in _ARCHITECTURES:
        raise ValueError(f"no GGUF writer for model_type {model_type!r}; written: llama, "
                         f"mistral, {', '.join(_ARCHITECTURES)}")
    if tensor_type not in _GGUF_FILE_TYPES:
        raise ValueError(f"tensor_type must be one of {sorted(_GGUF_FILE_TYPES)}, "
                         f"got {tensor_type!r}")
    arch, norm_shift, sandwich = _ARCHITECTURES[model_type]
    n_layer, n_head = config["num_hidden_layers"], config["num_attention_heads"]
    d_head = config.get("head_dim") or config["hidden_size"] // n_head
    qtype = gguf.GGMLQuantizationType[tensor_type]
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType[_GGUF_FILE_TYPES[tensor_type]])
    writer.add_block_count(n_layer)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(config.get("num_key_value_heads") or n_head)
    if arch == "gptneox":  # LayerNorms, attention and MLP in parallel or not
        writer.add_layer_norm_eps(float(config["layer_norm_eps"]))
        writer.add_parallel_residual(bool(config.get("use_parallel_residual", True)))
    else:
        writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_key_length(d_head)
    writer.add_value_length(d_head)
    _write_rope_and_window(writer, arch, config, d_head)
    write_gguf_vocab(writer, folder, config)

    weights = load_file(str(folder / "model.safetensors"))
    layer_names = {**_LAYER_NAMES, **_NORM_NAMES[sandwich]}
    for hf_name in sorted(weights, key=_layer_order):
        gguf_name = _gguf_name(hf_name, layer_names)
        if gguf_name == "output.weight" and (
                norm_shift or config.get("tie_word_embeddings", False)):
            continue  # llama.cpp writes no output.weight for a tied (or Gemma's) LM head
        array = np.ascontiguousarray(weights[hf_name], dtype=np.float32)
        if norm_shift and hf_name.endswith("norm.weight"):
            array = array + np.float32(1.0)  # llama.cpp stores Gemma's RMSNorm weight as 1 + w
        if ".query_key_value." in hf_name:  # GPT-NeoX's [q_h; k_h; v_h] per head -> [Q; K; V]
            array = np.ascontiguousarray(array.reshape(n_head, 3, d_head, *array.shape[1:])
                                         .swapaxes(0, 1).reshape(array.shape))
        data, data_type = _gguf_tensor_data(array, qtype)
        writer.add_tensor(gguf_name, data, raw_dtype=data_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _layer_order(hf_name: str):
    parts = hf_name.split(".")
    return (int(parts[2]) if parts[1:2] == ["layers"] else -1, hf_name)


def _gguf_name(hf_name: str, layer_names: dict) -> str | None:
    whole = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight",
             "gpt_neox.embed_in.weight": "token_embd.weight", "embed_out.weight": "output.weight",
             "gpt_neox.final_layer_norm.weight": "output_norm.weight",
             "gpt_neox.final_layer_norm.bias": "output_norm.bias"}
    if hf_name in whole:
        return whole[hf_name]
    _, _, index, rest = hf_name.split(".", 3)
    stem, _, leaf = rest.rpartition(".")
    if stem not in layer_names:
        raise ValueError(f"no GGUF name for tensor {hf_name!r}")
    return f"blk.{index}.{layer_names[stem]}.{leaf}"


def _rope(config: dict, layer_type: str) -> dict:
    params = config.get("rope_parameters") or {}
    if layer_type in params:
        return params[layer_type]
    if "full_attention" in params or "sliding_attention" in params:
        return {}
    return {**(config.get("rope_scaling") or {}), **params}


def _write_rope_and_window(writer, arch: str, config: dict, d_head: int) -> None:
    """RoPE, the sliding window and the scores' scale, as llama.cpp's converter writes them;
    refuses what its format for arch cannot say."""
    import gguf

    rope = _rope(config, "full_attention")
    writer.add_rope_freq_base(float(rope.get("rope_theta", config.get("rope_theta", 10000.0))))
    kind = rope.get("rope_type") or rope.get("type") or "default"
    if kind == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))
    elif kind != "default":
        raise ValueError(f"RoPE scaling {kind!r} is not written by this writer")
    fraction = float(rope.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0)))
    if fraction != 1.0:
        writer.add_rope_dimension_count(int(fraction * d_head))
    window = config.get("sliding_window") or 0
    if arch in ("qwen2", "qwen3") and config.get("use_sliding_window"):
        raise ValueError("llama.cpp's Qwen2 / Qwen3 have no sliding window")
    if arch == "gemma" or not window or (arch.startswith("qwen")):
        return
    writer.add_sliding_window(int(window))
    if arch not in DEFAULT_WINDOW_PERIOD:  # Phi-3: the window masks every layer
        return
    scalar = config.get("query_pre_attn_scalar")
    if scalar is not None and scalar != d_head:
        raise ValueError(f"llama.cpp scales {arch}'s scores by head_dim^-1/2; "
                         f"query_pre_attn_scalar {scalar} != head_dim {d_head} cannot be written")
    if arch == "gemma2":
        writer.add_attn_logit_softcapping(float(config["attn_logit_softcapping"]))
        writer.add_final_logit_softcapping(float(config["final_logit_softcapping"]))
    else:
        local = _rope(config, "sliding_attention")
        if (local.get("rope_type") or "default") != "default":
            raise ValueError("llama.cpp's Gemma 3 local layers take no RoPE scaling")
        writer.add_rope_freq_base_swa(float(local.get("rope_theta",
                                                      config.get("rope_local_base_freq", 1e4))))
    period = DEFAULT_WINDOW_PERIOD[arch]
    sliding = [kind == "sliding_attention" for kind in config.get("layer_types") or ()]
    if sliding and sliding != [(i + 1) % period != 0 for i in range(len(sliding))]:
        writer.add_sliding_window_pattern(sliding)
