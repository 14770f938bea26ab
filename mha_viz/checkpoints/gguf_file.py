"""Reading a GGUF file (llama.cpp's format) with the gguf package: metadata, tensors
dequantized to float32, and the tokenizer its metadata describes.

Never transformers' GGUF model loader (slow: it builds a transformers model first); only its
tokenizer converter, which reads the vocabulary and merges we hand it.
"""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import numpy as np
import torch

from ..core.errors import CorruptCheckpointError, UnsupportedModelError
from .weights import LazyTensors, TensorInfo

# Quantisation types the pinned gguf package dequantizes in numpy (gguf.quants: the legacy
# and K-quants, the i-quants, the ternary TQ1_0 / TQ2_0, MXFP4 and NVFP4); others (Q8_K,
# Q8_1, Q1_0: gguf has no dequantizer for them) are refused with a message rather than a
# traceback. tests/unit/test_gguf_quants.py checks this list against gguf.quants itself.
DEQUANTIZED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K",
                     "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS",
                     "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4",
                     "NVFP4")
# llama.cpp's pre-tokenizer names whose splitting differs from GPT-2's regex in a way
# transformers' converter does not know: SmolLM splits every digit on its own first.
_DIGIT_SPLITTING_PRE = ("smollm",)
# GGUF's tokenizer.ggml.model for a SentencePiece vocabulary (spelt after the model that
# brought it): llama.cpp puts a BOS before the text unless the file says otherwise
SENTENCEPIECE_VOCABULARY = "llama"


_LENGTH = struct.Struct("<Q")  # a GGUF string's length, little-endian


def _reader_class():
    from gguf import GGUFReader, GGUFValueType

    class PlainArrayReader(GGUFReader):
        """GGUFReader over a plain ndarray view of its memory map: slicing an np.memmap runs
        Python code for every slice, and a vocabulary is ~100k slices (3 s -> under 1 s).
        Its arrays are read whole too: gguf makes two numpy views for every string of a
        vocabulary and one for every number of an array (0.8 s of SmolLM2's load); here an
        array of numbers is one view, and a string a slice of a memoryview. What
        `field.contents()` returns is the same (tests/unit/test_gguf_reader.py)."""

        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, value):
            self._plain = np.asarray(value)

        def _get_field_parts(self, orig_offs: int, raw_type: int):
            if self.byte_order != "I" or raw_type != GGUFValueType.ARRAY:
                return super()._get_field_parts(orig_offs, raw_type)
            raw_itype = self._get(orig_offs, np.uint32)
            count = self._get(orig_offs + 4, np.uint64)
            kind, offs = GGUFValueType(int(raw_itype[0])), orig_offs + 12
            types = [GGUFValueType.ARRAY, kind]
            number = self.gguf_scalar_to_np.get(kind)
            if number is not None:
                values = self._get(offs, number, int(count[0]))
                return 12 + int(values.nbytes), [raw_itype, count, values], [2], types
            if kind != GGUFValueType.STRING:  # arrays of arrays: gguf's own way
                return super()._get_field_parts(orig_offs, raw_type)
            buffer, parts, data = memoryview(self._plain), [raw_itype, count], []
            for _ in range(int(count[0])):
                (size,) = _LENGTH.unpack_from(buffer, offs)
                data.append(len(parts))
                parts.append(buffer[offs + 8:offs + 8 + size])
                offs += 8 + size
            if offs > len(buffer):
                raise ValueError("an array of strings runs past the end of the file")
            return offs - orig_offs, parts, data, types

    return PlainArrayReader


# transformers resolves its names lazily, and two threads importing them for the first time at
# once can see "cannot import name ...": app sessions load models in threads. Every first
# import of transformers' tokenizer code in this package holds it.
TRANSFORMERS_IMPORT_LOCK = threading.Lock()


def import_tokenizer_code() -> None:
    """What a folder checkpoint builds its tokenizer with (AutoTokenizer), imported, held by
    the lock. A GGUF's tokenizer imports only the fast tokenizer class, when it builds one
    (fast_tokenizer, tokenizer_parts): AutoTokenizer's model registry costs 0.3 s more."""
    with TRANSFORMERS_IMPORT_LOCK:
        import transformers  # noqa: F401
        from transformers import AutoTokenizer  # noqa: F401


