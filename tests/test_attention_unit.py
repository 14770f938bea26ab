"""attention.py step by step against independent formulas."""

import math

import pytest
import torch

from mha_viz.attention import (MultiHeadAttention, causal_mask_bias, combine_heads, gate_heads,
                               padding_mask_bias, scaled_dot_product_attention, split_heads)


def test_split_and_combine_heads_are_inverse_and_slice_by_head():
    x = torch.arange(2 * 3 * 12, dtype=torch.float32).view(2, 3, 12)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 3)
    assert torch.equal(heads[1, 2, 0], x[1, 0, 6:9])  # head 2 owns features 6..8
    assert torch.equal(combine_heads(heads), x)


def test_sdpa_matches_the_formula():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    context, weights = scaled_dot_product_attention(q, k, v)
    scores = q @ k.transpose(-1, -2) / math.sqrt(4)
    expected = torch.exp(scores) / torch.exp(scores).sum(-1, keepdim=True)
    assert torch.allclose(weights, expected)
    assert torch.allclose(context, expected @ v)


def test_causal_mask_gives_exact_zeros_above_diagonal_and_first_row_one_hot():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 3, 6, 4) for _ in range(3))
    _, weights = scaled_dot_product_attention(q, k, v, causal_mask_bias(6))
    assert (weights[..., torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)] == 0).all()
    assert torch.allclose(weights[..., 0, 0], torch.ones(1, 3))
    assert torch.allclose(weights.sum(-1), torch.ones(1, 3, 6))


def test_padding_mask_hides_padded_keys():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4) for _ in range(3))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    _, weights = scaled_dot_product_attention(q, k, v, padding_mask_bias(mask))
    assert (weights[1, :, :, 3:] == 0).all()
    assert torch.isfinite(weights).all()
    # the unpadded part equals attention over the 3 real tokens alone
    _, alone = scaled_dot_product_attention(q[1:, :, :3], k[1:, :, :3], v[1:, :, :3])
    assert torch.allclose(weights[1, :, :3, :3], alone[0], atol=1e-6)


def test_weights_written_into_given_buffer():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 4, 3) for _ in range(3))
    buffer = torch.zeros(3, 2, 4, 4)
    _, weights = scaled_dot_product_attention(q, k, v, weights_out=buffer[1].unsqueeze(0))
    assert torch.equal(buffer[1], weights[0]) and buffer[1].sum() > 0
    assert buffer[0].abs().sum() == 0


def test_fused_and_separate_projections_agree():
    torch.manual_seed(0)
    separate = MultiHeadAttention(12, 3, fused_qkv=False).eval()
    x = torch.randn(2, 5, 12)
    out_a, w_a = separate(x)
    fused = separate.fuse()
    out_b, w_b = fused(x)
    assert fused.fused_qkv
    assert torch.allclose(out_a, out_b, atol=1e-6) and torch.allclose(w_a, w_b, atol=1e-6)


def test_head_gate_zero_removes_exactly_that_heads_slice_of_w_o():
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3).eval()
    x = torch.randn(1, 5, 12)
    gates = torch.tensor([1.0, 0.0, 0.5])
    gated, weights = mha(x, head_mask=gates)
    # independent: scale head h's input columns of W_O by its gate
    with torch.no_grad():
        mha.out.weight[:, 4:8] *= 0.0
        mha.out.weight[:, 8:12] *= 0.5
    expected, weights_again = mha(x)
    assert torch.allclose(gated, expected, atol=1e-6)
    assert torch.equal(weights, weights_again)  # gates never touch the maps themselves


def test_mean_ablation_replaces_output_by_its_mean_over_positions():
    context = torch.randn(1, 2, 4, 3)
    out = gate_heads(context, torch.tensor([0.0, 1.0]), mode="mean")
    assert torch.allclose(out[0, 0], context[0, 0].mean(0).expand(4, 3))
    assert torch.equal(out[0, 1], context[0, 1])
    with pytest.raises(ValueError):
        gate_heads(context, torch.ones(2), mode="nope")


def test_head_count_must_divide_width():
    with pytest.raises(ValueError):
        MultiHeadAttention(10, 3)
