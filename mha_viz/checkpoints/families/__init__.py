"""One module per family: how its checkpoints describe the architecture, and how their
tensors map onto our layout. Everything else in mha_viz works from the StackConfig a family
produces and never asks which family it was.

A family module provides:
    NAME                      the family's name, for people ("gpt2", "bert", "llama")
    MODEL_TYPES               config.json "model_type" values it reads
    GGUF_ARCHITECTURES        GGUF "general.architecture" values it reads (may be empty)
    config_from_hf(raw)       config.json (a dict) -> StackConfig (or, for an encoder-decoder,
                              an encoder_decoder.EncoderDecoderConfig of two)
    tensors_from_hf(source, config) -> (config, {our name: tensor})
    config_from_gguf(meta)    GGUF metadata -> StackConfig          (if GGUF_ARCHITECTURES)
    tensors_from_gguf(source, config) -> {our name: tensor}          (if GGUF_ARCHITECTURES)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping

import torch

from . import (bart, bert, distilbert, gemma, gpt2, gpt_neo, gpt_neox, gptj, llama, mixtral, olmo,
               opt, phi, phi3, roberta, stablelm, t5)

FAMILIES = (gpt2, bert, roberta, distilbert, llama, gpt_neox, gemma, phi3, phi, olmo, stablelm,
            gptj, gpt_neo, opt, mixtral, t5, bart)


def for_model_type(model_type):
    """The family module that reads a config.json of this model_type, or None."""
    for family in FAMILIES:
        if model_type in family.MODEL_TYPES:
            return family
    return None


def for_gguf_architecture(architecture):
    for family in FAMILIES:
        if architecture in family.GGUF_ARCHITECTURES:
            return family
    return None


def supported_model_types() -> list[str]:
    return [t for family in FAMILIES for t in family.MODEL_TYPES]


def supported_gguf_architectures() -> list[str]:
    return [a for family in FAMILIES for a in family.GGUF_ARCHITECTURES]


class TensorState(MutableMapping):
    """A checkpoint's tensors by name, each read from its file when asked for (nothing is
    kept here); a family may rename them, set one, or map one through a function applied
    when it is read."""

    def __init__(self, readers: dict[str, Callable[[], torch.Tensor]]):
        self._readers = readers

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._readers[name]()

    def __contains__(self, name) -> bool:  # Mapping's own would read the tensor to know
        return name in self._readers

    def __setitem__(self, name: str, tensor: torch.Tensor) -> None:
        self._readers[name] = lambda: tensor

    def __delitem__(self, name: str) -> None:
        del self._readers[name]

    def __iter__(self):
        return iter(list(self._readers))

    def __len__(self) -> int:
        return len(self._readers)

    def map(self, name: str, function: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """The tensor `name` is function(stored tensor) from now on, computed when read."""
        read = self._readers[name]
        self._readers[name] = lambda: function(read())

    def rename(self, new_name: Callable[[str], str]) -> None:
        self._readers = {new_name(name): read for name, read in self._readers.items()}


class TensorSource:
    """A checkpoint's tensors by their own names (prefixes stripped). Asking for a name it
    lacks records the name and returns None, so a family maps everything in one pass and the
    loader then reports every missing tensor at once. hold_dtype: floating tensors are handed
    out in the dtype the model will run in, converted as each is read (checkpoints/weights.py:
    the model is never held in two dtypes at once)."""

    def __init__(self, state: Mapping[str, torch.Tensor], prefixes: tuple[str, ...] = (),
                 hold_dtype: torch.dtype | None = None):
        readers = {}
        for name in state:
            ours = name
            for prefix in prefixes:
                if name.startswith(prefix):
                    ours = name[len(prefix):]
                    break
            readers[ours] = (lambda name=name: state[name])
        self.state = TensorState(readers)
        self.hold_dtype = hold_dtype
        self.missing: list[str] = []

    def __contains__(self, name: str) -> bool:
        return name in self.state

    def get(self, name: str) -> torch.Tensor | None:
        if name not in self.state:
            self.missing.append(name)
            return None
        tensor = self.state[name]
        if self.hold_dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(self.hold_dtype)
            if tensor.dim() == 1:  # vectors (norm weights, biases: small) widened to float32,
                # so that a family's arithmetic on them (Gemma's 1 + w) does not round again;
                # build_stack gives each its dtype
                tensor = tensor.float()
        return tensor

    def weight_and_bias(self, ours: str, theirs: str) -> dict[str, torch.Tensor | None]:
        """{ours.weight, ours.bias} from theirs.weight and theirs.bias (a LayerNorm, a
        linear layer with a bias)."""
        return {f"{ours}.{part}": self.get(f"{theirs}.{part}") for part in ("weight", "bias")}

    def qkv(self, mine: str, names: str, bias: bool) -> dict[str, torch.Tensor | None]:
        """Our fused {mine}attn.qkv.weight (and .bias when bias) from the three projections
        names.format(p) for p in q, k, v (e.g. "model.layers.0.self_attn.{}_proj")."""
        parts = ("weight", "bias") if bias else ("weight",)
        return {f"{mine}attn.qkv.{part}": self.cat(*(f"{names.format(p)}.{part}" for p in "qkv"))
                for part in parts}

    def cat(self, *names: str) -> torch.Tensor | None:
        """The named tensors concatenated along dim 0 (fusing Q, K, V or gate and up)."""
        parts = [self.get(name) for name in names]
        if any(part is None for part in parts):
            return None
        fused = _side_by_side(parts)
        return torch.cat(parts, dim=0) if fused is None else fused


def _side_by_side(parts: list[torch.Tensor]) -> torch.Tensor | None:
    """The parts' concatenation along dim 0 as one view, when they already lie one after the
    other in one storage (the weights cache maps its file whole, in the GGUF's order, where
    gate and up are neighbours); else None."""
    first = parts[0]
    storage = first.untyped_storage().data_ptr()
    offset = first.storage_offset()
    for part in parts:
        if (part.untyped_storage().data_ptr() != storage or part.dtype != first.dtype
                or part.shape[1:] != first.shape[1:] or not part.is_contiguous()
                or part.storage_offset() != offset):
            return None
        offset += part.numel()
    shape = (sum(part.shape[0] for part in parts), *first.shape[1:])
    return first.as_strided(shape, first.stride(), first.storage_offset())