class GGUFFile:
    """An opened GGUF: .metadata (key -> Python value) and .tensor_types (name -> type name)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.reader = _reader_class()(str(self.path), "r")
            self.metadata = {name: field.contents() for name, field in self.reader.fields.items()
                             if not name.startswith("GGUF.")}
            self.tensor_types = {t.name: t.tensor_type.name for t in self.reader.tensors}
        except ImportError as error:
            raise CorruptCheckpointError("reading a .gguf needs the gguf package: "
                                         "pip install -r requirements.txt") from error
        except Exception as error:  # truncated or garbage: numpy, struct and value errors
            raise CorruptCheckpointError(
                f"'{self.path.name}' is not a readable GGUF file ({type(error).__name__}: "
                f"{error}). It may be truncated or damaged: download it again.") from error

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))

    def lazy_tensors(self) -> LazyTensors:
        """Every tensor by name, dequantized to float32 in Hugging Face's [out, in]
        orientation when it is read (one at a time: weights.py)."""
        unsupported = sorted({kind for kind in self.tensor_types.values()
                              if kind not in DEQUANTIZED_TYPES})
        if unsupported:
            raise UnsupportedModelError(
                f"'{self.path.name}' stores tensors as {', '.join(unsupported)}, a quantisation "
                f"mha-viz does not dequantize; supported: {', '.join(DEQUANTIZED_TYPES)}. "
                f"Convert it with llama.cpp to Q8_0, Q4_K or F16.")
        by_name = {tensor.name: tensor for tensor in self.reader.tensors}
        # GGUF lists dims innermost first
        infos = {name: TensorInfo(torch.float32, tuple(int(n) for n in reversed(t.shape)))
                 for name, t in by_name.items()}
        return LazyTensors(infos, lambda name: self._dequantized(by_name[name], infos[name]))

    def finish(self) -> None:
        """Called once the load has read the tensors it needs (gguf_cache writes its file)."""

    def _dequantized(self, tensor, info: TensorInfo) -> torch.Tensor:
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        try:
            kind = tensor.tensor_type
            if kind == GGMLQuantizationType.F32:
                values = np.array(tensor.data, dtype=np.float32)
            elif kind == GGMLQuantizationType.F16:
                values = np.asarray(tensor.data).astype(np.float32)
            elif kind.name in _IN_TORCH:
                return _IN_TORCH[kind.name](tensor.data).reshape(info.shape)
            else:
                values = dequantize(tensor.data, kind)
            return torch.from_numpy(np.ascontiguousarray(values.reshape(info.shape),
                                                         dtype=np.float32))
        except Exception as error:  # short data (a truncated file) fails to reshape
            raise CorruptCheckpointError(
                f"the tensors of '{self.path.name}' could not be read ({type(error).__name__}: "
                f"{error}). The file may be truncated or damaged: download it again.") from error

    def tokenizer(self):
        """A fast tokenizer built from the file's vocabulary, merges and special tokens."""
        return fast_tokenizer(*self.tokenizer_parts())

    def tokenizer_parts(self) -> tuple[object, dict]:
        """(the `tokenizers` backend, PreTrainedTokenizerFast's special-token arguments) that
        the file's metadata describes: what tokenizer() builds, and what the weights cache
        keeps so that a second load converts nothing (gguf_cache)."""
        from tokenizers import pre_tokenizers, processors
        with TRANSFORMERS_IMPORT_LOCK:
            from transformers.integrations.gguf.gguf_tokenizer_mapping import (
                GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer)

        meta = self.metadata
        if "tokenizer.ggml.tokens" not in meta:
            raise CorruptCheckpointError(f"'{self.path.name}' holds no tokenizer (no "
                                         f"tokenizer.ggml.tokens in its metadata)")
        tokens = meta["tokenizer.ggml.tokens"]
        spec = {name: meta[f"tokenizer.{key}"] for key, name in
                GGUF_TOKENIZER_MAPPING["tokenizer"].items() if f"tokenizer.{key}" in meta}
        try:
            backend, _ = convert_gguf_tokenizer(self.architecture, spec)
        except Exception as error:
            raise UnsupportedModelError(
                f"the tokenizer of '{self.path.name}' ({spec.get('tokenizer_type')!r}) cannot be "
                f"built: {error}") from error
        if spec.get("pre_tokenizer_type") in _DIGIT_SPLITTING_PRE:
            backend.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])

        def token(key):
            index = meta.get(f"tokenizer.ggml.{key}")
            return tokens[index] if isinstance(index, int) and 0 <= index < len(tokens) else None

        bos = token("bos_token_id")
        sentencepiece = spec.get("tokenizer_type") == SENTENCEPIECE_VOCABULARY
        if meta.get("tokenizer.ggml.add_bos_token", sentencepiece) and bos:
            backend.post_processor = processors.TemplateProcessing(
                single=f"{bos} $A", pair=f"{bos} $A $B:1",
                special_tokens=[(bos, int(meta["tokenizer.ggml.bos_token_id"]))])
        control = [t for t, kind in zip(tokens, meta.get("tokenizer.ggml.token_type") or ())
                   if kind == 3 and backend.token_to_id(t) is not None and t not in (bos, token("eos_token_id"), token("unknown_token_id"),
                                              token("padding_token_id"))]
        return backend, dict(bos_token=bos, eos_token=token("eos_token_id"),
                             unk_token=token("unknown_token_id"),
                             pad_token=token("padding_token_id"),
                             additional_special_tokens=control)


