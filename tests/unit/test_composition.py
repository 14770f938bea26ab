"""Composition between heads (issue 48): in the weights, Elhage et al.'s Q-, K- and
V-composition scores written here in numpy from the checkpoint's tensors (GPT-2, Llama with
grouped-query attention, Qwen3 with QK-norm); on a text, each source's share as
docs/analyses.md defines it, computed here in numpy from transformers' GPT-2 (its weights,
activations read with forward hooks, and its attention weights); and on the bundled induction
toy, the textbook case measured from transformers' GPT-NeoX attentions: the induction head's
scores at its targets come mostly through the key that the previous-token head wrote, and
that K-composition rises while the induction score rises."""

import numpy as np
import pytest
import torch
from tests.support.hf_reference import capture_input, capture_output, hooked
from safetensors.numpy import load_file
from tests.support.family_configs import FAMILIES

from mha_viz import InputError, checkpoint_series, load_model
from mha_viz.analysis import (composition_over_training, composition_scores,
                              score_attribution)
from mha_viz.testing import make_decoder_checkpoint, make_llama_checkpoint

TEXT = "the cat sat on the mat and the dog ran to the tree"


# --- in the weights ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def weight_cases(gpt2_folder, tmp_path_factory):
    """case -> checkpoint folder."""
    config_class, model_class, config = FAMILIES["qwen3"]
    return {"gpt2": gpt2_folder,
            "llama": make_llama_checkpoint(tmp_path_factory.mktemp("comp_llama"), n_layer=3,
                                           n_head=6, n_kv_head=2, d_model=96),
            "qwen3": make_decoder_checkpoint(tmp_path_factory.mktemp("comp_qwen3"),
                                             config_class, model_class, **config)}


def head_weights(case, tensors, config, layer, head):
    """(W_Q [d_k, d], W_K, W_V [d_k, d], W_O [d, d_k]) of one head from the checkpoint's
    tensors, the weight of the norm before the attention (and Qwen3's QK-norm) folded in,
    as docs/analyses.md says the scores read them."""
    if case == "gpt2":
        d = config["n_embd"]
        d_k, prefix = d // config["n_head"], f"transformer.h.{layer}."
        qkv = tensors[prefix + "attn.c_attn.weight"]  # x @ W: [d, 3d]
        cols = lambda offset: slice(offset + head * d_k, offset + (head + 1) * d_k)  # noqa: E731
        w_q, w_k, w_v = (qkv[:, cols(o)].T for o in (0, d, 2 * d))
        w_o = tensors[prefix + "attn.c_proj.weight"][cols(0)].T
        gamma = tensors[prefix + "ln_1.weight"]
        return w_q * gamma, w_k * gamma, w_v * gamma, w_o
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    d_k = config.get("head_dim") or config["hidden_size"] // n_head
    kv = head // (n_head // n_kv)
    prefix = f"model.layers.{layer}."
    rows = lambda h: slice(h * d_k, (h + 1) * d_k)  # noqa: E731
    w_q = tensors[prefix + "self_attn.q_proj.weight"][rows(head)]
    w_k = tensors[prefix + "self_attn.k_proj.weight"][rows(kv)]
    w_v = tensors[prefix + "self_attn.v_proj.weight"][rows(kv)]
    w_o = tensors[prefix + "self_attn.o_proj.weight"][:, rows(head)]
    gamma = tensors[prefix + "input_layernorm.weight"]
    w_q, w_k, w_v = (w * gamma for w in (w_q, w_k, w_v))
    if case == "qwen3":
        w_q = tensors[prefix + "self_attn.q_norm.weight"][:, None] * w_q
        w_k = tensors[prefix + "self_attn.k_norm.weight"][:, None] * w_k
    return w_q, w_k, w_v, w_o


