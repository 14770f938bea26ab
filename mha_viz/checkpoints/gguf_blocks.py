"""llama.cpp's legacy block quantisations (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) dequantized by torch,
to the same float32 values as the gguf package's numpy code, bit for bit: the same float16 scale
widened to float32, the same integer codes, and the same float32 multiply then add (two
roundings, never a fused multiply-add). gguf's code splits every 16 rows into Python calls: the
bundled SmolLM2 (Q4_1) takes it 1.0 s, this 0.25 s, most of a first start's load
(issue 59). tests/unit/test_gguf_blocks.py compares both on every type.

A block of 32 weights: a float16 scale d (and, for the _1 types, a float16 minimum m), then the
codes: 4-bit codes two to a byte (the low nibbles are weights 0-15, the high 16-31), for the
5-bit types a 32-bit word of fifth bits (bit i is weight i's), for Q8_0 one int8 a weight.
"""

from __future__ import annotations

import numpy as np
import torch

# type name -> bytes per block of 32 weights
BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24, "Q8_0": 34}
_WEIGHTS = 32
_CHUNK_BLOCKS = 1 << 18  # 8M weights at a time: the temporaries stay a few tens of MB


def dequantize(data: np.ndarray, kind: str) -> torch.Tensor:
    """The stored bytes of a tensor of type kind (BLOCK_BYTES) -> float32 weights, flat."""
    width = BLOCK_BYTES[kind]
    raw = np.asarray(data, dtype=np.uint8).reshape(-1)
    if raw.size % width:
        raise ValueError(f"{raw.size} bytes are not whole {kind} blocks of {width} bytes")
    blocks = raw.reshape(-1, width)
    out = torch.empty(len(blocks), _WEIGHTS, dtype=torch.float32)
    decode = _DECODERS[kind]
    for start in range(0, len(blocks), _CHUNK_BLOCKS):
        # a copy: the file's memory map is read-only, which torch will not wrap
        chunk = torch.from_numpy(np.array(blocks[start:start + _CHUNK_BLOCKS]))
        out[start:start + len(chunk)] = decode(chunk)
    return out.reshape(-1)


def _half(chunk: torch.Tensor, at: int) -> torch.Tensor:
    """The float16 at bytes at, at+1 of every block, as float32 [n, 1]."""
    return chunk[:, at:at + 2].contiguous().view(torch.float16).float()


def _nibbles(codes: torch.Tensor) -> torch.Tensor:
    """[n, 16] bytes -> [n, 32] 4-bit codes: the low nibbles, then the high ones."""
    return torch.cat([codes & 0x0F, codes >> 4], dim=1)


def _fifth_bits(chunk: torch.Tensor, at: int) -> torch.Tensor:
    """The little-endian 32-bit word at bytes at..at+3 -> [n, 32] bits, each shifted to 16."""
    word = chunk[:, at:at + 4].to(torch.int64)
    word = word[:, 0] | word[:, 1] << 8 | word[:, 2] << 16 | word[:, 3] << 24
    bits = (word[:, None] >> torch.arange(_WEIGHTS)) & 1
    return (bits << 4).to(torch.uint8)


def _q4_0(chunk):
    return _half(chunk, 0) * (_nibbles(chunk[:, 2:]).to(torch.int8) - 8).float()


def _q4_1(chunk):
    return _half(chunk, 0) * _nibbles(chunk[:, 4:]).float() + _half(chunk, 2)


def _q5_0(chunk):
    codes = _nibbles(chunk[:, 6:]) | _fifth_bits(chunk, 2)
    return _half(chunk, 0) * (codes.to(torch.int8) - 16).float()


def _q5_1(chunk):
    codes = _nibbles(chunk[:, 8:]) | _fifth_bits(chunk, 4)
    return _half(chunk, 0) * codes.float() + _half(chunk, 2)


def _q8_0(chunk):
    return _half(chunk, 0) * chunk[:, 2:].contiguous().view(torch.int8).float()


_DECODERS = {"Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q8_0": _q8_0}
