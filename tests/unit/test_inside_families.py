"""Inside one head shows the step each family takes (issue 39), on random checkpoints built by
transformers' own classes: Gemma 2's soft-cap (the scores before and after tanh) and its window
on alternate layers, Gemma 3's per-head QK-norm and its local and global layers with two RoPE
bases, OLMo 2's full-width QK-norm, Llama 3's and YaRN's rope scalings. Each against
transformers' eager model or a formula computed here with numpy; the text is longer than the
windows."""

import numpy as np
import pytest
import torch
from tests.support.family_configs import FAMILIES
from tests.support.hf_reference import capture_output
from tests.support.llama_parity import SHAPES, reference_model

from mha_viz import load_model
from mha_viz.analysis.one_head.steps import inside_one_head
from mha_viz.testing import make_decoder_checkpoint, make_llama_checkpoint
from mha_viz.ui.words.one_head import head_steps

TEXT = "Mary and John went to the store. John gave a drink to Mary, and she thanked him."
CASES = ["gemma2", "gemma3", "olmo2"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """case -> (our model, transformers' eager model, its attentions on TEXT [L, H, T, T])."""
    out = {}
    for case in [*CASES, "rope_llama3", "rope_yarn"]:
        folder = tmp_path_factory.mktemp(f"inside_{case}")
        if case in FAMILIES:
            config_class, model_class, config = FAMILIES[case]
            make_decoder_checkpoint(folder, config_class, model_class, **config)
        else:
            make_llama_checkpoint(folder, **SHAPES[case])
        model, ref = load_model(folder), reference_model(folder)
        ids = torch.tensor([model.encode(TEXT).input_ids])
        with torch.no_grad():
            attentions = torch.stack(ref(ids, output_attentions=True).attentions)[:, 0]
        out[case] = model, ref, attentions.numpy()
    return out


def step(inside, key):
    return {s.key: s for s in head_steps(inside)}[key]


def layer_types(ref) -> list[str]:
    return list(ref.config.layer_types)


@pytest.mark.parametrize("case", CASES)
def test_the_walk_is_the_traces_map_and_transformers_attentions(built, case):
    model, _, theirs = built[case]
    trace = model.trace(TEXT)
    assert trace.n_tokens > 2 * 5  # longer than the windows of 5
    for layer in range(model.info.n_layer):
        for head in (0, model.info.n_head - 1):
            inside = inside_one_head(model, TEXT, layer, head)
            np.testing.assert_allclose(inside.weights, trace.attentions[layer, head], atol=1e-6)
            np.testing.assert_allclose(inside.weights, theirs[layer, head], atol=1e-5)


def test_gemma2_scores_before_and_after_the_cap(built):
    """S = Q_rot K_rot^T / sqrt(query_pre_attn_scalar) (numpy here), then c tanh(S / c); the
    cap bends these scores, and the step says by how much with the real numbers."""
    model, ref, _ = built["gemma2"]
    cap, scale = ref.config.attn_logit_softcapping, ref.config.query_pre_attn_scalar ** -0.5
    for layer in range(model.info.n_layer):
        inside = inside_one_head(model, TEXT, layer, 1)
        raw = inside.Q_rot.astype(np.float64) @ inside.K_rot.astype(np.float64).T * scale
        np.testing.assert_allclose(inside.scores_before_cap, raw, atol=1e-5)
        np.testing.assert_allclose(inside.scores, cap * np.tanh(raw / cap), atol=1e-5)
        seen = np.isfinite(inside.masked_scores)
        assert np.abs(raw[seen]).max() > cap  # the cap bites: a score past it is pulled in
        changed = int((np.abs(cap * np.tanh(raw / cap) - raw) > 0.01 * np.abs(raw))[seen].sum())
        effect = inside.softcap_effect()
        assert (effect["seen"], effect["changed"]) == (int(seen.sum()), changed) and changed
        assert effect["largest_raw"] == pytest.approx(raw[seen].max(), abs=1e-5)
        keys = [s.key for s in head_steps(inside)]
        assert keys.index("scores_before_cap") + 1 == keys.index("scores")
        text = step(inside, "scores").explanation
        assert f"c = {cap:g}" in text and f"{effect['largest_raw']:.4g}" in text
        assert f"the cap changed {changed:,} (" in text and f"of the {int(seen.sum()):,}" in text
        followed = inside.followed_query(inside.n_tokens - 1)
        np.testing.assert_allclose(followed.table["score q·k × scale"],
                                   np.round(raw[-1], 4), atol=2e-4)


@pytest.mark.parametrize("case", ["gemma2", "gemma3"])
def test_the_mask_is_minus_infinity_exactly_in_the_band(built, case):
    """Local layers (transformers' layer_types) hide j > i and j <= i - window; global layers
    only j > i, and each says which it is."""
    model, ref, _ = built[case]
    window = ref.config.sliding_window
    for layer, kind in enumerate(layer_types(ref)):
        inside = inside_one_head(model, TEXT, layer, 0)
        n = inside.n_tokens
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        local = kind == "sliding_attention"
        hidden = (j > i) | (local & (j <= i - window))
        np.testing.assert_array_equal(np.isneginf(inside.mask), hidden)
        np.testing.assert_array_equal(np.isneginf(inside.masked_scores), hidden)
        text = step(inside, "masked_scores").explanation
        if local:
            assert f"Layer {layer} is a local layer with a sliding window of {window} " in text
            assert f"the window hides {int((j <= i - window).sum()):,} scores" in text
        else:
            assert f"Layer {layer} is a global layer" in text and "local layer" not in text


def test_gemma3_local_and_global_layers_turn_with_their_own_base(built):
    """The rotary step prints the base transformers' config gives the layer's type, and the
    global layer's linear scaling."""
    model, ref, _ = built["gemma3"]
    rope = ref.config.rope_parameters
    for layer, kind in enumerate(layer_types(ref)):
        text = step(inside_one_head(model, TEXT, layer, 0), "Q_rot").explanation
        assert f"(θ = {rope[kind]['rope_theta']:g})" in text
        scaled = f"scaled linearly by a factor {rope[kind].get('factor', 1):g}"
        assert (scaled in text) == (rope[kind]["rope_type"] == "linear")
        assert "Not every layer of this model turns alike" in text


@pytest.mark.parametrize("case, width", [("gemma3", "per head"), ("olmo2", "full width")])
def test_qk_norm_is_a_step_of_its_own(built, case, width):
    """Q_normed and K_normed are transformers' q_norm and k_norm outputs (OLMo 2: this head's
    slice of the norm over every head's width), a step between V and the rotation."""
    model, ref, _ = built[case]
    layer, head = 1, 3
    inside = inside_one_head(model, TEXT, layer, head)
    attention = ref.model.layers[layer].self_attn
    seen = {}
    handles = [capture_output(attention.q_norm, seen, "q"),
               capture_output(attention.k_norm, seen, "k")]
    with torch.no_grad():
        ref(torch.tensor([model.encode(TEXT).input_ids]))
    for handle in handles:
        handle.remove()
    dk, kv = inside.d_k, inside.kv_head
    for letter, index, ours in (("q", head, inside.Q_normed), ("k", kv, inside.K_normed)):
        theirs = seen[letter][0]
        # Gemma 3 normalizes [B, H, T, d_k]; OLMo 2 the projection itself, [B, T, H d_k]
        theirs = (theirs[index] if theirs.dim() == 3
                  else theirs[:, index * dk:(index + 1) * dk])
        np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-5)
    assert not np.allclose(inside.Q_normed, inside.Q, atol=1e-3)
    keys = [s.key for s in head_steps(inside)]
    assert keys.index("V") + 1 == keys.index("Q_normed") == keys.index("Q_rot") - 1
    text = step(inside, "Q_normed").explanation
    assert f"QK-norm, {width}" in text or f"QK-norm over the {width}" in text
    if case == "olmo2":
        assert (f"this head's slice of the normalized full-width Q, its columns {head * dk}–"
                f"{(head + 1) * dk - 1}") in text


def test_rope_scalings_are_named(built):
    """Llama 3's and YaRN's scalings in the rotary step, with transformers' config numbers
    and (YaRN) the attention factor its rotary module multiplies cos and sin by."""
    model, ref, _ = built["rope_llama3"]
    scaling = ref.config.rope_parameters
    text = step(inside_one_head(model, TEXT, 1, 0), "Q_rot").explanation
    assert (f"scaled as Llama 3 does (factor {scaling['factor']:g}, original context "
            f"{scaling['original_max_position_embeddings']:,}") in text
    model, ref, _ = built["rope_yarn"]
    text = step(inside_one_head(model, TEXT, 1, 0), "Q_rot").explanation
    assert "scaled by YaRN (factor 4, original context 64" in text
    assert f"cos and sin times {ref.model.rotary_emb.attention_scaling:.4g})" in text
