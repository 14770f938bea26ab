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


class TensorSource:
    """A checkpoint's tensors by their own names. Asking for a name it lacks records the name
    and returns None, so a family maps everything in one pass and the loader then reports
    every missing tensor at once."""

    def __init__(self, state: dict[str, torch.Tensor], prefixes: tuple[str, ...] = ()):
        self.state = {}
        for name, tensor in state.items():
            for prefix in prefixes:
                if name.startswith(prefix):
                    name = name[len(prefix):]
                    break
            self.state[name] = tensor
        self.missing: list[str] = []

    def __contains__(self, name: str) -> bool:
        return name in self.state

    def get(self, name: str) -> torch.Tensor | None:
        tensor = self.state.get(name)
        if tensor is None:
            self.missing.append(name)
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
        return torch.cat(parts, dim=0)