def elhage_scores(case, folder):
    """{"q", "k", "v": [L, H, L, H]} with W_QK = W_Q^T W_K and W_OV = W_O W_V (d x d):
    ||W_QK^T W_OV|| (Q), ||W_QK W_OV|| (K), ||W_OV^h W_OV^g|| (V), each over the product of
    the two matrices' norms (Frobenius), receiving head first."""
    import json

    tensors = {k: v.astype(np.float64) for k, v in
               load_file(str(folder / "model.safetensors")).items()}
    config = json.loads((folder / "config.json").read_text())
    n_layer = config.get("n_layer") or config["num_hidden_layers"]
    n_head = config.get("n_head") or config["num_attention_heads"]
    qk, ov = {}, {}
    for layer in range(n_layer):
        for head in range(n_head):
            w_q, w_k, w_v, w_o = head_weights(case, tensors, config, layer, head)
            qk[layer, head], ov[layer, head] = w_q.T @ w_k, w_o @ w_v
    norm = np.linalg.norm
    out = {kind: np.full((n_layer, n_head, n_layer, n_head), np.nan) for kind in "qkv"}
    for (layer, head), w_qk in qk.items():
        for (sender, other), w_ov in ov.items():
            if sender >= layer:
                continue
            both = norm(w_qk) * norm(w_ov)
            out["q"][layer, head, sender, other] = norm(w_qk.T @ w_ov) / both
            out["k"][layer, head, sender, other] = norm(w_qk @ w_ov) / both
            out["v"][layer, head, sender, other] = norm(ov[layer, head] @ w_ov) / (
                norm(ov[layer, head]) * norm(w_ov))
    return out


@pytest.mark.parametrize("case", ["gpt2", "llama", "qwen3"])
def test_weight_composition_is_elhages_formula(weight_cases, case):
    folder = weight_cases[case]
    model = load_model(folder)
    found = composition_scores(model)
    expected = elhage_scores(case, folder)
    for kind in "qkv":
        np.testing.assert_allclose(found.of(kind), expected[kind], rtol=1e-6, atol=1e-9)
    one = composition_scores(model, layer=1, head=2)
    np.testing.assert_allclose(one.k, expected["k"][1, 2], rtol=1e-6, atol=1e-9)
    assert np.isnan(one.k[1:]).all() and found.kind == "weights"


def test_the_baseline_is_random_heads_composing(weight_cases):
    """The baseline against the mean K-composition of 400 pairs of random Gaussian heads of
    the model's shapes, drawn here."""
    found = composition_scores(load_model(weight_cases["gpt2"]))
    rng = np.random.default_rng(0)
    d, d_k = 64, 16
    scores = []
    for _ in range(400):
        w_q, w_k, w_v, v2 = (rng.standard_normal((d_k, d)) for _ in range(4))
        w_o, o2 = rng.standard_normal((d, d_k)), rng.standard_normal((d, d_k))
        w_qk, w_ov = w_q.T @ w_k, o2 @ v2
        scores.append(np.linalg.norm(w_qk @ w_ov) / (np.linalg.norm(w_qk)
                                                     * np.linalg.norm(w_ov)))
    assert abs(found.baseline - np.mean(scores)) < 0.1 * np.mean(scores)


# --- on a text ---------------------------------------------------------------------------


def centred_mass(contributions, weights, seen):
    """sum_ij a_ij |c(i, j) - mean over the keys i sees of c(i, .)| for each source."""
    rows = np.where(seen, contributions, 0).sum(-1, keepdims=True) / seen.sum(-1, keepdims=True)
    return (weights * np.abs(contributions - rows) * seen).sum((-1, -2))


