"""Our Llama-family engine (RoPE, RMSNorm, SwiGLU, grouped-/multi-query attention) against
transformers' own Llama, Qwen2 and Mistral (eager attention), number for number, from Hugging
Face folders and from GGUF files; and the GGUF writer of mha_viz.testing against transformers'
own GGUF loader, so that the GGUF parity tests stand on a checked fixture."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.support.gpt2_bert_parity import TEXTS
from tests.support.llama_parity import (ATTN_TOL, LOGITS_TOL, SHAPES, assert_parity,
                                        reference_model, reference_run)

from mha_viz import load_model

SCORE_TOL = 1e-4

# plain Llama shapes the GGUF writer must round-trip (Qwen2's biases do not fit GGUF "llama")
GGUF_SHAPES = ["gqa", "mqa_tied", "odd_heads", "head_dim", "mistral"]


@pytest.fixture(scope="session")
def llama_factory(tmp_path_factory):
    """factory(case) -> folder of SHAPES[case]; built once per session."""
    from mha_viz.testing import make_llama_checkpoint

    built = {}

    def factory(case):
        if case not in built:
            built[case] = make_llama_checkpoint(tmp_path_factory.mktemp(f"llama_{case}"),
                                                **SHAPES[case])
        return built[case]

    return factory


@pytest.fixture(scope="session")
def gguf_factory(tmp_path_factory, llama_factory):
    """factory(case, tensor_type) -> path of that checkpoint written as GGUF, alone in its own
    folder (a config.json beside it could be read instead of the file's own metadata)."""
    from mha_viz.testing import write_llama_gguf

    written = {}

    def factory(case, tensor_type):
        key = (case, tensor_type)
        if key not in written:
            folder = tmp_path_factory.mktemp(f"gguf_{case}_{tensor_type}")
            written[key] = write_llama_gguf(llama_factory(case), folder / f"{case}.gguf",
                                            tensor_type)
        return written[key]

    return factory


def reference_gguf(path):
    """transformers' own reading of a GGUF file: the model (float32) and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                               attn_implementation="eager",
                                               dtype=torch.float32).eval()
    return ref, AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def expected_kv_heads(n_head, n_kv_head):
    return [h // (n_head // n_kv_head) for h in range(n_head)]


@pytest.mark.parametrize("case", list(SHAPES))
def test_llama_family_parity(llama_factory, case):
    shape = SHAPES[case]
    folder = llama_factory(case)
    model = load_model(folder)
    n_head, n_kv_head = shape["n_head"], shape["n_kv_head"]
    assert model.info.model_type == shape.get("model_type", "llama")
    assert model.info.family == "llama"  # the family module that read it
    assert (model.info.n_layer, model.info.n_head, model.info.n_kv_head) == (
        shape["n_layer"], n_head, n_kv_head)
    assert model.info.d_head == shape.get("d_head", shape["d_model"] // n_head)
    assert model.info.causal
    ref = reference_model(folder)
    for text in TEXTS:
        trace = assert_parity(model, ref, text)
        assert list(trace.kv_heads) == expected_kv_heads(n_head, n_kv_head)
    upper = np.triu(np.ones((trace.n_tokens,) * 2, dtype=bool), 1)
    assert (trace.attentions[..., upper] == 0).all()


# --- the GGUF writer (a fixture) against transformers' GGUF loader ------------------------


@pytest.mark.parametrize("case", GGUF_SHAPES)
def test_gguf_writer_reads_back_in_transformers(llama_factory, gguf_factory, case):
    """F32 GGUF, read by transformers: the same config, tokens and numbers as the folder."""
    from transformers import AutoTokenizer

    folder = llama_factory(case)
    ref = reference_model(folder)
    gguf_ref, gguf_tokenizer = reference_gguf(gguf_factory(case, "F32"))
    for name in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "hidden_size", "intermediate_size", "vocab_size", "tie_word_embeddings"):
        assert getattr(gguf_ref.config, name) == getattr(ref.config, name), name
    assert gguf_ref.config.rope_parameters["rope_theta"] == ref.config.rope_parameters[
        "rope_theta"]
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    for text in TEXTS:
        ids, attn, logits, _ = reference_run(ref, tokenizer, text)
        gguf_ids, gguf_attn, gguf_logits, _ = reference_run(gguf_ref, gguf_tokenizer, text)
        assert gguf_ids == ids
        assert np.abs(gguf_attn - attn).max() < ATTN_TOL
        assert np.abs(gguf_logits - logits).max() < LOGITS_TOL


def test_gguf_writer_permutes_q_and_k_rows_as_llama_cpp(llama_factory, gguf_factory):
    """GGUF row h*d + 2j + s of attn_q / attn_k is HF row h*d + (d/2)*s + j; attn_v is not
    permuted. Read straight from the file, so this does not depend on any loader."""
    import gguf
    from safetensors.numpy import load_file

    folder = llama_factory("gqa")
    shape = SHAPES["gqa"]
    d = shape["d_model"] // shape["n_head"]
    hf = load_file(str(folder / "model.safetensors"))
    tensors = {t.name: t for t in gguf.GGUFReader(gguf_factory("gqa", "F32")).tensors}
    for name, hf_name, heads in [("attn_q", "q_proj", shape["n_head"]),
                                 ("attn_k", "k_proj", shape["n_kv_head"])]:
        ours = np.asarray(tensors[f"blk.1.{name}.weight"].data)
        theirs = hf[f"model.layers.1.self_attn.{hf_name}.weight"]
        assert ours.shape == theirs.shape == (heads * d, shape["d_model"])
        for h in range(heads):
            for j in range(d // 2):
                for s in range(2):
                    assert np.array_equal(ours[h * d + 2 * j + s], theirs[h * d + d // 2 * s + j])
    assert np.array_equal(np.asarray(tensors["blk.1.attn_v.weight"].data),
                          hf["model.layers.1.self_attn.v_proj.weight"])
    assert "output.weight" in tensors  # untied: the LM head is written
    tied = {t.name for t in gguf.GGUFReader(gguf_factory("mqa_tied", "F32")).tensors}
    assert "output.weight" not in tied and "token_embd.weight" in tied


@pytest.mark.parametrize("tensor_type", ["F16", "Q8_0", "Q4_1"])
@pytest.mark.parametrize("case", ["gqa", "odd_heads"])
def test_gguf_writer_stores_weights_in_the_asked_type(llama_factory, gguf_factory, case,
                                                      tensor_type):
    """Matrices in tensor_type (F16 where rows are no whole number of 32-blocks, as in
    llama.cpp), norms in F32; transformers' loaded weights are exactly the quantize ->
    dequantize round trip of the folder's."""
    import gguf

    path = gguf_factory(case, tensor_type)
    types = gguf.GGMLQuantizationType
    for tensor in gguf.GGUFReader(path).tensors:
        if tensor.name.endswith("norm.weight"):
            expected = types.F32
        elif tensor_type != "F16" and int(tensor.shape[0]) % 32 == 0:  # shape[0]: row length
            expected = types[tensor_type]
        else:
            expected = types.F16
        assert tensor.tensor_type == expected, tensor.name
    folder_weights = reference_model(llama_factory(case)).state_dict()
    gguf_weights = reference_gguf(path)[0].state_dict()
    assert set(gguf_weights) == set(folder_weights)
    for name, weight in folder_weights.items():
        array = weight.numpy()
        if array.ndim == 2 and array.shape[1] % 32 == 0 and tensor_type != "F16":
            qtype = types[tensor_type]
            expected = gguf.quants.dequantize(gguf.quants.quantize(array, qtype), qtype)
        elif array.ndim == 2:
            expected = array.astype(np.float16).astype(np.float32)
        else:
            expected = array
        assert np.array_equal(gguf_weights[name].numpy(), expected), name
        if tensor_type == "Q8_0":  # close to the original too: the quantization is sane
            assert np.abs(gguf_weights[name].numpy() - array).max() < 0.02 * np.abs(array).max()


def test_gguf_writer_refuses_qwen2(llama_factory, tmp_path):
    from mha_viz.testing import write_llama_gguf

    with pytest.raises(ValueError, match="not a plain Llama"):
        write_llama_gguf(llama_factory("qwen2"), tmp_path / "qwen2.gguf")


# --- our engine on GGUF files ---------------------------------------------------------------


@pytest.mark.parametrize("tensor_type", ["F32", "Q8_0"])
def test_gguf_parity(llama_factory, gguf_factory, tensor_type):
    path = gguf_factory("gqa", tensor_type)
    model = load_model(path)
    shape = SHAPES["gqa"]
    assert model.info.model_type == "llama" and model.info.causal
    assert (model.info.n_head, model.info.n_kv_head) == (shape["n_head"], shape["n_kv_head"])
    gguf_ref, gguf_tokenizer = reference_gguf(path)
    for text in TEXTS:
        trace = assert_parity(model, gguf_ref, text, tokenizer=gguf_tokenizer)
        assert list(trace.kv_heads) == expected_kv_heads(shape["n_head"], shape["n_kv_head"])
    if tensor_type == "F32":  # the same numbers as the Hugging Face folder it came from
        folder = llama_factory("gqa")
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        ref = reference_model(folder)
        for text in TEXTS:
            assert_parity(model, ref, text, tokenizer=tokenizer)


# --- the pruning score ----------------------------------------------------------------------


@pytest.mark.parametrize("gate", [0.0, 0.35])
def test_score_and_head_mask(llama_factory, gate):
    """score() is the mean next-token cross-entropy of the reference's logits; a head mask
    scales a query head's output as scaling its slice of o_proj's input columns does."""
    case = "gqa"
    shape = SHAPES[case]
    folder = llama_factory(case)
    model = load_model(folder)
    ref = reference_model(folder)
    text = TEXTS[1]

    def reference_score():
        ids = model.tokenizer(text, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logits = ref(input_ids=ids).logits[0]
        return float(F.cross_entropy(logits[:-1], ids[0, 1:]))

    plain = model.score(text)
    assert abs(plain - reference_score()) < SCORE_TOL
    mask = np.ones((shape["n_layer"], shape["n_head"]), dtype=np.float32)
    d_head = shape["d_model"] // shape["n_head"]
    # two query heads that share a kv head in layer 0, one head in the last layer
    for layer, head in [(0, 0), (0, 1), (shape["n_layer"] - 1, shape["n_head"] - 1)]:
        mask[layer, head] = gate
        weight = ref.model.layers[layer].self_attn.o_proj.weight  # Linear: [out, in]
        weight.data[:, head * d_head:(head + 1) * d_head] *= gate
    masked = model.score(text, head_mask=mask)
    assert abs(masked - plain) > 1e-3  # the mask changed something
    assert abs(masked - reference_score()) < SCORE_TOL


# --- sliding windows ------------------------------------------------------------------------


@pytest.mark.parametrize("case, windowed", [("mistral_window", (0, 1)),
                                            ("qwen2_window", (1, 2))])
def test_a_sliding_window_masks_and_the_context_stays(llama_factory, tmp_path, case, windowed):
    """The window masks keys (query i sees keys i - w + 1 .. i on the windowed layers, every
    earlier key on the others), the context stays max_position_embeddings, and the maps
    rebuilt on demand, saved and reopened, and Inside one head's all equal the forward's."""
    from mha_viz.analysis.one_head.steps import inside_one_head
    from mha_viz.maps.trace import AttentionTrace

    shape = SHAPES[case]
    window = shape["sliding_window"]
    model = load_model(llama_factory(case))
    assert model.info.max_positions == 256  # not the window
    text = TEXTS[1]
    trace = model.trace(text)
    n = trace.n_tokens
    assert n > 4 * window
    far = np.tril(np.ones((n, n), dtype=bool), -window)  # keys window or more tokens back
    for layer in range(shape["n_layer"]):
        beyond = trace.attentions[layer][:, far]
        if layer in windowed:
            assert (beyond == 0).all()
        else:
            assert beyond.max() > 1e-3  # a full layer does read far keys
    lazy = model.trace(text, maps="on_demand")
    np.testing.assert_allclose(lazy.attentions, trace.attentions, atol=1e-6)
    lazy.save(tmp_path / "w.npz")
    reopened = AttentionTrace.load(tmp_path / "w.npz")
    np.testing.assert_allclose(reopened.attentions, trace.attentions, atol=1e-6)
    inside = inside_one_head(model, text, windowed[0], 1)
    np.testing.assert_allclose(inside.weights, trace.attentions[windowed[0], 1], atol=1e-6)
    assert np.isneginf(inside.mask[far]).all()


def test_settings_we_do_not_compute_are_named(tmp_path):
    """A RoPE scaling or an attention layer type mha-viz does not compute, or a window that
    contradicts the layers, is refused with one message naming it, never read as plain."""
    import json

    from mha_viz import UnsupportedModelError
    from mha_viz.testing import make_llama_checkpoint

    folder = make_llama_checkpoint(tmp_path / "m", n_layer=2, n_head=4, n_kv_head=2, d_model=64)
    config = json.loads((folder / "config.json").read_text())
    cases = {
        "rotary scaling 'longrope' is not supported": {
            "rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0, "factor": 2.0}},
        "attention layer types chunked_attention are not supported": {
            "layer_types": ["full_attention", "chunked_attention"]},
        "layer_types lists 3 layers, but the model has 2": {
            "layer_types": ["full_attention"] * 3},
        "sliding-window layers are listed without a sliding_window size": {
            "layer_types": ["sliding_attention", "full_attention"], "sliding_window": None},
    }
    for message, change in cases.items():
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(UnsupportedModelError, match=message):
            load_model(folder)
