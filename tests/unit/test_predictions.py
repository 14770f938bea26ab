"""Predictions, target metrics and direct logit attribution, against transformers' logits and
against independent computations hooked out of our own engine."""

import numpy as np
import pytest
import torch

from mha_viz import InputError, TargetMetric, load_model
from mha_viz.analysis import (ablation_effects, attribute_run, direct_logit_attribution,
                              gradient_importance)

TEXT = "Mary and John went to the store. John gave a drink to"


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    from mha_viz.testing import make_llama_checkpoint
    return make_llama_checkpoint(tmp_path_factory.mktemp("llama_pred"), n_layer=2, n_head=6,
                                 n_kv_head=2, d_model=48, tie_word_embeddings=False)


def reference_logits(folder, model, text):
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    encoded = model.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        return ref(**encoded).logits[0].double()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_predict_matches_transformers(family, gpt2_folder, llama_folder):
    folder = gpt2_folder if family == "gpt2" else llama_folder
    model = load_model(folder)
    logits = reference_logits(folder, model, TEXT)
    probs = torch.softmax(logits, -1)
    pred = model.predict(TEXT, k=5)
    n = len(pred.token_ids)
    assert pred.top_ids.shape == (n, 5) and pred.top_probs.shape == (n, 5)
    expected = probs.topk(5, dim=-1)
    assert np.array_equal(pred.top_ids, expected.indices.numpy())
    assert np.abs(pred.top_probs - expected.values.numpy()).max() < 1e-5
    ids = torch.tensor(pred.token_ids)
    next_logprob = torch.log_softmax(logits, -1)[:-1].gather(1, ids[1:, None])[:, 0]
    assert pred.next_logprob.shape == (n - 1,)
    assert np.abs(pred.next_logprob - next_logprob.numpy()).max() < 1e-4
    # its mean loss is the model's score
    assert abs(pred.loss.mean() - model.score(TEXT)) < 1e-4
    assert pred.top_tokens[0] == model.display_tokens(pred.top_ids[0].tolist())


def test_bert_predicts_the_fillers_of_masked_positions(bert_folder):
    from transformers import AutoModelForMaskedLM

    model = load_model(bert_folder)
    text = "The cat sat on the mat."
    pred = model.predict(text, k=3, masked_positions=[2, 4])
    assert pred.kind == "masked" and list(pred.positions) == [2, 4]
    encoded = model.tokenizer(text, return_tensors="pt")
    encoded["input_ids"][0, [2, 4]] = model.tokenizer.mask_token_id
    ref = AutoModelForMaskedLM.from_pretrained(str(bert_folder), attn_implementation="eager")
    with torch.no_grad():
        probs = torch.softmax(ref.eval()(**encoded).logits[0, [2, 4]], -1)
    top = probs.topk(3, dim=-1)
    assert np.array_equal(pred.top_ids, top.indices.numpy())
    assert np.abs(pred.top_probs - top.values.numpy()).max() < 1e-5
    with pytest.raises(InputError, match="positions to mask"):
        model.predict(text)
    with pytest.raises(InputError, match="ordinary tokens"):
        model.predict(text, masked_positions=[0])


def test_encoders_without_lm_head_say_so(minilm):
    with pytest.raises(InputError, match="no language-model head"):
        minilm.predict("hello")
    with pytest.raises(InputError, match="no language-model head"):
        minilm.score("hello", metric=TargetMetric(1, "the", kind="logit"))


def test_target_metrics_read_the_logits(llama_folder):
    model = load_model(llama_folder)
    logits = torch.from_numpy(model.logits(TEXT)).double()
    target, contrast = model.token_id(" Mary"), model.token_id(" John")
    for kind, expected in (
            ("logit", logits[-1, target]),
            ("logit_diff", logits[-1, target] - logits[-1, contrast]),
            ("logprob", torch.log_softmax(logits[-1], -1)[target])):
        value = model.score(TEXT, metric=TargetMetric(-1, " Mary", " John", kind))
        assert abs(value - float(expected)) < 1e-4, kind
    with pytest.raises(InputError, match="single token"):
        model.token_id(" Maryland and more")
    with pytest.raises(InputError, match="contrast"):
        model.score(TEXT, metric=TargetMetric(-1, " Mary"))
    with pytest.raises(InputError, match="outside"):
        model.score(TEXT, metric=TargetMetric(99, " Mary", kind="logit"))


