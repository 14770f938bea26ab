"""Training a dictionary (analysis.features.train_sae, `mha-viz train-sae`) on a random GPT-2:
what it writes SAELens loads, the quality figures it reports equal FVU, L0 and the dead share
computed here from SAELens's own encode and decode of activations read from transformers
with forward hooks; the same seed gives the same dictionary; a checkpoint resumes; bad
settings get a message."""

import json

import numpy as np
import pytest
import torch
from tests.support.hf_reference import capture_input, hooked

from mha_viz import InputError, load_sae
from mha_viz.analysis import train_sae

pytestmark = pytest.mark.unit
sae_lens = pytest.importorskip("sae_lens")

WORDS = ("the cat sat on a mat while dogs ran past old trees and birds sang over quiet "
         "rivers near small towns where people walked slowly home").split()


def texts(count, seed):
    generator = np.random.default_rng(seed)
    return [" ".join(generator.choice(WORDS, size=40)) for _ in range(count)]


@pytest.fixture(scope="module")
def trained(gpt2_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("trained")
    result = train_sae(gpt2_model, "hook_z", 1, texts(60, 0), d_sae=48, k=6, seed=3,
                       held_out_texts=texts(8, 1), out=out, seg_len=32, batch_tokens=256,
                       buffer_tokens=1024)
    return result, out / "L1.hook_z"


def test_saelens_loads_it_and_the_figures_are_its_own(trained, gpt2_folder):
    from transformers import GPT2LMHeadModel

    result, folder = trained
    theirs = sae_lens.SAE.load_from_disk(str(folder))
    assert theirs.cfg.metadata.hook_name == "blocks.1.attn.hook_z"
    assert theirs.cfg.k == 6 and theirs.cfg.d_sae == 48
    hf = GPT2LMHeadModel.from_pretrained(gpt2_folder, attn_implementation="eager").eval()
    from mha_viz import load_model

    model = load_model(gpt2_folder)
    rows = []
    for text in texts(8, 1):  # segments of 32 tokens, position 0 of each left out
        ids = model.encode(text).input_ids
        for start in range(0, len(ids), 32):
            piece = ids[start:start + 32]
            if len(piece) < 8:
                continue
            store = {}
            with torch.no_grad(), hooked([capture_input(hf.transformer.h[1].attn.c_proj,
                                                        store, "z")]):
                hf(torch.tensor([piece]))
            rows.append(store["z"][0, 1:])
    x = torch.cat(rows)
    with torch.no_grad():
        acts = theirs.encode(x.view(len(x), 4, 16))
        out = theirs.decode(acts).reshape(len(x), -1)
    x, out = x.double(), out.double()
    fvu = float((x - out).pow(2).sum() / (x - x.mean(0)).pow(2).sum())
    quality = result.quality
    assert quality.tokens == len(x)
    assert quality.fvu == pytest.approx(fvu, rel=1e-4)
    assert quality.l0 == pytest.approx(float((acts != 0).sum(-1).double().mean()), rel=1e-6)
    assert quality.dead_fraction == pytest.approx(1 - float((acts != 0).any(0).double().mean()))
    assert quality.fvu < 0.9  # it learned something
    cfg = json.loads((folder / "cfg.json").read_text())
    assert cfg["metadata"]["mha_viz_training"]["held_out"]["fvu"] == round(quality.fvu, 4)


def test_the_same_seed_gives_the_same_dictionary(trained, gpt2_model):
    result, folder = trained
    again = train_sae(gpt2_model, "hook_z", 1, texts(60, 0), d_sae=48, k=6, seed=3,
                      seg_len=32, batch_tokens=256, buffer_tokens=1024)
    torch.testing.assert_close(again.sae.W_dec, load_sae(folder).W_dec, rtol=0, atol=0)
    other = train_sae(gpt2_model, "hook_z", 1, texts(60, 0), d_sae=48, k=6, seed=4,
                      seg_len=32, batch_tokens=256, buffer_tokens=1024)
    assert not torch.equal(other.sae.W_dec, again.sae.W_dec)


def test_a_checkpoint_resumes_and_epochs_read_the_cache(gpt2_model, tmp_path):
    settings = dict(d_sae=32, k=4, seed=0, seg_len=32, batch_tokens=128, buffer_tokens=512,
                    checkpoint=tmp_path / "state", checkpoint_every=2)
    first = train_sae(gpt2_model, "resid_pre", 1, texts(20, 5), **settings)
    resumed = train_sae(gpt2_model, "resid_pre", 1, texts(40, 5), **settings)
    assert resumed.steps > first.steps  # went on from the checkpoint's step, new texts only
    cached = train_sae(gpt2_model, "resid_post", 0, texts(20, 5), d_sae=32, k=4, seg_len=32,
                       batch_tokens=128, buffer_tokens=512, epochs=3, cache=tmp_path / "c")
    once = train_sae(gpt2_model, "resid_post", 0, texts(20, 5), d_sae=32, k=4, seg_len=32,
                     batch_tokens=128, buffer_tokens=512)
    assert cached.steps > 2 * once.steps and cached.tokens == once.tokens
    assert json.loads((tmp_path / "c" / "meta.json").read_text())["complete"]


@pytest.mark.parametrize("settings, words", [
    (dict(site="hook_q"), "site must be"), (dict(layer=5), "layer must be"),
    (dict(k=0), "k must be"), (dict(architecture="gated"), "trains topk or standard"),
    (dict(epochs=2), "give cache="), (dict(texts=["hi"]), "fewer than one batch"),
    (dict(save_dtype="int8"), "save_dtype")])
def test_bad_settings_get_a_message(gpt2_model, settings, words):
    call = dict(site="hook_z", layer=1, texts=texts(3, 0), d_sae=16, k=2, seg_len=32)
    call.update(settings)
    with pytest.raises(Exception) as caught:
        train_sae(gpt2_model, **call)
    assert isinstance(caught.value, (InputError, ValueError)) and words in str(caught.value)


def test_the_command_line_writes_a_dictionary(gpt2_folder, tmp_path, capsys):
    from mha_viz.__main__ import main

    corpus = tmp_path / "texts.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": t}) for t in texts(30, 2)))
    code = main(["train-sae", "--model", str(gpt2_folder), "--site", "hook_z", "--site",
                 "resid_pre", "--layer", "1", "--input", str(corpus), "--held-out",
                 str(corpus), "--held-out-limit", "4", "--d-sae", "32", "--k", "4",
                 "--seg-len", "32", "--batch-tokens", "128", "--dtype", "bfloat16",
                 "--out", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert code == 0 and "blocks.1.attn.hook_z" in printed and "FVU" in printed
    for name in ("L1.hook_z", "L1.resid_pre"):
        assert sae_lens.SAE.load_from_disk(str(tmp_path / "out" / name)).dtype == torch.bfloat16
    assert main(["train-sae", "--model", str(gpt2_folder), "--site", "hook_z", "--layer",
                 "9", "--input", str(corpus), "--out", str(tmp_path / "x")]) == 2
