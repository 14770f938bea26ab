"""The gradient step of Inside one head (issue 28): dL/dW_Q and dL/dW_O of one head equal
autograd through transformers' own GPT-2 and Llama (grouped-query, RoPE) on the same weights
and the same token ids, for the next-token loss; and equal the chain rule's formulas
X^T dL/dQ and C^T dL/dY with the engine's own activations, for both losses."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_viz import InputError, load_model
from mha_viz.analysis.one_head.gradients import head_gradients, losses_for
from mha_viz.ui.words.one_head import layout_step

TEXT = "The cat sat on the mat because it was warm, and the dog slept by the door."


def reference_grads(folder, ids, layer, head, family):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    ids = torch.tensor([ids])
    loss = hf(input_ids=ids, labels=ids).loss
    if family == "gpt2":
        block = hf.transformer.h[layer].attn
        dk = block.head_dim
        d_attn, d_proj = torch.autograd.grad(loss, [block.c_attn.weight, block.c_proj.weight])
        cols = slice(head * dk, (head + 1) * dk)  # Conv1D: x @ W, the query columns first
        return float(loss.detach()), d_attn[:, cols].numpy(), d_proj[cols].numpy()
    attn = hf.model.layers[layer].self_attn
    dk = attn.head_dim
    d_q, d_o = torch.autograd.grad(loss, [attn.q_proj.weight, attn.o_proj.weight])
    rows = slice(head * dk, (head + 1) * dk)
    return float(loss.detach()), d_q[rows].T.numpy(), d_o[:, rows].T.numpy()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_gradients_equal_autograd_through_transformers(family, gpt2_folder, tmp_path):
    from mha_viz.testing import make_llama_checkpoint

    folder = gpt2_folder if family == "gpt2" else make_llama_checkpoint(
        tmp_path, n_layer=2, n_head=4, n_kv_head=2, d_model=64)
    model = load_model(str(folder))
    assert losses_for(model) == ("next_token", "output_norm")
    ids = model.encode(TEXT).input_ids
    for layer, head in ((0, 1), (1, 3)):
        found = head_gradients(model, TEXT, layer, head)
        loss, d_w_q, d_w_o = reference_grads(folder, ids, layer, head, family)
        assert found.loss == pytest.approx(loss, abs=1e-4)
        scale_q, scale_o = np.abs(d_w_q).max(), np.abs(d_w_o).max()
        assert scale_q > 1e-6 and scale_o > 1e-6
        np.testing.assert_allclose(found.d_W_Q, d_w_q, atol=1e-4 * scale_q + 1e-7)
        np.testing.assert_allclose(found.d_W_O, d_w_o, atol=1e-4 * scale_o + 1e-7)
        assert found.largest_difference <= 1e-5 * max(scale_q, scale_o)  # the formulas


def test_the_output_norm_loss_on_bert_and_bad_input(bert_model, gpt2_model):
    assert losses_for(bert_model) == ("output_norm",)
    found = head_gradients(bert_model, TEXT, 1, 2, "output_norm")
    np.testing.assert_allclose(found.d_W_Q, found.d_W_Q_formula,
                               atol=1e-5 * np.abs(found.d_W_Q).max())
    np.testing.assert_allclose(found.d_W_O, found.d_W_O_formula,
                               atol=1e-5 * np.abs(found.d_W_O).max())
    assert found.loss == pytest.approx(0.5 * float((found.d_Y ** 2).sum()), rel=1e-5)  # dL/dY = Y
    with pytest.raises(InputError, match="offers the loss output_norm"):
        head_gradients(bert_model, TEXT, 1, 2, "next_token")
    with pytest.raises(InputError, match="layer must be"):
        head_gradients(gpt2_model, TEXT, 5, 0)
    with pytest.raises(InputError, match="encoder-decoder"):
        head_gradients(load_model("t5-toy"), "red car", 0, 0, "output_norm")


def test_the_projection_step_names_the_checkpoints_matrices_and_runs_the_einsum(gpt2_folder,
                                                                              gpt2_model):
    """GPT-2 keeps W_Q, W_K, W_V fused in c_attn: this head's W_Q is the columns the step
    names (taken from transformers' own c_attn), and the einsum of the index notation gives
    the step's Q."""
    from transformers import AutoModelForCausalLM

    from mha_viz.analysis.one_head.steps import inside_one_head

    inside = inside_one_head(gpt2_model, TEXT, 1, 2)
    text = layout_step(inside).explanation
    assert "one matrix, c_attn (64 × 192)" in text and "columns 32–47" in text
    assert "(batch, heads, seq, d_k) = (1, 4, " in text
    assert inside.einsum_difference < 1e-5
    hf = AutoModelForCausalLM.from_pretrained(str(gpt2_folder))
    c_attn = hf.transformer.h[1].attn.c_attn.weight.detach().numpy()  # Conv1D: [d, 3d]
    np.testing.assert_allclose(inside.W_Q, c_attn[:, 32:48], atol=1e-7)
