"""The bundled toy T5 (issue 27): trained by mha_viz/toys/translation.py to translate a toy
English into a toy French that puts adjectives after nouns. It translates held-out sentences,
its maps equal transformers' on the same weights, and the mean cross-attention of its last
decoder layer finds the known word alignment; the training script runs and saves a
checkpoint load_model reads."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from mha_viz import analysis as A
from mha_viz import load_model
from mha_viz.checkpoints import resolve
from mha_viz.toys.translation import sentence, train


@pytest.fixture(scope="module")
def toy():
    return load_model("t5-toy")


@pytest.fixture(scope="module")
def held_out():
    rng = random.Random(2026)  # not the training seed's stream
    return [sentence(rng) for _ in range(60)]


def test_it_translates_held_out_sentences(toy, held_out):
    right = 0
    for pair in held_out[:30]:
        trace = toy.trace(pair.source_text, max_new_tokens=20)
        right += trace.label_tokens[:-1] == pair.target and trace.label_tokens[-1] == "</s>"
    assert right / 30 >= 0.95


def test_last_layer_cross_attention_finds_the_alignment(toy, held_out):
    """The most-attended source token of the last decoder layer's mean cross-attention is
    the word each target word translates, for at least 90% of target words (the closing
    </s> left out: it translates no word)."""
    hits = total = 0
    for pair in held_out:
        trace = toy.trace(pair.source_text, target=pair.target_text)
        n_layer = trace.cross_attentions.shape[0]
        mean = A.mean_cross_attention(trace.cross_attentions, [n_layer - 1])
        found = A.strongest_source(mean)[:len(pair.alignment)]
        hits += int((found == np.asarray(pair.alignment)).sum())
        total += len(pair.alignment)
        assert A.alignment_agreement(mean, pair.alignment) == pytest.approx(
            float((found == np.asarray(pair.alignment)).mean()))
    assert hits / total >= 0.9, hits / total


def test_the_bundled_weights_give_transformers_maps(toy, held_out):
    from transformers import AutoModelForSeq2SeqLM

    folder = resolve("t5-toy").path
    reference = AutoModelForSeq2SeqLM.from_pretrained(str(folder),
                                                      attn_implementation="eager").eval()
    pair = held_out[0]
    trace = toy.trace(pair.source_text, target=pair.target_text)
    with torch.no_grad():
        out = reference(input_ids=torch.tensor([trace.source_ids]),
                        decoder_input_ids=torch.tensor([trace.target_ids]),
                        output_attentions=True)
    for kind, maps in (("encoder", out.encoder_attentions), ("decoder", out.decoder_attentions),
                       ("cross", out.cross_attentions)):
        np.testing.assert_allclose(trace.attentions(kind), torch.cat(maps).numpy(), atol=1e-5,
                                   rtol=0)


@pytest.mark.slow
def test_the_training_script_saves_a_checkpoint_load_model_reads(tmp_path):
    threads = torch.get_num_threads()
    try:
        result = train(tmp_path, steps=20, batch=16, log=lambda line: None)
    finally:
        torch.set_num_threads(threads)
    assert 0.0 <= result["accuracy"] <= 1.0 and result["steps"] == 20
    model = load_model(str(tmp_path))
    trace = model.trace("red car follows small dog", target="voiture rouge suit")
    assert trace.source_tokens == ["red", "car", "follows", "small", "dog", "</s>"]
    assert trace.target_tokens == ["<pad>", "voiture", "rouge", "suit"]
    assert trace.cross_attentions.shape[2:] == (4, 6)