def test_text_composition_follows_its_definition(patch_models):
    """GPT-2, layer 1, head 2: every source of the stream entering layer 1 (the embeddings,
    L0's heads through their W_O slices, L0's MLP, the biases) from transformers' own
    activations, through ln_1 frozen, W_Q, W_K, W_V; shares as docs/analyses.md defines them."""
    model, hf, _ = patch_models["gpt2"]
    layer, head = 1, 2
    ids = model.encode(TEXT).input_ids
    n = len(ids)
    blocks = hf.transformer.h
    store = {}
    with torch.no_grad(), hooked([capture_input(blocks[0].attn.c_proj, store, "z"),
                                  capture_output(blocks[0].mlp, store, "mlp"),
                                  capture_input(blocks[1].ln_1, store, "stream")]):
        attentions = hf(torch.tensor([ids]), output_attentions=True).attentions
    got = {k: v[0].double().numpy() for k, v in store.items()}
    weights = attentions[layer][0, head].double().numpy()
    tensor = {name: p.detach().double().numpy() for name, p in hf.named_parameters()}
    d = hf.config.n_embd
    d_k = d // hf.config.n_head
    cols = lambda h, offset=0: slice(offset + h * d_k, offset + (h + 1) * d_k)  # noqa: E731
    w_proj = tensor["transformer.h.0.attn.c_proj.weight"]
    sources = [tensor["transformer.wte.weight"][ids], tensor["transformer.wpe.weight"][:n]]
    sources += [got["z"][:, cols(h)] @ w_proj[cols(h)] for h in range(hf.config.n_head)]
    sources += [got["mlp"], np.broadcast_to(tensor["transformer.h.0.attn.c_proj.bias"], (n, d))]
    sources = np.stack(sources)  # [embed, pos, L0.H0..3, L0.mlp, bias]
    np.testing.assert_allclose(sources.sum(0), got["stream"], atol=1e-4)
    stream = got["stream"]
    sigma = np.sqrt(stream.var(-1, keepdims=True) + hf.config.layer_norm_epsilon)
    normed = tensor["transformer.h.1.ln_1.weight"] * (
        sources - sources.mean(-1, keepdims=True)) / sigma
    normed[-1] += tensor["transformer.h.1.ln_1.bias"]
    qkv_w = tensor["transformer.h.1.attn.c_attn.weight"]
    qkv_b = tensor["transformer.h.1.attn.c_attn.bias"]
    q, k, v = (normed @ qkv_w[:, cols(head, o)] for o in (0, d, 2 * d))
    for part, o in ((q, 0), (k, d), (v, 2 * d)):
        part[-1] += qkv_b[cols(head, o)]
    scale = d_k ** -0.5
    seen = np.tril(np.ones((n, n), dtype=bool))
    by_query = scale * np.einsum("sik,jk->sij", q, k.sum(0))
    by_key = scale * np.einsum("ik,sjk->sij", q.sum(0), k)
    w_o = tensor["transformer.h.1.attn.c_proj.weight"][cols(head)]  # [d_k, d]
    written = np.einsum("ij,sjk,kd->sid", weights, v, w_o)
    expected = {"q": centred_mass(by_query, weights, seen),
                "k": centred_mass(by_key, weights, seen),
                "v": np.linalg.norm(written, axis=-1).sum(-1)}
    found = composition_scores(model, TEXT, layer, head)
    assert found.kind == "text" and np.isnan(found.q[1:]).all()
    for kind, mass in expected.items():
        share = mass / mass.sum()
        np.testing.assert_allclose(found.of(kind)[0], share[2:6], atol=1e-7)
        others = [found.other[kind][name] for name in ("embed", "pos_embed", "L0.mlp", "bias")]
        np.testing.assert_allclose(others, share[[0, 1, 6, 7]], atol=1e-7)
        assert abs(found.of(kind)[0].sum() + sum(others) - 1) < 1e-9


def test_composition_asks_for_what_it_needs(patch_models):
    model = patch_models["gpt2"][0]
    with pytest.raises(InputError, match="give its layer and head"):
        composition_scores(model, TEXT)
    with pytest.raises(InputError, match="both a layer and a head"):
        composition_scores(model, layer=1)
    with pytest.raises(InputError, match="one of q, k, v"):
        composition_scores(model, layer=1, head=0).of("o")


# --- the bundled induction toy -----------------------------------------------------------

SEQ_LEN = 31  # BOS R R fills 63 of the toy's 64 positions