def test_ablation_and_gradients_use_the_target_metric(llama_folder):
    model = load_model(llama_folder)
    metric = TargetMetric(-1, " Mary", " John")
    effects = ablation_effects(model, TEXT, metric=metric)
    base = model.score(TEXT, metric=metric)
    mask = np.ones((2, 6), dtype=np.float32)
    mask[1, 4] = 0
    assert abs(effects[1, 4] - (model.score(TEXT, head_mask=mask, metric=metric) - base)) < 1e-4
    grads = gradient_importance(model, TEXT, metric=metric)
    mask = np.ones((2, 6), dtype=np.float32)
    mask[0, 1] = 1 - 1e-3
    slope = (base - model.score(TEXT, head_mask=mask, metric=metric)) / 1e-3
    assert abs(abs(slope) - grads[0, 1]) < 2e-2 * max(1.0, grads[0, 1])


def independent_head_terms(model, text, position, target, contrast):
    """Each head's direct term from the engine's own tensors, caught with forward hooks:
    the input of every layer's W_O (the heads' outputs side by side) and the input of the
    final norm (the residual stream)."""
    net = model.network
    seen = {}
    hooks = [block.attn.out.register_forward_hook(
        lambda mod, args, out, layer=layer: seen.__setitem__(layer, args[0][0].detach()))
        for layer, block in enumerate(net.blocks)]
    hooks.append(net.final_ln.register_forward_hook(
        lambda mod, args, out: seen.__setitem__("resid", args[0][0].detach())))
    try:
        model.logits(text)
    finally:
        for hook in hooks:
            hook.remove()
    x = seen["resid"][position].double()
    gamma = net.final_ln.weight.double()
    eps = net.final_ln.eps
    unembed = net.unembedding().double()
    u = unembed[target] - unembed[contrast]
    layer_norm = isinstance(net.final_ln, torch.nn.LayerNorm)
    s = torch.sqrt(x.var(unbiased=False) + eps) if layer_norm else torch.sqrt(
        (x ** 2).mean() + eps)
    terms = np.zeros((len(net.blocks), net.blocks[0].attn.n_head))
    for layer, block in enumerate(net.blocks):
        d_k = block.attn.d_head
        heads_in = seen[layer][position].double()
        for h in range(block.attn.n_head):
            out = heads_in[h * d_k:(h + 1) * d_k] @ block.attn.out.weight[:, h * d_k:(h + 1) * d_k].double().T
            if layer_norm:
                out = out - out.mean()
            terms[layer, h] = float((out / s) @ (gamma * u))
    return terms


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_direct_logit_attribution_sums_and_matches_hooked_heads(family, gpt2_folder,
                                                                llama_folder):
    model = load_model(gpt2_folder if family == "gpt2" else llama_folder)
    position = len(model.encode(TEXT).input_ids) - 1
    target, contrast = model.token_id(" Mary"), model.token_id(" John")
    result = direct_logit_attribution(model, TEXT, position, " Mary", " John")
    logits = model.logits(TEXT)
    assert abs(result.total - float(logits[position, target] - logits[position, contrast])) < 1e-4
    assert abs(result.sum_of_components - result.total) < 1e-4
    assert np.abs(result.heads - independent_head_terms(model, TEXT, position, target,
                                                        contrast)).max() < 1e-5
    assert result.heads.std() > 1e-3  # the heads differ: the comparison means something
    assert "MLP" in " ".join(result.rest) and "embeddings" in result.rest
    if family == "gpt2":
        assert "final norm bias" in result.rest and "L0 attention bias" in result.rest


