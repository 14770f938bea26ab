"""Circuit tests (faithfulness and necessity under mean, resample and zero ablation) on random
GPT-2 and Llama: the laws that hold exactly, the necessity against forward hooks on
transformers' GPT-2, heads read from a Circuit, and Wang et al.'s ABC reference prompts."""

import random

import numpy as np
import pytest
import torch
from tests.support.hf_reference import (head_outputs, ids_of, logits_with_heads_replaced,
                                        reference_prompts)

from mha_viz.analysis import circuit, circuit_heads, circuit_test
from mha_viz.analysis.prompts import PromptPair, ioi_pairs
from mha_viz.core.errors import InputError

CIRCUIT = [(0, 1), (1, 2), (1, 3)]


@pytest.fixture
def gpt2_pair(patch_models, patch_prompts):
    model, hf, where = patch_models["gpt2"]
    clean, corrupted, target, contrast = patch_prompts["gpt2"]
    return model, hf, where(hf), PromptPair(clean, corrupted, target, contrast)


@pytest.mark.parametrize("ablation", ["mean", "resample", "zero"])
def test_laws(gpt2_pair, ablation):
    """The laws, and the circuit's metric (the heads outside it ablated) against transformers'
    GPT-2 with those heads' slices of c_proj's input replaced: by the mean over the
    reference prompts, by reference random.Random(f"0:{i}").randrange(R) for pair i (the
    seeded draw docs/analyses.md states), or by zeros."""
    model, hf, where, pair = gpt2_pair
    references = reference_prompts(model, pair.clean)
    every = [(l, h) for l in range(model.info.n_layer) for h in range(model.info.n_head)]
    whole = circuit_test(model, [pair] * 3, every, "logit_diff", ablation, references)
    assert whole.faithfulness == pytest.approx(1.0, abs=1e-9)  # nothing outside to ablate
    assert np.allclose(whole.without_circuit, whole.nothing_metric)
    assert whole.necessity == pytest.approx(1 - whole.nothing_metric.mean()
                                            / whole.model_metric.mean())
    part = circuit_test(model, [pair] * 3, CIRCUIT, "logit_diff", ablation, references)
    outside = [h for h in every if h not in CIRCUIT]
    refs = head_outputs(hf, where, [ids_of(model, t) for t in references],
                        {l for l, _ in outside})
    clean_ids = ids_of(model, pair.clean)
    for i, found in enumerate(part.circuit_metric):
        drawn = random.Random(f"0:{i}").randrange(len(references))
        replaced = {}
        for l, h in outside:
            z = refs[l][:, :, h * where.dk:(h + 1) * where.dk]  # [R, T, d_k]
            replaced[l, h] = {"mean": z.mean(0), "resample": z[drawn],
                              "zero": torch.zeros_like(z[0])}[ablation]
        logits = logits_with_heads_replaced(hf, where, clean_ids, replaced)
        assert found == pytest.approx(float(logits[pair.target] - logits[pair.contrast]),
                                      abs=2e-3)
    assert part.spread("faithfulness")["n"] == 3


def test_necessity_under_mean_ablation_equals_hooks(gpt2_pair):
    model, hf, where, pair = gpt2_pair
    references = reference_prompts(model, pair.clean)
    refs = head_outputs(hf, where, [ids_of(model, t) for t in references], {0, 1})
    replaced = {(l, h): refs[l][:, :, h * where.dk:(h + 1) * where.dk].mean(0)
                for l, h in CIRCUIT}
    logits = logits_with_heads_replaced(hf, where, ids_of(model, pair.clean), replaced)
    expected = float(logits[pair.target] - logits[pair.contrast])
    found = circuit_test(model, [pair], CIRCUIT, "logit_diff", "mean", references)
    assert found.without_circuit[0] == pytest.approx(expected, abs=2e-3)
    assert found.necessity == pytest.approx(1 - expected / found.model_metric[0], abs=1e-2)


def test_heads_of_a_circuit_and_messages(gpt2_pair):
    model, _, _, pair = gpt2_pair
    edges = circuit(model, [pair], metric="logit_diff", top_k=6)
    heads = circuit_heads(model, edges)
    assert heads and all(f"L{l}.H{h}" in edges.nodes for l, h in heads)
    assert circuit_heads(model, ["L1.H2", (0, 1), "MLP0"]) == [(0, 1), (1, 2)]
    with pytest.raises(InputError, match="not a head"):
        circuit_heads(model, [(7, 0)])
    with pytest.raises(InputError, match="ablation must be"):
        circuit_test(model, [pair], CIRCUIT, "logit_diff", "median")


def test_abc_reference_prompts(minilm):
    pairs = ioi_pairs(minilm, 8, seed=1, corruption="abc")
    same = ioi_pairs(minilm, 8, seed=1)
    for abc, pair in zip(pairs, same):
        assert abc.clean == pair.clean and abc.corrupted != pair.corrupted
        names = {abc.target.strip(), abc.contrast.strip()}
        third = set(abc.corrupted.replace(",", " ").replace(".", " ").split()) - set(
            abc.clean.replace(",", " ").replace(".", " ").split())
        assert len(third) == 1 and not third & names
        assert len(minilm.encode(abc.corrupted).input_ids) == len(
            minilm.encode(abc.clean).input_ids)
