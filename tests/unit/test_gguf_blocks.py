"""The legacy block types dequantized by torch (checkpoints/gguf_blocks.py) give gguf's own
numpy dequantization bit for bit: blocks of random bytes (every code, every bit pattern of the
float16 scales: subnormal, negative zero, infinities and NaNs), gguf's quantization of normal
weights, and whole rows of many blocks; and a short buffer is refused."""

import numpy as np
import pytest
import torch

from mha_viz.checkpoints import gguf_blocks


def gguf_values(raw: np.ndarray, kind: str) -> np.ndarray:
    import gguf

    return gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind]).reshape(-1)


@pytest.mark.parametrize("kind", sorted(gguf_blocks.BLOCK_BYTES))
def test_random_blocks_read_as_gguf_reads_them(kind):
    width = gguf_blocks.BLOCK_BYTES[kind]
    rng = np.random.default_rng(len(kind) + width)
    raw = rng.integers(0, 256, (4096, width), dtype=np.uint8)
    # scales and minimums of every kind: 0, -0, the smallest subnormal, 1, inf, NaN
    for row, half in enumerate((0x0000, 0x8000, 0x0001, 0x3C00, 0x7C00, 0x7E00)):
        raw[row, 0:2] = (half & 0xFF, half >> 8)
        raw[-1 - row, 2:4] = (half & 0xFF, half >> 8)
    with np.errstate(all="ignore"):
        expected = gguf_values(raw, kind)
    mine = gguf_blocks.dequantize(raw, kind)
    assert mine.dtype == torch.float32 and mine.shape == (4096 * 32,)
    assert np.array_equal(mine.numpy(), expected, equal_nan=True)
    assert np.isnan(expected).any() and np.isinf(expected).any()  # the odd scales were read


@pytest.mark.parametrize("kind", sorted(gguf_blocks.BLOCK_BYTES))
def test_quantized_weights_read_as_gguf_reads_them(kind, monkeypatch):
    import gguf

    monkeypatch.setattr(gguf_blocks, "_CHUNK_BLOCKS", 7)  # rows cut across chunks too
    weights = np.random.default_rng(3).standard_normal((5, 96)).astype(np.float32) * 0.02
    raw = gguf.quants.quantize(weights, gguf.GGMLQuantizationType[kind])
    mine = gguf_blocks.dequantize(raw, kind).numpy()
    assert np.array_equal(mine, gguf_values(raw, kind))
    assert np.abs(mine - weights.reshape(-1)).max() < 0.01  # and they are the weights


def test_bytes_that_are_not_whole_blocks_are_refused():
    with pytest.raises(ValueError, match="not whole Q8_0 blocks"):
        gguf_blocks.dequantize(np.zeros(35, dtype=np.uint8), "Q8_0")
