"""GGUF files of every architecture llama.cpp writes beside llama (qwen2, qwen3, gemma, gemma2,
gemma3, phi3), written by mha_viz.testing.write_gguf from a random checkpoint of transformers'
own classes: in F32, our engine on the file equals transformers on the folder it was written
from (maps within 1e-5, logits within 1e-4); quantised (Q8_0), it equals transformers' own
reading of the same file. transformers reads no GGUF of architecture gemma or gptneox:
those are compared with their folders only. transformers' GGUF reader leaves settings out of the config it
builds (Qwen3's head_dim, Gemma's soft-caps, windows, query_pre_attn_scalar, Phi-3's partial
rotary), so its reading is given the folder's config: what it reads from the file are the
weights (names, dequantisation, Gemma's 1 + w norms) and the tokenizer."""

import numpy as np
import pytest
import torch
from tests.support.family_configs import FAMILIES
from tests.support.gpt2_bert_parity import TEXTS
from tests.support.llama_parity import assert_parity, reference_model

from mha_viz import load_model
from mha_viz.testing import make_decoder_checkpoint, write_gguf


def _family(case, **changes):
    config_class, model_class, config = FAMILIES[case]
    return config_class, model_class, {**config, **changes}


# test_family_parity's checkpoints, each with what its family adds switched on (Qwen3's
# QK-norm, Gemma 2's soft-caps and window, Gemma 3's two RoPE bases, linear scaling and a
# layer pattern other than llama.cpp's five-to-one, Phi-3's fusions, window and partial
# rotary), scaled as llama.cpp scales the scores (query_pre_attn_scalar = head_dim; GGUF
# has no key for another), and Qwen2 with its Q/K/V biases
SHAPES = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        intermediate_size=128, max_position_embeddings=256, rope_theta=100.0)),
    "qwen3": _family("qwen3", tie_word_embeddings=True),
    "gemma": _family("gemma"),
    "gemma2": _family("gemma2", query_pre_attn_scalar=16),
    "gemma3": _family("gemma3", query_pre_attn_scalar=16),
    "phi3": _family("phi3"),
    # Pythia: parallel attention and MLP, a quarter of each head rotating, Q/K/V fused head
    # by head (llama.cpp stores them as [Q; K; V])
    "pythia": _family("pythia"),
}
TRANSFORMERS_READS = ["qwen2", "qwen3", "gemma2", "gemma3", "phi3"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """factory(case, tensor_type) -> (folder, path of its GGUF alone in a folder)."""
    folders, files = {}, {}

    def factory(case, tensor_type):
        if case not in folders:
            config_class, model_class, config = SHAPES[case]
            folders[case] = make_decoder_checkpoint(tmp_path_factory.mktemp(case),
                                                    config_class, model_class, **config)
        if (case, tensor_type) not in files:
            folder = tmp_path_factory.mktemp(f"{case}_{tensor_type}")
            files[case, tensor_type] = write_gguf(folders[case], folder / f"{case}.gguf",
                                                  tensor_type)
        return folders[case], files[case, tensor_type]

    return factory


def transformers_reading(path, folder):
    """transformers' reading of the GGUF's weights and tokenizer, with the folder's config."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(str(folder))
    config._attn_implementation = "eager"
    ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                               config=config, dtype=torch.float32).eval()
    return ref, AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.mark.parametrize("case", list(SHAPES))
def test_f32_gguf_equals_the_checkpoint_it_was_written_from(written, case):
    folder, path = written(case, "F32")
    model = load_model(path)
    ref = reference_model(folder)
    for text in TEXTS:  # on the ids of the file's tokenizer (the folder's Qwen2 tokenizer
        #                 splits text its own way; the vocabulary is the same)
        assert_parity(model, ref, text)
    assert model.info.n_kv_head == SHAPES[case][2].get("num_key_value_heads", 4)


@pytest.mark.parametrize("case", TRANSFORMERS_READS)
def test_quantised_gguf_equals_transformers_reading_of_it(written, case):
    import gguf

    folder, path = written(case, "Q8_0")
    kinds = {t.tensor_type.name for t in gguf.GGUFReader(path).tensors}
    assert "Q8_0" in kinds
    model = load_model(path)
    ref, tokenizer = transformers_reading(path, folder)
    for text in TEXTS:
        assert_parity(model, ref, text, tokenizer=tokenizer)
    # and near the folder it came from (Q8_0 rounds each weight to 1/127 of its block's max)
    folder_logits = reference_model(folder)(
        **tokenizer(TEXTS[0], return_tensors="pt")).logits[0].detach().numpy()
    logits = model.logits(TEXTS[0])
    assert 0 < np.abs(logits - folder_logits).max() < 0.1 * np.abs(folder_logits).max()


# --- what the metadata says, and what it cannot ---------------------------------------------

GEMMA2_27B = {"general.architecture": "gemma2", "gemma2.block_count": 46,
              "gemma2.embedding_length": 4608, "gemma2.attention.head_count": 32,
              "gemma2.attention.head_count_kv": 16, "gemma2.attention.key_length": 128,
              "gemma2.context_length": 8192, "gemma2.feed_forward_length": 36864,
              "gemma2.attention.sliding_window": 4096, "gemma2.attn_logit_softcapping": 50.0,
              "gemma2.final_logit_softcapping": 30.0, "gemma2.vocab_size": 256000}


def test_gemma_scores_are_scaled_as_llama_cpp_scales_them():
    """No key holds query_pre_attn_scalar: llama.cpp scales by head_dim^-1/2, and by
    (d_model / n_head)^-1/2 in the 27B models (46 layers in Gemma 2), as their configs say
    (query_pre_attn_scalar 144 = 4608 / 32)."""
    from mha_viz.checkpoints.families import gemma

    config = gemma.config_from_gguf(GEMMA2_27B)
    assert config.score_scale == pytest.approx(144 ** -0.5)
    assert (config.attn_softcap, config.final_softcap) == (50.0, 30.0)
    assert config.window_layers == tuple(range(0, 46, 2)) and config.sliding_window == 4096
    nine_b = gemma.config_from_gguf({**GEMMA2_27B, "gemma2.block_count": 42})
    assert nine_b.score_scale == 0.0  # the engine's own head_dim^-1/2


@pytest.mark.parametrize("changes, message", [
    ({"gemma2.attention.sliding_window_pattern": [True, False]}, "lists 2 layers"),
    ({"gemma2.rope.scaling.type": "yarn", "gemma2.rope.scaling.factor": 4.0}, "'yarn'"),
])
def test_metadata_we_cannot_follow_is_named(changes, message):
    from mha_viz.checkpoints.families import gemma
    from mha_viz.core.errors import UnsupportedModelError

    with pytest.raises(UnsupportedModelError, match=message):
        gemma.config_from_gguf({**GEMMA2_27B, **changes})


def test_a_phi3_gguf_with_longrope_factors_is_refused():
    from mha_viz.checkpoints.families import TensorSource, phi3
    from mha_viz.core.errors import UnsupportedModelError

    meta = {"general.architecture": "phi3", "phi3.block_count": 1, "phi3.embedding_length": 64,
            "phi3.attention.head_count": 4, "phi3.context_length": 256,
            "phi3.feed_forward_length": 128}
    source = TensorSource({"rope_factors_long.weight": torch.ones(8)})
    with pytest.raises(UnsupportedModelError, match="longrope"):
        phi3.tensors_from_gguf(source, phi3.config_from_gguf(meta))
