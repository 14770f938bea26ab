"""The bundled SmolLM2 dictionaries (layer 23: the name movers' layer, docs/ioi.md) against
transformers' LlamaForCausalLM read from the same GGUF, eager attention, with SAELens:
feature score attribution sums to transformers' pre-softmax scores (1e-3 of the row's
largest) on the example IOI prompt; and the variance they leave unexplained on English
prose written for this test (SAELens's encode and decode of transformers' activations,
position 0 left out as in training) is within issue 55's 0.30: measured 0.21 (residual) and
0.22 (hook_z) when they were bundled (0.17 and 0.20 on the held-out texts of their training
sources, docs/analyses.md, "Features at the head"). The dictionaries bundled before them
(1,024 features on 50k tokens) left 0.38 and 0.47 here, and fail this test."""

import numpy as np
import pytest
import torch
from tests.support.hf_reference import capture_input, hooked
from tests.support.score_reference import scores_read
from tests.support.smollm2 import gguf_folder, reference, smollm2  # noqa: F401

from mha_viz import load_sae
from mha_viz.analysis import feature_heads, feature_score_attribution

pytestmark = pytest.mark.slow
sae_lens = pytest.importorskip("sae_lens")

LAYER = 23
IOI = "When Mary and John went to the store, John gave a drink to"
# English prose written for this test (held out of every dictionary's training text)
PROSE = [
    "On Sunday morning my grandmother walked to the market with a basket on her arm. She "
    "bought tomatoes, a loaf of bread and a small bunch of flowers for the kitchen table, and "
    "on the way home she stopped to talk with a neighbour about the rain.",
    "The train was late again, so the passengers stood on the platform and looked at their "
    "phones. A man in a grey coat read a newspaper, a child asked her father when they would "
    "arrive, and a dog waited patiently beside its owner's suitcase.",
    "Learning to ride a bicycle takes a little courage and a lot of practice. At first you "
    "wobble and put your feet down every few metres, but one day you notice that you have "
    "been riding for a whole minute without thinking about it at all.",
    "When the storm finally passed, the village came out to look at the damage. A few roof "
    "tiles had fallen into the street and an old tree had lost a branch, but nobody was hurt, "
    "and by the evening the children were playing outside again.",
]


@pytest.fixture(scope="module")
def saes(smollm2):  # noqa: F811
    return (load_sae("smollm2/L23.hook_z", model=smollm2),
            load_sae("smollm2/L23.resid_pre", model=smollm2))


def test_score_terms_sum_to_transformers_scores(smollm2, reference, saes):  # noqa: F811
    hf, _ = reference
    _, resid = saes
    ids = smollm2.encode(IOI).input_ids
    store = []
    with scores_read(store), torch.no_grad():
        hf(torch.tensor([ids]))
    row_of = store[0][LAYER][0]
    for head in range(smollm2.info.n_head):
        found = feature_score_attribution(smollm2, ids, LAYER, head, len(ids) - 1, sae=resid)
        want = row_of[head, -1].numpy()
        error = np.abs(found.terms.sum((0, 1)) - want).max()
        assert error <= 1e-3 * np.abs(want).max(), head
        errors = found.terms[found.query_sources.index("error")].sum()
        assert np.isfinite(errors)


def test_what_the_dictionaries_leave_unexplained_on_prose(smollm2, reference, saes):  # noqa: F811
    hf, _ = reference
    hook_z, resid = saes
    attention = hf.model.layers[LAYER]
    z_rows, resid_rows = [], []
    for text in PROSE:
        ids = smollm2.encode(text).input_ids
        store = {}
        with torch.no_grad(), hooked([capture_input(attention.self_attn.o_proj, store, "z"),
                                      capture_input(attention.input_layernorm, store, "x")]):
            hf(torch.tensor([ids]))
        z_rows.append(store["z"][0, 1:])
        resid_rows.append(store["x"][0, 1:])
    found = {}
    for sae, rows in ((hook_z, z_rows), (resid, resid_rows)):
        theirs = sae_lens.SAE.load_from_disk(str(sae.folder))
        x = torch.cat(rows)
        shaped = x.view(len(x), 9, 64) if sae.site == "hook_z" else x
        with torch.no_grad():
            acts = theirs.encode(shaped)
            out = theirs.decode(acts).reshape(len(x), -1)
        x, out = x.double(), out.double()
        found[sae.site] = float((x - out).pow(2).sum() / (x - x.mean(0)).pow(2).sum())
        assert float((acts != 0).sum(-1).double().mean()) <= sae.k
    assert found["resid_pre"] <= 0.30 and found["hook_z"] <= 0.30, found
    assert feature_heads(hook_z).shape == (hook_z.d_sae, 9)

