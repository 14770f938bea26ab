"""attention.py step by step against independent formulas."""

import math

import pytest
import torch

from mha_viz.engine.attention import (MultiHeadAttention, causal_mask_bias, combine_heads,
                                      gate_heads, padding_mask_bias, scaled_dot_product_attention,
                                      split_heads)


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
    fused = MultiHeadAttention(12, 3, fused_qkv=True).eval()
    with torch.no_grad():  # one [3d, d] matrix: W_Q, W_K, W_V stacked, as loading fuses them
        fused.qkv.weight.copy_(torch.cat([separate.query.weight, separate.key.weight,
                                          separate.value.weight]))
        fused.qkv.bias.copy_(torch.cat([separate.query.bias, separate.key.bias,
                                        separate.value.bias]))
        fused.out.load_state_dict(separate.out.state_dict())
    out_b, w_b = fused(x)
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


# --- grouped-query attention and rotary positions ---------------------------------------------


@pytest.mark.parametrize("n_head,n_kv", [(6, 6), (6, 2), (6, 1), (9, 3)])
def test_grouped_query_attention_equals_repeating_keys_and_values(n_head, n_kv):
    """Every query head keeps its own map; query head h reads key/value head h // (H / H_kv),
    as if K and V were repeated for each query head (transformers' repeat_kv)."""
    from mha_viz.engine.attention import kv_head_of

    torch.manual_seed(0)
    q = torch.randn(2, n_head, 7, 4, dtype=torch.float64)
    k, v = (torch.randn(2, n_kv, 7, 4, dtype=torch.float64) for _ in range(2))
    context, weights = scaled_dot_product_attention(q, k, v, causal_mask_bias(7, torch.float64))
    owner = kv_head_of(n_head, n_kv)
    assert owner == [h * n_kv // n_head for h in range(n_head)]
    k_rep, v_rep = k[:, owner], v[:, owner]
    scores = q @ k_rep.transpose(-1, -2) / 2.0 + causal_mask_bias(7, torch.float64)
    expected = torch.softmax(scores, -1)
    assert weights.shape == (2, n_head, 7, 7)
    assert torch.allclose(weights, expected) and torch.allclose(context, expected @ v_rep)


def test_rotary_rotates_each_pair_by_its_positions_angle():
    """Independent formula: dimensions (j, j + r/2) form a complex number rotated by
    position * theta^(-2j / r)."""
    from mha_viz.engine.positions import apply_rotary, rotary_tables

    torch.manual_seed(0)
    length, dim, theta = 6, 8, 100.0
    x = torch.randn(1, 2, length, dim)
    cos, sin = rotary_tables(length, dim, theta)
    rotated = apply_rotary(x, cos, sin)
    half = dim // 2
    z = torch.complex(x[..., :half].double(), x[..., half:].double())
    freqs = theta ** (-torch.arange(half, dtype=torch.float64) * 2 / dim)
    angle = torch.arange(length, dtype=torch.float64)[:, None] * freqs[None, :]
    expected = z * torch.polar(torch.ones_like(angle), angle)
    assert torch.allclose(rotated[..., :half].double(), expected.real, atol=1e-5)
    assert torch.allclose(rotated[..., half:].double(), expected.imag, atol=1e-5)
    assert torch.allclose(rotated[:, :, 0], x[:, :, 0])  # position 0 does not turn


def test_rotary_scores_depend_on_relative_position_only():
    from mha_viz.engine.positions import apply_rotary, rotary_tables

    torch.manual_seed(1)
    q, k = torch.randn(4), torch.randn(4)
    cos, sin = rotary_tables(12, 4, 10000.0)
    qs = apply_rotary(q.expand(1, 1, 12, 4), cos, sin)[0, 0]
    ks = apply_rotary(k.expand(1, 1, 12, 4), cos, sin)[0, 0]
    assert torch.allclose(qs[5] @ ks[3], qs[9] @ ks[7], atol=1e-5)  # both i - j = 2
    assert not torch.allclose(qs[5] @ ks[3], qs[5] @ ks[4], atol=1e-3)


def test_partial_rotary_leaves_the_other_dimensions_alone():
    from mha_viz.engine.positions import apply_rotary, rotary_tables

    torch.manual_seed(2)
    x = torch.randn(1, 1, 5, 8)
    cos, sin = rotary_tables(5, 4, 10000.0)
    rotated = apply_rotary(x, cos, sin)
    assert torch.equal(rotated[..., 4:], x[..., 4:])
    assert torch.allclose(rotated[..., :4], apply_rotary(x[..., :4], cos, sin))
    assert not torch.allclose(rotated[..., :4], x[..., :4])
