"""model.run_with_cache against transformers' own GPT-2 and Llama: every kept activation
equals the tensor transformers computes at the same place (forward hooks on its modules,
output_attentions for the patterns), in TransformerLens's layouts and names."""

import numpy as np
import pytest
import torch
from tests.support.hf_reference import ids_of

from mha_viz.core.errors import InputError

TEXT = "the cat sat on the mat and the dog ran"


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_cache_equals_transformers(patch_models, family):
    model, hf, where = patch_models[family]
    where = where(hf)
    ids = ids_of(model, TEXT)
    logits, cache = model.run_with_cache(TEXT, names=["resid_pre", "attn_out", "mlp_out",
                                                      "resid_post", "z", "q", "pattern",
                                                      "result", "scale"])
    assert cache.tokens == model.display_tokens(ids)
    seen = {}
    handles = []
    for layer in range(where.n_layer):
        handles.append(where.block(layer).register_forward_pre_hook(
            lambda m, a, layer=layer: seen.__setitem__(("pre", layer), a[0].detach().clone())))
        handles.append(where.attn(layer).register_forward_hook(
            lambda m, a, o, layer=layer: seen.__setitem__(("attn", layer), o[0].detach())))
        handles.append(where.mlp(layer).register_forward_hook(
            lambda m, a, o, layer=layer: seen.__setitem__(("mlp", layer), o.detach())))
        handles.append(where.out_proj(layer).register_forward_pre_hook(
            lambda m, a, layer=layer: seen.__setitem__(("z", layer), a[0].detach())))
        handles.append(where.qkv_module("q", layer).register_forward_hook(
            lambda m, a, o, layer=layer: seen.__setitem__(("q", layer), o.detach())))
    with torch.no_grad():
        out = hf(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    for handle in handles:
        handle.remove()
    assert np.abs(logits.numpy() - out.logits.numpy()).max() < 1e-4
    n = len(ids)
    for layer in range(where.n_layer):
        assert torch.allclose(cache["resid_pre", layer], seen[("pre", layer)], atol=1e-4)
        assert torch.allclose(cache[f"blocks.{layer}.hook_attn_out"], seen[("attn", layer)],
                              atol=1e-4)
        assert torch.allclose(cache["mlp_out", layer], seen[("mlp", layer)], atol=1e-4)
        z = seen[("z", layer)].view(1, n, where.n_head, where.dk)
        assert cache["z", layer].shape == (1, n, where.n_head, where.dk)
        assert torch.allclose(cache[f"blocks.{layer}.attn.hook_z"], z, atol=1e-4)
        q = seen[("q", layer)][..., :where.n_head * where.dk].view(1, n, where.n_head, where.dk)
        assert torch.allclose(cache["q", layer], q, atol=1e-4)
        assert torch.allclose(cache["pattern", layer], out.attentions[layer], atol=1e-5)
        # each head's result, summed with the bias, is the attention output
        bias = where.attn(layer).c_proj.bias if family == "gpt2" else 0.0
        assert torch.allclose(cache["result", layer].sum(2) + bias, seen[("attn", layer)],
                              atol=1e-4)
    # the last layer's output before the final norm, and the norm's scale
    final = cache["resid_post", where.n_layer - 1]
    centred = final - final.mean(-1, keepdim=True) if family == "gpt2" else final
    assert torch.allclose(cache["scale"], centred.pow(2).mean(-1, keepdim=True).add(
        1e-5 if family == "gpt2" else hf.config.rms_norm_eps).sqrt(), atol=1e-5)
    assert "ln_final.hook_scale" in cache and "blocks.0.attn.hook_k" not in cache


def test_cache_keys_names_and_grouped_kv(patch_models):
    model, _, _ = patch_models["llama"]
    _, cache = model.run_with_cache(TEXT)
    info = model.info
    assert cache["k", 0].shape[2] == info.n_kv_head  # the model's own key/value heads
    _, ungrouped = model.run_with_cache(TEXT, names=["k"], ungroup_kv=True)
    k = ungrouped["blocks.0.attn.hook_k"]
    assert k.shape[2] == info.n_head
    for head, group in enumerate(info.kv_heads):
        assert torch.equal(k[:, :, head], cache["k", 0][:, :, group])
    assert set(cache) >= {"blocks.0.hook_resid_pre", "blocks.2.attn.hook_pattern"}
    with pytest.raises(KeyError, match="not kept"):
        ungrouped["z", 0]
    with pytest.raises(InputError, match="unknown activation"):
        model.run_with_cache(TEXT, names=["attention"])
    with pytest.raises(InputError, match="would take"):
        model.run_with_cache(TEXT, max_bytes=1000)


def test_rotated_queries_and_keys(patch_models):
    """rot_q / rot_k are q / k after the rotary positions: equal to them at position 0
    (no rotation) and equal to transformers' own rotation of them."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model, hf, _ = patch_models["llama"]
    ids = ids_of(model, TEXT)
    _, cache = model.run_with_cache(TEXT, names=["q", "k", "rot_q", "rot_k"])
    position_ids = torch.arange(len(ids))[None]
    cos, sin = hf.model.rotary_emb(torch.zeros(1), position_ids)
    for layer in range(model.info.n_layer):
        q, k = cache["q", layer].transpose(1, 2), cache["k", layer].transpose(1, 2)
        rot_q, rot_k = apply_rotary_pos_emb(q, k, cos, sin)
        assert torch.allclose(cache["blocks.%d.attn.hook_rot_q" % layer],
                              rot_q.transpose(1, 2), atol=1e-5)
        assert torch.allclose(cache["rot_k", layer], rot_k.transpose(1, 2), atol=1e-5)
        assert torch.equal(cache["rot_q", layer][:, 0], cache["q", layer][:, 0])
