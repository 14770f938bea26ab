"""Edge attribution patching and circuits: the edge scores into a reader, summed, equal the
first-order estimate computed with hooks on transformers' own GPT-2 and Llama (the gradient of
the metric with respect to that reader's input, through transformers' own norm and
projection); a circuit of every edge is the clean model, of none the corrupted one."""

import numpy as np
import pytest
import torch
from tests.support.hf_reference import hf_metric, ids_of, target_metric

from mha_viz import TargetMetric
from mha_viz.analysis.circuits import (circuit, circuit_metric, edge_attribution_patching,
                                       graph_nodes)
from mha_viz.analysis.patching import prepare_pairs
from mha_viz.core.errors import InputError


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_edges_into_a_reader_sum_to_the_first_order_estimate_from_hooks(patch_models, patch_prompts,
                                                                        family):
    model, hf, where = patch_models[family]
    where = where(hf)
    clean, corrupted, target, contrast = patch_prompts[family]
    clean_ids, corrupted_ids = ids_of(model, clean), ids_of(model, corrupted)
    metric = target_metric(patch_prompts[family])
    scores = edge_attribution_patching(model, clean, corrupted, metric)
    final_norm = hf.transformer.ln_f if family == "gpt2" else hf.model.norm
    layer, head = where.n_layer - 1, 1
    block_in, final_in = {}, {}

    def keep(store, key):
        def hook(mod, args):
            store[key] = args[0]
            args[0].retain_grad()
        return hook
    handles = [where.block(layer).register_forward_pre_hook(keep(block_in, "x")),
               final_norm.register_forward_pre_hook(keep(final_in, "x"))]
    q_out = {}

    def keep_q(mod, args, output):
        q_out["q"] = output
        output.retain_grad()
    handles.append(where.qkv_module("q", layer).register_forward_hook(keep_q))
    logits = hf(torch.tensor([corrupted_ids])).logits[0, -1]
    (logits[target] - logits[contrast]).backward()
    for handle in handles:
        handle.remove()
    with torch.no_grad():
        clean_in, clean_final = {}, {}
        h1 = where.block(layer).register_forward_pre_hook(
            lambda mod, args: clean_in.update(x=args[0].clone()))
        h2 = final_norm.register_forward_pre_hook(
            lambda mod, args: clean_final.update(x=args[0].clone()))
        hf(torch.tensor([clean_ids]))
        h1.remove()
        h2.remove()
    # into the logits: the change of the final stream times the gradient there
    expected = float(((clean_final["x"] - final_in["x"].detach()) * final_in["x"].grad).sum())
    into_logits = np.nansum(scores.scores[:, scores.downstream.index("logits")])
    assert abs(into_logits - expected) < 2e-3
    # into one head's query: the gradient of that query alone, back through transformers'
    # own norm and projection to the stream it reads
    ln = where.block(layer).ln_1 if family == "gpt2" else where.block(layer).input_layernorm
    cols = where.qkv_slice("q", head)
    grad_q = q_out["q"].grad[..., cols]
    x = block_in["x"].detach().requires_grad_(True)
    projected = where.qkv_module("q", layer)(ln(x))[..., cols]
    (gradient,) = torch.autograd.grad(projected, x, grad_q)
    expected = float(((clean_in["x"] - x.detach()) * gradient).sum())
    into_q = np.nansum(scores.scores[:, scores.downstream.index(f"L{layer}.H{head}.q")])
    assert abs(into_q - expected) < 2e-3


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_circuit_of_every_edge_is_the_model_and_of_none_the_corrupted_run(patch_models,
                                                                         patch_prompts,
                                                                         family):
    model, hf, _ = patch_models[family]
    clean, corrupted, target, contrast = patch_prompts[family]
    metric = target_metric(patch_prompts[family])
    prepared = prepare_pairs(model, clean, corrupted, metric)
    batch = next(prepared.batches(1))
    _, _, valid = graph_nodes(model)
    everything = circuit_metric(model, batch, "logit_diff", valid)
    nothing = circuit_metric(model, batch, "logit_diff", np.zeros_like(valid))
    # transformers' own runs of the clean and the corrupted prompt
    assert abs(everything[0] - hf_metric(hf, ids_of(model, clean), target, contrast)) < 2e-3
    assert abs(nothing[0] - hf_metric(hf, ids_of(model, corrupted), target, contrast)) < 2e-3
    scores = edge_attribution_patching(model, clean, corrupted, metric)
    found = circuit(model, clean, corrupted, metric, top_k=int(valid.sum()), scores=scores)
    assert found.n_edges == int(valid.sum())
    assert abs(found.faithfulness - 1) < 1e-3
    small = circuit(model, clean, corrupted, metric, top_k=5, scores=scores)
    assert small.n_edges == 5 and np.isfinite(small.faithfulness)
    assert [abs(e.score) for e in small.edges] == sorted((abs(e.score) for e in small.edges),
                                                        reverse=True)


def test_graph_edges_only_point_up(patch_models):
    model, _, _ = patch_models["llama"]
    upstream, downstream, valid = graph_nodes(model)
    n_layer, n_head = model.info.n_layer, model.info.n_head
    assert len(upstream) == 1 + n_layer * (n_head + 1)
    assert len(downstream) == n_layer * (3 * n_head + 1) + 1
    assert valid[upstream.index("L0.H0"), downstream.index("MLP0")]
    assert not valid[upstream.index("L0.H0"), downstream.index("L0.H1.q")]
    assert not valid[upstream.index("MLP0"), downstream.index("MLP0")]
    assert valid[upstream.index("MLP0"), downstream.index("L1.H0.k")]
    assert valid[:, downstream.index("logits")].all()


def test_post_norm_models_are_refused(bert_model):
    with pytest.raises(InputError, match="pre-norm model"):
        edge_attribution_patching(bert_model, "a b c", "a b d", TargetMetric(-1, 5, 6))
