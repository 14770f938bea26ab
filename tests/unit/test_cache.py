"""model.run_with_cache against transformers' own GPT-2 and Llama: every kept activation
equals the tensor transformers computes at the same place (forward hooks on its modules,
output_attentions for the patterns), in TransformerLens's layouts and names."""

import numpy as np
import pytest
import torch
from tests.support.hf_reference import ids_of

from mha_viz.core.errors import InputError
from mha_viz.engine.interventions import Interventions, run_with_hooks

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


@pytest.mark.parametrize("family", ["gpt2", "llama", "gemma2"])
def test_scores_are_what_transformers_softmax_reads(patch_models, family, monkeypatch):
    """The scores point holds, at every layer, the numbers transformers' own eager attention
    hands its softmax (scaled, soft-capped for Gemma 2, masked causally and by Gemma 2's window),
    read by wrapping torch's softmax during its forward: equal where a key is seen, -inf where
    it is hidden (transformers adds its dtype's lowest there); and the pattern is their
    softmax. A replaced score changes the pattern as the softmax of the new scores."""
    model, hf, _ = patch_models[family]
    ids = ids_of(model, TEXT)
    read = []
    softmax = torch.nn.functional.softmax

    def reading(scores, *args, **kwargs):
        read.append(scores.detach().clone())
        return softmax(scores, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "softmax", reading)
    with torch.no_grad():
        out = hf(torch.tensor([ids]), output_attentions=True)
    monkeypatch.undo()
    n_layer = model.info.n_layer
    assert len(read) == n_layer  # one softmax a layer, in order
    _, cache = model.run_with_cache(TEXT, names=["scores", "pattern"])
    for layer in range(n_layer):
        ours, theirs = cache["scores", layer], read[layer].float()
        assert ours.shape == theirs.shape == out.attentions[layer].shape
        seen = theirs > torch.finfo(theirs.dtype).min / 2
        assert 0 < int(seen.sum()) < seen.numel()  # some keys hidden: the causal mask
        assert torch.allclose(ours[seen], theirs[seen], atol=1e-4)
        assert torch.isneginf(ours[~seen]).all()
        assert torch.allclose(cache[f"blocks.{layer}.attn.hook_attn_scores"].softmax(-1),
                              out.attentions[layer], atol=1e-5)
    if family == "gemma2":  # its window hides more keys on layer 0 than the causal mask does
        assert int((read[0] > -1e30).sum()) < int((read[1] > -1e30).sum())
    raised = torch.zeros_like(cache["scores", 1])
    raised[..., 0] = 3.0  # every row's first key: seen by every query
    changed = Interventions(capture=["pattern"]).apply("scores", 1,
                                                       lambda scores: scores + raised)
    with torch.inference_mode():
        run_with_hooks(model.network, torch.tensor([ids]), changed)
    assert torch.allclose(changed.captured["pattern", 1],
                          (cache["scores", 1] + raised).softmax(-1), atol=1e-6)
    assert torch.equal(changed.captured["pattern", 0], cache["pattern", 0])
