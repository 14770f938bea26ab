"""bfloat16 and float16 against transformers run in the same dtype, on random checkpoints of
each family (GPT-2's LayerNorm and written-out GELU, Llama's grouped-query RoPE and RMSNorm,
Qwen3's QK-norm, Gemma 2's soft-caps and float32-scaled norms, Pythia's parallel MLP, Phi's
biased LM head, ...), with the tolerances measured here (docs/analyses.md, "Precision").

Our engine rounds where transformers rounds (engine/norms.py, config.ACTIVATIONS), so the
logits come out equal to a few units in the last place of the logits' dtype. The maps differ
by the rounding transformers applies to the maps it returns (it hands out the softmax rounded
to the model's dtype; we hand out the float32 softmax the product with V rounds): at most half
a unit in the last place of a probability, 2^-9 in bfloat16, 2^-12 in float16. float32 stays
exact (test_family_parity, 1e-5)."""

import numpy as np
import pytest
import torch
from tests.support.family_configs import FAMILIES
from tests.support.gpt2_bert_parity import TEXTS

from mha_viz import load_model
from mha_viz.testing import make_decoder_checkpoint, make_gpt2_checkpoint, make_llama_checkpoint

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
# (maps, logits in units in the last place of the logits' dtype), measured with -s (each test
# prints its largest differences): the maps differ by transformers' rounding of the maps it
# returns, at most half a unit in the last place of a probability below 1, and the logits
# not at all
TOLERANCES = {"bfloat16": (2 ** -9 + 1e-7, 0), "float16": (2 ** -12 + 1e-7, 0)}
# GPT-2 in float16 only: transformers' Conv1D (addmm on [in, out] weights) and our Linear
# round differently (not in bfloat16): 1.1e-3 on the maps, 1.5 units on the logits measured
LOOSER = {("gpt2", "float16"): (2 ** -9 + 1e-7, 2)}
# families whose transformers code rounds in an order we do not copy (GPT-J and GPT-Neo
# compute their scores in float32; OLMo's weightless LayerNorm, OLMo 2's norms and Mixtral's
# router round elsewhere): measured (maps; logits in units in the last place) bfloat16 1.9e-2,
# 1.0e-2, 2.4e-2, 1.9e-2, 7.0e-2; up to 5.3 units; float16 up to 9.8e-3, 3 units. Within the
# tolerances below, and (as every case) as close to the float32 model as transformers' run
ROUNDED_ELSEWHERE = ["olmo", "olmo2", "mixtral", "gptj", "gpt_neo"]
LOOSER.update({(case, dtype): (2 ** -3 if dtype == "bfloat16" else 2 ** -6, 8)
               for case in ROUNDED_ELSEWHERE for dtype in ("bfloat16", "float16")})
CASES = ["gpt2", "llama_gqa", "qwen3", "gemma2", "gemma3", "pythia", "phi3", "phi", "stablelm",
         "opt", *ROUNDED_ELSEWHERE]

@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    built = {}

    def folder(case):
        if case not in built:
            where = tmp_path_factory.mktemp(case)
            if case == "gpt2":
                built[case] = make_gpt2_checkpoint(where)
            elif case == "llama_gqa":
                built[case] = make_llama_checkpoint(where, n_layer=2, n_head=6, n_kv_head=2,
                                                    d_model=96)
            else:
                config_class, model_class, config = FAMILIES[case]
                built[case] = make_decoder_checkpoint(where, config_class, model_class, **config)
        return built[case]

    return folder


def reference(folder, dtype):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager",
                                                dtype=DTYPES[dtype]).eval()


def ulp(dtype: str, magnitude: float) -> float:
    """The spacing of the dtype's numbers at this magnitude."""
    mantissa_bits = {"bfloat16": 7, "float16": 10}[dtype]
    return 2.0 ** (np.floor(np.log2(max(magnitude, 1e-30))) - mantissa_bits)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", CASES)
def test_half_precision_equals_transformers_in_the_same_dtype(folders, case, dtype):
    folder = folders(case)
    model = load_model(folder, dtype=dtype)
    assert model.network.dtype == DTYPES[dtype] and model.info.dtype == dtype
    ref = reference(folder, dtype)
    exact = load_model(folder)  # float32: how far each is from the exact numbers
    maps_tol, logits_ulps = LOOSER.get((case, dtype), TOLERANCES[dtype])
    worst_maps = worst_logits = 0.0
    for text in [max(TEXTS, key=len)]:  # the dtype, not the text, varies here
        ids = model.encode(text).input_ids
        with torch.no_grad():
            out = ref(torch.tensor([ids]), output_attentions=True)
        their_maps = torch.stack(out.attentions)[:, 0].float().numpy()
        their_logits = out.logits[0].float().numpy()
        trace = model.trace(text)
        assert trace.attentions.dtype == np.float32  # what leaves the model is float32
        logits = model.logits(text)
        assert logits.dtype == np.float32
        maps_gap = float(np.abs(trace.attentions - their_maps).max())
        logits_gap = float(np.abs(logits - their_logits).max())
        worst_maps, worst_logits = max(worst_maps, maps_gap), max(worst_logits, logits_gap)
        assert maps_gap <= maps_tol, (text, maps_gap)
        assert logits_gap <= logits_ulps * ulp(dtype, float(np.abs(their_logits).max())), \
            (text, logits_gap)
        # and the half-precision run is a rounding of the exact one, not another model
        exact_maps = exact.trace(text).attentions
        their_error = float(np.abs(their_maps - exact_maps).max())
        assert float(np.abs(trace.attentions - exact_maps).max()) <= 2 * their_error + 1e-3
        rows = trace.attentions.sum(-1)
        assert np.allclose(rows, 1.0, atol=1e-5)  # float32 rows: no rounding in the sums
    print(f"{case} {dtype}: maps within {worst_maps:.2e}, logits within {worst_logits:.2e}")


def test_half_precision_halves_the_weights(folders):
    folder = folders("llama_gqa")
    sizes = {}
    for dtype in ("float32", "bfloat16", "float16"):
        network = load_model(folder, dtype=dtype).network
        matrices = [p for p in network.parameters() if p.dim() == 2]
        sizes[dtype] = sum(p.numel() * p.element_size() for p in matrices)
        assert {p.dtype for p in matrices} == {getattr(torch, dtype)}
        # RMSNorm weights stay float32 (engine/norms.py), and are the dtype's numbers
        norms = [p for name, p in network.named_parameters() if "ln" in name or "norm" in name]
        assert norms and {p.dtype for p in norms} == {torch.float32}
        assert all(torch.equal(p, p.to(getattr(torch, dtype)).float()) for p in norms)
    assert sizes["bfloat16"] * 2 == sizes["float32"] == sizes["float16"] * 2