def test_attribution_refuses_post_norm_models(bert_model):
    with pytest.raises(InputError, match="pre-norm"):
        direct_logit_attribution(bert_model, "The cat sat.", 1, "the", "a")


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_one_run_gives_what_the_separate_calls_give(family, gpt2_folder, llama_folder):
    """model.run: the page's single forward pass. Its trace, predictions, metric and
    attribution must be the numbers each separate call computes with its own forward."""
    model = load_model(gpt2_folder if family == "gpt2" else llama_folder)
    run = model.run(TEXT)
    assert np.array_equal(run.trace.attentions, model.trace(TEXT).attentions)
    assert run.trace.display_tokens == model.trace(TEXT).display_tokens
    alone, from_run = model.predict(TEXT, k=4), run.predict(k=4)
    assert np.array_equal(alone.top_ids, from_run.top_ids)
    assert np.abs(alone.top_probs - from_run.top_probs).max() < 1e-6
    assert np.abs(alone.next_logprob - from_run.next_logprob).max() < 1e-6
    for kind in ("logit_diff", "logit", "logprob"):
        metric = TargetMetric(-2, " Mary", " John" if kind == "logit_diff" else None, kind)
        assert abs(run.score(metric) - model.score(TEXT, metric=metric)) < 1e-5, kind
    # the attribution of the run's own forward: each head's direct term from hooks
    # (direct_logit_attribution is attribute_run of a run without maps: no other reference)
    position = len(model.encode(TEXT).input_ids) - 1
    from_run = attribute_run(run, position, " Mary", " John")
    expected = independent_head_terms(model, TEXT, position, model.token_id(" Mary"),
                                      model.token_id(" John"))
    assert np.abs(from_run.heads - expected).max() < 1e-5
    logits = model.logits(TEXT)[position]
    assert abs(from_run.total - float(logits[model.token_id(" Mary")]
                                      - logits[model.token_id(" John")])) < 1e-4
    # without maps: no trace, the same attribution
    bare = model.run(TEXT, maps=False)
    assert bare.trace is None
    assert np.abs(attribute_run(bare, position, " Mary", " John").heads
                  - from_run.heads).max() < 1e-9


def test_a_run_of_a_masked_lm_points_to_its_own_forward(bert_model):
    run = bert_model.run("The cat sat on the mat.")
    assert run.trace.n_tokens == run.n_tokens
    with pytest.raises(InputError, match="masked-LM"):
        run.predict()
    with pytest.raises(InputError, match="masked-LM"):
        run.score(TargetMetric(2, "cat", kind="logit"))


def test_runner_up_is_the_best_guess_other_than_the_texts_own_token():
    from mha_viz.models.model import Predictions

    pred = Predictions(kind="target", tokens=["a", "b"], token_ids=[7, 3],
                       positions=np.arange(2), top_ids=np.array([[7, 5, 3], [2, 3, 9]]),
                       top_probs=np.zeros((2, 3)), top_tokens=[[], []],
                       next_logprob=np.zeros(2))
    assert pred.runner_up(0) == 5 and pred.runner_up(1) == 2
    causal = Predictions(kind="next_token", tokens=["a", "b", "c"], token_ids=[1, 4, 8],
                         positions=np.arange(3), top_ids=np.array([[4, 6], [9, 8], [8, 2]]),
                         top_probs=np.zeros((3, 2)), top_tokens=[[], [], []],
                         next_logprob=np.zeros(2))
    # position 0 predicts token 1 (id 4), position 1 token 2 (id 8), the last nothing
    assert [causal.runner_up(r) for r in range(3)] == [6, 9, 8]
    single = Predictions(kind="target", tokens=["a"], token_ids=[7], positions=np.arange(1),
                         top_ids=np.array([[7]]), top_probs=np.zeros((1, 1)),
                         top_tokens=[[]], next_logprob=np.zeros(1))
    assert single.runner_up(0) == 7
