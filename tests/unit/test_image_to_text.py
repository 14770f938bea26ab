"""Cross-modal attention (issue 27, step 7): an encoder that reads a drawn line of characters
in strips, a decoder that writes them. A random checkpoint's maps and logits equal
transformers' T5 and BART fed the same patch embedding (inputs_embeds); the bundled reader-toy reads
held-out images, and each written character's cross-attention falls on the strips where it
was drawn; bad input and bad checkpoints get clear errors."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from mha_viz import InputError
from mha_viz import analysis as A
from mha_viz import load_model
from mha_viz.core.errors import CorruptCheckpointError, UnsupportedModelError
from mha_viz.models.image_to_text import BLANK, ImageToTextModel
from mha_viz.testing import make_image_to_text_checkpoint
from mha_viz.toys.reading import CHARACTERS, HEIGHT, PATCH_WIDTH, WIDTH, draw, patches

TEXT = "40721"


@pytest.fixture(scope="module", params=["t5", "bart"])
def checkpoint(request, tmp_path_factory):
    return make_image_to_text_checkpoint(tmp_path_factory.mktemp(request.param),
                                         family=request.param)


def test_drawing_and_strips():
    drawn = draw(" 4072 1 ")
    assert drawn.text == TEXT and drawn.image.shape == (HEIGHT, WIDTH)
    strips = patches(drawn.image)
    assert strips.shape == (WIDTH // PATCH_WIDTH, HEIGHT * PATCH_WIDTH)
    np.testing.assert_array_equal(strips[3].reshape(HEIGHT, PATCH_WIDTH),
                                  drawn.image[:, 12:16])
    for (start, stop), following in zip(drawn.columns, drawn.columns[1:]):
        assert drawn.image[:, start:stop].sum() > 5 and stop <= following[0]
    assert drawn.image[:, :drawn.columns[0][0]].sum() == 0  # nothing before the first
    for bad, message in (("", "type the digits"), ("4é", "'é' cannot be drawn"),
                         ("1234567", "at most 6 characters")):
        with pytest.raises(InputError, match=message):
            draw(bad)


def test_maps_and_logits_equal_transformers_fed_the_patch_embedding(checkpoint):
    from safetensors.torch import load_file
    from transformers import AutoModelForSeq2SeqLM

    model = load_model(str(checkpoint))
    assert isinstance(model, ImageToTextModel)
    trace = model.trace(TEXT, target="4072")
    assert trace.image.shape == (HEIGHT, WIDTH) and trace.patch_width == PATCH_WIDTH
    assert len(trace.source_tokens) == WIDTH // PATCH_WIDTH
    labels = trace.source_tokens  # each strip: the digit drawn on most of it, or ·
    assert labels[0] == BLANK and labels[-1] == BLANK
    assert [c for i, c in enumerate(labels)
            if c != BLANK and labels[i - 1] != c] == list(TEXT)
    weights = load_file(str(checkpoint / "model.safetensors"))
    strips = torch.tensor(patches(trace.image))[None]
    embedded = strips @ weights["patch_embed.weight"].T + weights["patch_embed.bias"] \
        + weights["patch_positions"][:strips.shape[1]]
    hf = AutoModelForSeq2SeqLM.from_pretrained(str(checkpoint),
                                               attn_implementation="eager").eval()
    with torch.no_grad():
        out = hf(inputs_embeds=embedded, decoder_input_ids=torch.tensor([trace.target_ids]),
                 output_attentions=True)
    for kind, maps in (("encoder", out.encoder_attentions), ("decoder", out.decoder_attentions),
                       ("cross", out.cross_attentions)):
        expected = torch.cat(maps).numpy()
        assert trace.attentions(kind).shape == expected.shape
        np.testing.assert_allclose(trace.attentions(kind), expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(model.logits(TEXT, target="4072"), out.logits[0].numpy(),
                               atol=1e-4, rtol=0)


def test_bad_checkpoints_and_probes(checkpoint, tmp_path):
    model = load_model(str(checkpoint))
    with pytest.raises(InputError, match="reads an image, not tokens"):
        model.stack("encoder")
    assert model.stack("decoder").kind == "decoder"
    import shutil

    wrong = tmp_path / "wrong"
    shutil.copytree(checkpoint, wrong)
    config = json.loads((wrong / "config.json").read_text())
    config["mha_viz_image"]["patch_width"] = 8
    (wrong / "config.json").write_text(json.dumps(config))
    with pytest.raises((UnsupportedModelError, CorruptCheckpointError), match="strips|shape"):
        load_model(str(wrong))
    config["mha_viz_image"] = {"height": "tall", "patch_width": 4, "max_width": 112}
    (wrong / "config.json").write_text(json.dumps(config))
    with pytest.raises(CorruptCheckpointError, match="whole numbers"):
        load_model(str(wrong))
    from safetensors.torch import load_file, save_file

    config["mha_viz_image"] = {"height": HEIGHT, "patch_width": PATCH_WIDTH, "max_width": WIDTH}
    (wrong / "config.json").write_text(json.dumps(config))
    weights = load_file(str(wrong / "model.safetensors"))
    del weights["patch_positions"]
    save_file(weights, str(wrong / "model.safetensors"))
    with pytest.raises(CorruptCheckpointError, match="patch_positions"):
        load_model(str(wrong))


@pytest.fixture(scope="module")
def reader():
    return load_model("reader-toy")


def test_the_reader_reads_held_out_lines(reader):
    rng = random.Random(2026)
    texts = ["".join(rng.choice(CHARACTERS) for _ in range(rng.randint(1, 6)))
             for _ in range(60)]
    right = sum("".join(reader.trace(t).label_tokens[:-1]) == t for t in texts)
    assert right / len(texts) >= 0.9, right / len(texts)


def test_each_written_character_looks_where_it_was_drawn(reader):
    """The strongest strip of the last decoder layer's mean cross-attention, as each
    character is written (teacher-forced on the true text), is one the character was drawn
    on, for at least 90% of characters."""
    rng = random.Random(7)
    hits = total = 0
    for _ in range(60):
        text = "".join(rng.choice(CHARACTERS) for _ in range(rng.randint(1, 6)))
        trace = reader.trace(text, target=text)
        drawn = draw(text)
        last = trace.cross_attentions.shape[0] - 1
        strongest = A.strongest_source(A.mean_cross_attention(trace.cross_attentions, [last]))
        for index in range(len(text)):
            hits += int(strongest[index]) in drawn.strips(index)
            total += 1
    assert hits / total >= 0.9, hits / total


@pytest.mark.slow
def test_the_training_script_saves_a_checkpoint_load_model_reads(tmp_path):
    from mha_viz.toys.reading import train

    logged = []
    result = train(tmp_path, steps=30, batch=16, log=logged.append)
    assert result["steps"] == 30 and 0 <= result["accuracy"] <= 1
    assert logged[0].startswith("step 0: loss") and logged[-1].startswith("step 29")
    model = load_model(str(tmp_path))
    assert isinstance(model, ImageToTextModel) and model.info.model_type == "bart"
    trace = model.trace(TEXT, target=TEXT)
    assert trace.cross_attentions.shape[-1] == WIDTH // PATCH_WIDTH