@pytest.fixture(scope="module")
def induction_run():
    """The series, a BOS R R input (R: 31 distinct characters drawn here, never BOS or the
    unknown token), and for every checkpoint transformers' GPT-NeoX attentions on it:
    layer 0's previous-token scores [S, H] and layer 1's induction scores [S, H], from their
    definitions (A[i, i - 1] over i >= 1; A[1 + s + k, 2 + k] over k < s - 1); and the last
    checkpoint's layer-1 maps [H, T, T]."""
    from transformers import GPTNeoXForCausalLM

    series = checkpoint_series("induction-toy")
    rng = np.random.default_rng(7)
    repeated = [int(t) for t in rng.choice(np.arange(2, 66), SEQ_LEN, replace=False)]
    ids = [0] + repeated + repeated
    previous, induction = [], []
    for checkpoint in series.checkpoints:
        hf = GPTNeoXForCausalLM.from_pretrained(str(checkpoint.folder()), dtype=torch.float32,
                                                attn_implementation="eager").eval()
        with torch.no_grad():
            maps = [a[0].numpy() for a in hf(torch.tensor([ids]), output_attentions=True)
                    .attentions]
        previous.append([np.mean([maps[0][h, i, i - 1] for i in range(1, len(ids))])
                         for h in range(maps[0].shape[0])])
        induction.append([np.mean([maps[1][h, 1 + SEQ_LEN + k, 2 + k]
                                   for k in range(SEQ_LEN - 1)]) for h in range(maps[1].shape[0])])
    return series, ids, np.array(previous), np.array(induction), maps[1]


def test_the_induction_head_reads_the_previous_token_heads_key(induction_run):
    """At the last checkpoint, over the induction head's targets (query 1 + s + k, key
    2 + k), the key-side source with the largest mean share of the score is the layer-0 head
    with the highest previous-token score."""
    series, ids, previous, induction, maps = induction_run
    previous_head, induction_head = int(previous[-1].argmax()), int(induction[-1].argmax())
    assert previous[-1, previous_head] > 0.3 and induction[-1, induction_head] > 0.5
    model = load_model(series.checkpoints[-1].folder())
    sides = []
    for k in range(SEQ_LEN - 1):
        query, key = 1 + SEQ_LEN + k, 2 + k
        found = score_attribution(model, ids, 1, induction_head, query)
        sides.append(found.key_side(key))
        # the terms are the scores: their differences are those of transformers' log weights
        summed, logs = found.terms.sum((0, 1))[:query + 1], np.log(maps[induction_head, query,
                                                                       :query + 1])
        np.testing.assert_allclose(summed - summed.mean(), logs - logs.mean(), atol=1e-3)
    mean = np.mean(sides, axis=0)
    assert found.key_sources[int(mean.argmax())] == f"L0.H{previous_head}", (
        dict(zip(found.key_sources, mean.round(2))))
    assert mean.max() > 5  # several nats of score: the head's reason to look there


def test_k_composition_rises_with_the_induction_score(induction_run):
    """composition_over_training: the induction head's K-composition with the previous-token
    head rises over the window of checkpoints in which its induction score rises (from the
    last checkpoint under 10% of its rise to the first past 90%), and ends the largest of
    layer 0's."""
    series, ids, previous, induction, _ = induction_run
    previous_head, induction_head = int(previous[-1].argmax()), int(induction[-1].argmax())
    curve = induction[:, induction_head]
    rise = curve.max() - curve[0]
    start = int(np.flatnonzero(curve < curve[0] + 0.1 * rise).max())
    stop = int(np.flatnonzero(curve >= curve[0] + 0.9 * rise).min())
    assert 1 <= stop - start <= 6  # a window of a few checkpoints (one, when the change is sharp)
    found = composition_over_training(series, 1, induction_head, ids=ids)
    assert found.steps.tolist() == series.steps and found.k.shape == (len(series), 2, 4)
    share = found.share("k", 0, previous_head)
    window = share[start:stop + 1]
    assert window[-1] - window[0] > 0.15, window
    assert (np.diff(window) > -0.01).all(), window
    assert found.k[-1, 0].argmax() == previous_head


def test_composition_over_training_reads_a_text_once_tokenized(induction_run):
    """A text is tokenized as transformers' tokenizer of the first checkpoint does; at each
    step every layer-0 head has a share, together less than 1 (the embeddings and the bias
    take the rest)."""
    from transformers import AutoTokenizer

    series = induction_run[0]
    folders = [c.folder() for c in series.checkpoints[-2:]]
    text = "Return the value of the named attribute."
    found = composition_over_training(folders, 1, 0, ids=text)
    assert found.ids == AutoTokenizer.from_pretrained(str(folders[0]))(text)["input_ids"]
    assert found.steps.tolist() == series.steps[-2:] and text in found.input
    assert (found.k[:, 0].sum(-1) < 1).all() and (found.k[:, 0] > 0).all()
