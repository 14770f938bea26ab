"""GGUF's own layout, checked against the rules llama.cpp's converter states."""

import torch

from mha_viz.checkpoints.families.llama import unpermute_rows


def llama_cpp_permute(weights: torch.Tensor, n_head: int) -> torch.Tensor:
    """convert_hf_to_gguf.py's LlamaModel.permute, written out as it is there."""
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def test_unpermute_undoes_llama_cpp_permute():
    hf = torch.randn(3 * 8, 5)
    assert torch.equal(unpermute_rows(llama_cpp_permute(hf, 3), 3), hf)


def test_gguf_row_2j_plus_s_is_hugging_face_row_half_s_plus_j():
    d, n_head = 8, 2
    hf = torch.arange(n_head * d, dtype=torch.float32)[:, None]  # row i holds i
    gguf = llama_cpp_permute(hf, n_head)
    for h in range(n_head):
        for j in range(d // 2):
            for s in range(2):
                assert gguf[h * d + 2 * j + s, 0] == h * d + (d // 2) * s + j