def _blocks(data, size: int) -> torch.Tensor:
    """A quantised tensor's bytes as [blocks, size] (copied: the file's map is read-only)."""
    return torch.from_numpy(np.array(data, dtype=np.uint8).reshape(-1, size))


def _half(blocks: torch.Tensor, at: int) -> torch.Tensor:
    """The float16 at byte `at` of every block, as float32 [blocks, 1]."""
    return blocks[:, at:at + 2].contiguous().view(torch.float16).float()


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """A block's 4-bit values in order: the low halves of its bytes, then the high halves."""
    return torch.cat((packed & 0x0F, packed >> 4), dim=1)


def _q8_0(data) -> torch.Tensor:  # a float16 scale d, 32 int8 q: d * q
    blocks = _blocks(data, 34)
    return blocks[:, 2:].contiguous().view(torch.int8).float().mul_(_half(blocks, 0))


def _q4_0(data) -> torch.Tensor:  # a float16 scale d, 32 4-bit q: d * (q - 8)
    blocks = _blocks(data, 18)
    return _nibbles(blocks[:, 2:]).to(torch.int8).sub_(8).float().mul_(_half(blocks, 0))


def _q4_1(data) -> torch.Tensor:  # float16 d and m, 32 4-bit q: d * q + m
    blocks = _blocks(data, 20)
    return _nibbles(blocks[:, 4:]).float().mul_(_half(blocks, 0)).add_(_half(blocks, 2))


# The legacy types dequantized in torch (several threads, no per-row-group Python): the same
# float32 operations in the same order as gguf.quants' numpy, so bit for bit its values
# (tests/unit/test_gguf_quants.py), 2-3x faster (SmolLM2's Q4_1: 0.75-1.15 s -> 0.33 s).
_IN_TORCH = {"Q8_0": _q8_0, "Q4_0": _q4_0, "Q4_1": _q4_1}


def fast_tokenizer(backend, special: dict):
    """transformers' fast tokenizer over a `tokenizers` backend, with these special tokens.
    The backend is taken over, not copied: callers pass one built for it, used nowhere else.
    (PreTrainedTokenizerFast(tokenizer_object=...) deep-copies the backend, 0.1 s of a start
    for SmolLM2's 49k tokens; a backend set before __init__ is what transformers' own
    tokenizer classes do, and __init__ then configures it as it would the copy.)"""
    with TRANSFORMERS_IMPORT_LOCK:
        from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.__new__(PreTrainedTokenizerFast)
    tokenizer._tokenizer = backend
    tokenizer.__init__(**special)
    return tokenizer
