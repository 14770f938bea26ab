"""The bundled dictionaries of the induction toy, against transformers' GPT-NeoX (the toy's
last checkpoint, eager attention) and SAELens: they are SAELens folders in bfloat16 with the
model's name and hook name in their metadata; they leave at most 0.10 of the variance
unexplained on repeated random sequences (SAELens's encode and decode of transformers'
z); and layer 1's induction features (those whose largest source, by feature_sources, is
the induction target: the token after the earlier copy) write mostly through the induction
heads (the heads transformers' attention puts on that target): their decoder-norm share on
those two heads is 0.65 on average, against 0.53 for all its features (issue 55
asked for 0.7, which the dictionaries trained here do not reach: docs/analyses.md)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.support.hf_reference import capture_input, capture_output, hooked

from mha_viz import load_model, load_sae
from mha_viz.analysis import feature_firing, feature_heads, feature_sources
from mha_viz.dictionaries import bundled_saes

pytestmark = pytest.mark.unit
sae_lens = pytest.importorskip("sae_lens")

TOY = Path(__file__).resolve().parents[2] / "mha_viz" / "bundled" / "induction-toy"


@pytest.fixture(scope="module")
def toy():
    from transformers import GPTNeoXForCausalLM

    model = load_model("induction-toy")
    hf = GPTNeoXForCausalLM.from_pretrained(TOY / "step3000", attn_implementation="eager")
    return model, hf.float().eval()


@pytest.fixture(scope="module")
def sequences(toy):
    """Repeated random sequences: 10 to 31 distinct characters of the toy's vocabulary
    repeated to fill its 63 characters (after its BOS)."""
    model, _ = toy
    from mha_viz.toys.induction import training_text, vocabulary

    characters = vocabulary(training_text())[2:]  # not BOS, not UNK
    generator = np.random.default_rng(0)
    found = []
    for _ in range(24):
        n = int(generator.integers(10, 32))
        passage = "".join(generator.choice(characters, n, replace=False))
        found.append((model.encode((passage * 7)[:63]).input_ids, n))
    return found


def hf_run(hf, ids, layer):
    store = {}
    module = hf.gpt_neox.layers[layer].attention.dense
    with torch.no_grad(), hooked([capture_input(module, store, "z")]):
        out = hf(torch.tensor([ids]), output_attentions=True)
    return store["z"][0], out.attentions[layer][0]


def test_bundled_folders_are_saelens_folders():
    names = bundled_saes()
    assert {"induction-toy/L0.hook_z", "induction-toy/L1.hook_z",
            "induction-toy/L1.resid_pre"} <= set(names)
    for name, folder in names.items():
        cfg = json.loads((folder / "cfg.json").read_text())
        assert cfg["dtype"] == "bfloat16" and cfg["metadata"]["model_name"] == name.split("/")[0]
        assert (folder / "sae_weights.safetensors").stat().st_size < 10 * 2**20
        assert sae_lens.SAE.load_from_disk(str(folder)).cfg.metadata.hook_name == \
            cfg["metadata"]["hook_name"] == load_sae(name).hook_name


@pytest.mark.parametrize("layer", [0, 1])
def test_variance_unexplained_on_repeated_random_sequences(toy, sequences, layer):
    model, hf = toy
    theirs = sae_lens.SAE.load_from_disk(str(bundled_saes()[f"induction-toy/L{layer}.hook_z"]))
    x = torch.cat([hf_run(hf, ids, layer)[0][1:] for ids, _ in sequences])  # position 0 left out
    with torch.no_grad():
        out = theirs.decode(theirs.encode(x.view(len(x), 4, 16))).reshape(len(x), -1)
    x, out = x.double(), out.double()
    fvu = float((x - out).pow(2).sum() / (x - x.mean(0)).pow(2).sum())
    assert fvu <= 0.10, fvu


def test_the_residual_dictionary_on_repeated_random_sequences(toy, sequences):
    """The stream entering layer 1 (transformers' hidden state after layer 0), through
    SAELens: at most 0.10 of its variance left unexplained (the why panel's features)."""
    _, hf = toy
    theirs = sae_lens.SAE.load_from_disk(str(bundled_saes()["induction-toy/L1.resid_pre"]))
    with torch.no_grad():
        x = torch.cat([hf(torch.tensor([ids]), output_hidden_states=True).hidden_states[1][0, 1:]
                       for ids, _ in sequences])  # position 0 left out
        out = theirs.decode(theirs.encode(x))
    x, out = x.double(), out.double()
    fvu = float((x - out).pow(2).sum() / (x - x.mean(0)).pow(2).sum())
    assert fvu <= 0.10, fvu


def test_induction_features_write_through_the_induction_heads(toy, sequences):
    model, hf = toy
    sae = load_sae("induction-toy/L1.hook_z", model=model)
    on_target = np.zeros(4)
    count = 0
    for ids, n in sequences:
        attentions = hf_run(hf, ids, 1)[1]
        for query in range(n + 1, len(ids)):
            on_target += attentions[:, query, query - n + 1].numpy()
            count += 1
    induction_heads = np.flatnonzero(on_target / count > 0.3)
    assert 1 <= len(induction_heads) <= 2
    at_target = {}  # feature -> [its largest source is the induction target?] per firing
    for ids, n in sequences[:6]:
        firing = feature_firing(model, sae, ids)
        for query in range(n + 2, len(ids), 3):
            for feature, _ in firing.at(query, 8):
                terms = feature_sources(model, sae, ids, query, feature).terms
                source = np.unravel_index(np.abs(terms).argmax(), terms.shape)[1]
                at_target.setdefault(feature, []).append(source == query - n + 1)
    induction = [f for f, seen in at_target.items() if np.mean(seen) > 0.5]
    assert len(induction) >= 10
    shares = feature_heads(sae)[:, induction_heads].sum(1)
    others = [f for f in at_target if f not in induction]
    assert shares[induction].mean() >= 0.6, np.round(np.sort(shares[induction]), 2)
    assert shares[induction].mean() > shares.mean() + 0.1 and len(others) < len(induction)


def test_the_feature_a_source_builds_most_is_picked_among_the_active_ones(toy):
    """feature_from_source against SAELens's encoder and transformers' own attention and
    values: of the features SAELens finds active at the query, the one whose parts at the
    source (alpha_qk^h v_k^h . W_enc[h-block, f], summed over heads) are largest; its terms
    there equal those products."""
    from mha_viz.analysis import feature_from_source, induction_example

    model, hf = toy
    text = "the cat sat on the mat. the cat sat on the mat."
    case = induction_example(model.trace(text))  # where to look: the induction target
    query, source = case.query, case.key
    ids = model.encode(text).input_ids
    theirs = sae_lens.SAE.load_from_disk(str(bundled_saes()["induction-toy/L1.hook_z"]))
    store = {}
    attention = hf.gpt_neox.layers[1].attention
    with torch.no_grad(), hooked([capture_input(attention.dense, store, "z"),
                                  capture_output(attention.query_key_value, store, "qkv")]):
        attentions = hf(torch.tensor([ids]), output_attentions=True).attentions[1][0]
    n_head, d_head = attentions.shape[0], store["z"].shape[-1] // attentions.shape[0]
    values = store["qkv"][0].view(len(ids), n_head, 3 * d_head)[..., 2 * d_head:]  # [T, H, d]
    with torch.no_grad():
        z = store["z"][0, query:query + 1].float().view(1, n_head, d_head)  # hook_z's shape
        active = torch.nonzero(theirs.encode(z)[0] > 0)
        w_enc = theirs.W_enc.float().reshape(n_head, d_head, -1)
    at_source = {int(f): (attentions[:, query, source, None] * values[source]
                          * w_enc[:, :, int(f)]).sum(-1) for f in active.flatten()}
    best = max(at_source, key=lambda f: (float(at_source[f].sum()), -f))
    found = feature_from_source(model, load_sae("induction-toy/L1.hook_z", model=model), ids,
                                query, source)
    assert found.feature == best
    np.testing.assert_allclose(found.terms[:, source], at_source[best].numpy(), atol=1e-4)
    assert abs(found.terms.sum() + found.bias - found.pre_activation) < 1e-6
